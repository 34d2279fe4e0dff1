"""The small interfaces the shells depend on; adapters implement them.

Handlers receive their adapters as arguments, so tests hand in the in-memory ones
below instead of patching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from muster.core.model import Admit, Evict, Kind, LogEvent


class Transient(Exception):
    """A failure that waiting cures (the cluster unreachable, throttled, a server error).

    Adapters raise a subclass of it so that the runtime retries with backoff and never
    counts the failure towards quarantine.
    """


class WorkloadGone(Exception):
    """The workload no longer exists in the cluster; the core should mark it Finished."""

    def __init__(self, workload: str) -> None:
        super().__init__(f"workload {workload} no longer exists")
        self.workload = workload


class ClusterActions(Protocol):
    """What the control plane does to a cluster. Every call must be idempotent.

    `admit` releases the workload (unsuspend, or lift the scheduling gate);
    `evict` withdraws it (suspend, or delete a pod group's pods); `record` writes
    Muster's view (phase, attempt, reason) onto the workload for `kubectl` users.
    Each raises `WorkloadGone` when the workload has been deleted.
    """

    def admit(self, effect: Admit) -> None: ...

    def evict(self, effect: Evict) -> None: ...

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None: ...


@runtime_checkable
class WorkloadAnnouncer(Protocol):
    """Shows a lifecycle event where the workload's users look (Kubernetes Events).

    Best effort: the caller logs a failure and carries on; `key` is the lifecycle
    event's idempotency key, so a retried effect announces nothing twice.
    """

    def announce(
        self,
        workload: str,
        kind: Kind,
        event: LogEvent,
        detail: Mapping[str, Any],
        *,
        key: str,
        at: float,
    ) -> None: ...


@dataclass
class RecordingCluster:
    """An in-memory `ClusterActions` for tests and the simulator: it records every call.

    `gone` lists workloads that behave as deleted; `fail_next` makes the next call
    raise the given exception once (to inject API failures).
    """

    calls: list[tuple[str, str, int]] = field(default_factory=list)
    views: dict[str, dict[str, str]] = field(default_factory=dict)
    announced: list[tuple[str, str]] = field(default_factory=list)  # (workload, event)
    gone: set[str] = field(default_factory=set)
    fail_next: Exception | None = None

    def _check(self, workload: str) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        if workload in self.gone:
            raise WorkloadGone(workload)

    def admit(self, effect: Admit) -> None:
        self._check(effect.workload)
        self.calls.append(("admit", effect.workload, effect.attempt))

    def evict(self, effect: Evict) -> None:
        self._check(effect.workload)
        self.calls.append(("evict", effect.workload, effect.attempt))

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        self._check(workload)
        self.views[workload] = dict(view)

    def announce(
        self,
        workload: str,
        kind: Kind,
        event: LogEvent,
        detail: Mapping[str, Any],
        *,
        key: str,
        at: float,
    ) -> None:
        self._check(workload)
        self.announced.append((workload, event.value))
