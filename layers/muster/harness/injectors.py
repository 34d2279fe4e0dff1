"""Fault-injecting wrappers around the runtime's ports (`muster.runtime.ports`).

Each wrapper takes the real port (the in-memory one, or an AWS adapter) and a
`FaultPlan`, and makes calls fail the way AWS and Kubernetes fail in production:

- **crash**: the process dies (`Crash`, a `BaseException`, so no `except
  Exception` in the runtime catches it), either before the call or after it took
  effect: a crash between any two effects, or between a commit and its effects;
- **conflict**: a conditional write loses a race (`Conflict`);
- **throttle**: DynamoDB, SQS, Step Functions or the API server throttle
  (`Throttled`, which the runtime classifies as transient);
- **lose**: a message or a timer is accepted and never arrives;
- **early timer**: a timer's signal arrives before its deadline (the driver
  delivering it asks `FaultPlan.early`);
- **redelivery**: while a first delivery still runs, the same message is
  delivered again (the wrapped store calls `during_write` after a write commits;
  the driver delivers the duplicate there, as a second Lambda instance would).

Everything is drawn from one seeded random source, so a run is reproducible, and
every injected fault is counted in `FaultPlan.injected`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.core import Admit, Evict, Kind, LogEvent, Timer
from muster.retry import Refused
from muster.runtime.messages import ReconcileSlice
from muster.runtime.ports import Bus, ClusterActions, Conflict, Messages, Timers, WorkloadStore


class Crash(BaseException):
    """The process died here (a Lambda timeout, an out-of-memory kill, a lost host)."""


class Throttled(Exception):
    """A throttling answer, shaped like botocore's so the runtime sees it as transient."""

    def __init__(self, operation: str) -> None:
        super().__init__(f"{operation}: Rate exceeded")
        self.response = {
            "Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }


@dataclass
class FaultPlan:
    """How often each fault happens (probabilities per call), from one seed."""

    seed: int = 0
    crash: float = 0.0
    conflict: float = 0.0
    throttle: float = 0.0
    lose: float = 0.0
    early_timer: float = 0.0
    redeliver: float = 0.0
    # The API server refuses an attempt's release for good (403/422, every try of it).
    refuse_admit: float = 0.0
    # EventBridge answers a lifecycle event's entry with ThrottlingException (retryable).
    throttle_entry: float = 0.0
    enabled: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def roll(self, kind: str, where: str = "") -> bool:
        if not self.enabled:
            return False
        p = float(getattr(self, kind))
        if p > 0 and self.rng.random() < p:
            self.injected[kind] += 1
            if where:
                self.injected[f"{kind}:{where}"] += 1
            return True
        return False

    def early(self, deadline: float, now: float) -> float:
        """When a timer for `deadline` signals: at it, or (an early timer) up to 5 minutes before."""
        if self.roll("early_timer", "timer"):
            return max(now, deadline - self.rng.uniform(6.0, 300.0))
        return deadline

    def around(self, where: str, call: Callable[[], Any], *, throttles: bool = True) -> Any:
        """`call`, possibly throttled or crashed before it, or crashed after it took effect."""
        if throttles and self.roll("throttle", where):
            raise Throttled(where)
        if self.roll("crash", f"{where}:before"):
            raise Crash(f"before {where}")
        result = call()
        if self.roll("crash", f"{where}:after"):
            raise Crash(f"after {where}")
        return result


# Writes that are conditional, and so can lose a race.
CONDITIONAL_WRITES = frozenset(
    {
        "write_workload",
        "write_pod",
        "write_pods",
        "admit",
        "clear_outbox",
        "record_failure",
        "quarantine",
    }
)
# Everything else that writes (a crash or a throttle may hit them too).
OTHER_WRITES = frozenset(
    {"append_history", "forget_recent", "release", "put_settings_record", "put_node"}
)


class FaultyStore:
    """A `WorkloadStore` whose writes conflict, throttle or crash; reads may throttle."""

    def __init__(
        self,
        inner: WorkloadStore,
        plan: FaultPlan,
        during_write: Callable[[], None] | None = None,
    ) -> None:
        self.inner = inner
        self.plan = plan
        self.during_write = during_write

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        plan = self.plan

        def call(*args: Any, **kwargs: Any) -> Any:
            if name in CONDITIONAL_WRITES and plan.roll("conflict", name):
                raise Conflict(f"injected: {name}")
            if name in CONDITIONAL_WRITES or name in OTHER_WRITES:
                result = plan.around(name, lambda: attr(*args, **kwargs))
                if self.during_write is not None and name in CONDITIONAL_WRITES:
                    self.during_write()
                return result
            if plan.roll("throttle", name):
                raise Throttled(name)
            return attr(*args, **kwargs)

        return call


class FaultyTimers:
    """Timers whose start or stop throttles or crashes, or whose execution is lost."""

    def __init__(self, inner: Timers, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan

    def start(self, workload: str, timer: Timer) -> None:
        if self.plan.roll("lose", "timer"):
            return  # the execution never started, though the call succeeded
        self.plan.around("start_timer", lambda: self.inner.start(workload, timer))

    def stop(self, workload: str, timer: Timer) -> None:
        self.plan.around("stop_timer", lambda: self.inner.stop(workload, timer))


class FaultyMessages:
    """Queues that throttle, crash, or accept a message and lose it."""

    def __init__(self, inner: Messages, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan

    def _send(self, what: str, send: Callable[[], None]) -> None:
        if self.plan.roll("lose", what):
            return
        self.plan.around(what, send)

    def requeue(self, workload: str, count: int, delay: float) -> None:
        self._send("requeue", lambda: self.inner.requeue(workload, count, delay))

    def request_admission(
        self, reason: str, workload: str | None, *, retry: int = 0, delay: float = 0.0
    ) -> None:
        self._send(
            "admission_request",
            lambda: self.inner.request_admission(reason, workload, retry=retry, delay=delay),
        )

    def deadline_later(self, workload: str, timer: Timer, delay: float) -> None:
        self._send("deadline_signal", lambda: self.inner.deadline_later(workload, timer, delay))

    def send_slice(self, s: ReconcileSlice, delay: float) -> None:
        """A reconciliation slice to the ingest queue (when the inner queues carry them)."""
        send = getattr(self.inner, "send_slice")  # noqa: B009 - not every Messages has it
        self._send("reconcile_slice", lambda: send(s, delay))

    def send_early(self, body: str, delay: float) -> None:
        """An agent event sent back to the ingest queue, as `send_slice`."""
        send = getattr(self.inner, "send_early")  # noqa: B009 - not every Messages has it
        self._send("early_event", lambda: send(body, delay))


class EntryThrottled(Exception):
    """PutEvents answered 200 with the entry's ErrorCode ThrottlingException: transient,
    as the bus adapter reports it (`muster.aws.eventbridge.PublishFailed`)."""

    transient = True


class FaultyBus:
    def __init__(self, inner: Bus, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan

    def publish(
        self, event: LogEvent, workload: str, detail: Mapping[str, Any], event_id: str, at: float
    ) -> None:
        if self.plan.roll("throttle_entry", "publish"):
            raise EntryThrottled(f"{event_id}: ThrottlingException")
        self.plan.around(
            "publish", lambda: self.inner.publish(event, workload, detail, event_id, at)
        )


class ClusterThrottled(Exception):
    """The API server answered 429 or 5xx until the adapter gave up: transient."""

    transient = True


class AdmitRefused(Refused):
    """The API server refused the release (403 Forbidden, 422 Invalid): a retry cannot mend it."""


class FaultyCluster:
    """A cluster whose API server throttles or refuses, or whose caller dies before or
    after the call. A refused release is refused on every try of that attempt."""

    def __init__(self, inner: ClusterActions, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.refused: dict[tuple[str, int], bool] = {}  # (workload, attempt) -> refused

    def _call(self, where: str, call: Callable[[], None]) -> None:
        if self.plan.roll("throttle", where):
            raise ClusterThrottled(f"{where}: 429 Too Many Requests")
        self.plan.around(where, call, throttles=False)

    def admit(self, effect: Admit) -> None:
        attempt = (effect.workload, effect.attempt)
        if attempt not in self.refused:
            self.refused[attempt] = self.plan.roll("refuse_admit", "cluster_admit")
        if self.refused[attempt]:
            raise AdmitRefused(f"{effect.workload}: 403 Forbidden")
        self._call("cluster_admit", lambda: self.inner.admit(effect))

    def evict(self, effect: Evict) -> None:
        self._call("cluster_evict", lambda: self.inner.evict(effect))

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        self._call("cluster_record", lambda: self.inner.record(workload, kind, view))


@dataclass
class FaultyPorts:
    """The runtime's ports, each wrapped; hand them to a `ControlPlane` or a driver."""

    store: FaultyStore
    timers: FaultyTimers
    messages: FaultyMessages
    bus: FaultyBus
    cluster: FaultyCluster


def wrap_ports(
    plan: FaultPlan,
    *,
    store: WorkloadStore,
    timers: Timers,
    messages: Messages,
    bus: Bus,
    cluster: ClusterActions,
    during_write: Callable[[], None] | None = None,
) -> FaultyPorts:
    """Every port wrapped with the same plan (one seed, one count of what was injected)."""
    return FaultyPorts(
        FaultyStore(store, plan, during_write),
        FaultyTimers(timers, plan),
        FaultyMessages(messages, plan),
        FaultyBus(bus, plan),
        FaultyCluster(cluster, plan),
    )
