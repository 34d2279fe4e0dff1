"""Invariants of the core under random event sequences with duplicates and reordering.

Timers and requeues are kept after they are stopped or superseded and may fire at
any later moment, the way a lost StopExecution or a redelivered SQS message would.
"""

from __future__ import annotations

from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from muster.core import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    Admit,
    DeadlineReached,
    Evict,
    Fleet,
    Kind,
    NodeObserved,
    Phase,
    PodObserved,
    Reactivate,
    Reason,
    Requeue,
    RequeueDue,
    StartTimer,
    Timer,
    WorkloadFinished,
    WorkloadObserved,
    parse_settings,
)

KEYS = ["t/a", "t/b", "t/c", "t/d"]
NODES = ["n0", "n1", "n2"]
SETTINGS = [
    {
        "timeout": "60s",
        "blockAdmission": True,
        "gpuQuota": 24,
        "requeuingStrategy": {"backoffLimitCount": 2, "backoffBaseSeconds": 5},
    },
    {
        "timeout": "30s",
        "recoveryTimeout": "0s",
        "gpuQuota": 16,
        "requeuingStrategy": {"backoffBaseSeconds": 1, "timestamp": "Creation"},
    },
    {
        "timeout": "45s",
        "blockAdmission": True,
        "requeuingStrategy": {"backoffLimitTimeout": "3m", "backoffJitter": 0.5},
    },
    {"timeout": "20s", "dryRun": True, "gpuQuota": 16},
    {
        "timeout": "20s",
        "queues": {"q1": {"gpuQuota": 8, "requeuingStrategy": {"backoffLimitCount": 0}}},
    },
]


class CoreMachine(RuleBasedStateMachine):
    @initialize(choice=st.sampled_from(range(len(SETTINGS))))
    def setup(self, choice: int) -> None:
        self.settings = parse_settings(SETTINGS[choice])
        self.cluster = Fleet(self.settings, draw=lambda: 0.37)
        self.now = 0.0
        self.submitted: set[str] = set()
        self.timers: list[tuple[str, Timer]] = []
        self.requeues: list[Requeue] = []
        self.seq = 0
        self.sent: list[object] = []  # every event sent, for duplicates
        self.counts: dict[str, tuple[int, Phase]] = {}
        self.attempts: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers

    def _apply(self, event: object) -> list[object]:
        result = self.cluster.apply(event, self.now)  # type: ignore[arg-type]
        self.sent.append(event)
        if self.settings.block_admission and any(isinstance(e, Admit) for e in result.effects):
            not_ready = [w.key for w in self.cluster if w.phase in NOT_READY_PHASES]
            assert len(not_ready) <= 1, f"admitted while another was not ready: {not_ready}"
        for effect in result.effects:
            if isinstance(effect, StartTimer):
                self.timers.append((effect.workload, effect.timer))
            elif isinstance(effect, Requeue):
                self.requeues.append(effect)
            elif isinstance(effect, Evict):
                assert self.cluster.get(effect.workload) is not None
        return list(result.effects)

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # ------------------------------------------------------------------ rules

    @rule(dt=st.floats(min_value=0, max_value=90))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(
        key=st.sampled_from(KEYS),
        pods=st.integers(1, 3),
        gpus=st.sampled_from([4, 8, 16]),
        priority=st.integers(0, 2),
        queue=st.sampled_from(["q0", "q1"]),
        group=st.booleans(),
    )
    def submit(
        self, key: str, pods: int, gpus: int, priority: int, queue: str, group: bool
    ) -> None:
        kind = Kind.POD_GROUP if group else Kind.JOB
        self._apply(
            WorkloadObserved(
                key,
                queue,
                pods,
                gpus=gpus,
                priority=priority,
                kind=kind,
                created_at=self.now,
                seq=self._next_seq(),
            )
        )
        self.submitted.add(key)

    @rule(
        key=st.sampled_from(KEYS),
        index=st.integers(0, 3),
        ready=st.booleans(),
        node=st.sampled_from(NODES),
        deleted=st.booleans(),
        incarnation=st.integers(0, 3),
        phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    )
    def pod(
        self,
        key: str,
        index: int,
        ready: bool,
        node: str,
        deleted: bool,
        incarnation: int,
        phase: str,
    ) -> None:
        w = self.cluster.get(key)
        uid = f"{key}-{index}-{(w.attempt if w else 0) + incarnation % 2}"
        self._apply(
            PodObserved(
                key,
                f"p{index}",
                self._next_seq(),
                uid=uid,
                phase=phase,
                ready=ready and phase == "Running",
                node=node,
                deleted=deleted,
            )
        )

    @rule(
        node=st.sampled_from(NODES),
        ready=st.booleans(),
        health=st.sampled_from([None, "Schedulable", "UnschedulablePendingReplacement"]),
    )
    def node(self, node: str, ready: bool, health: str | None) -> None:
        self._apply(NodeObserved(node, ready, health))

    @rule(data=st.data())
    def fire_timer(self, data: st.DataObject) -> None:
        if not self.timers:
            return
        key, timer = data.draw(st.sampled_from(self.timers))
        w = self.cluster.get(key)
        current = w is not None and w.timer == timer
        self.now = max(self.now, timer.deadline)
        effects = self._apply(DeadlineReached(key, timer.attempt, timer.kind, timer.episode))
        if not current:
            assert not any(isinstance(e, Evict) and e.workload == key for e in effects), (
                "a stale timer evicted"
            )

    @rule(data=st.data(), early=st.booleans())
    def deliver_requeue(self, data: st.DataObject, early: bool) -> None:
        if not self.requeues:
            return
        r = data.draw(st.sampled_from(self.requeues))
        if not early:
            self.now = max(self.now, r.requeue_at)
        self._apply(RequeueDue(r.workload, r.count))

    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        if self.sent:
            self._apply(data.draw(st.sampled_from(self.sent)))

    @rule(
        key=st.sampled_from(KEYS),
        reason=st.sampled_from([Reason.SUCCEEDED, Reason.FAILED, Reason.DELETED]),
    )
    def finish(self, key: str, reason: Reason) -> None:
        self._apply(WorkloadFinished(key, reason, self._next_seq()))

    @rule(key=st.sampled_from(KEYS))
    def reactivate(self, key: str) -> None:
        self._apply(Reactivate(key))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def no_workload_is_lost(self) -> None:
        for key in getattr(self, "submitted", ()):
            w = self.cluster.get(key)
            assert w is not None, f"{key} was lost"
            assert w.phase in Phase

    @invariant()
    def every_workload_is_in_exactly_one_state(self) -> None:
        if not hasattr(self, "cluster"):
            return
        by_phase = self.cluster.by_phase()
        keys = [k for ks in by_phase.values() for k in ks]
        assert sorted(keys) == sorted(self.cluster.workloads)

    @invariant()
    def block_admission_allows_one_admitted_not_ready_workload(self) -> None:
        # A Running gang may still lose a pod after another was admitted, so the rule
        # is about admissions: at most one gang waits for its start at any time.
        if hasattr(self, "cluster") and self.settings.block_admission:
            waiting = [w.key for w in self.cluster if w.phase is Phase.ADMITTED]
            assert len(waiting) <= 1, waiting

    @invariant()
    def quotas_hold(self) -> None:
        if not hasattr(self, "cluster"):
            return
        active = [w for w in self.cluster if w.phase in ACTIVE_PHASES]
        if self.settings.gpu_quota is not None:
            assert sum(w.gpus for w in active) <= self.settings.gpu_quota
        for queue in ("q0", "q1"):
            quota = self.settings.for_queue(queue).gpu_quota
            if quota is not None:
                assert sum(w.gpus for w in active if w.queue == queue) <= quota

    @invariant()
    def requeue_count_and_attempts_never_decrease(self) -> None:
        if not hasattr(self, "cluster"):
            return
        for w in self.cluster:
            # Per incarnation: a new object under the key (a pod group run again after it
            # finished) starts its own count.
            one = f"{w.key}#{w.uid}"
            before, before_phase = self.counts.get(one, (0, Phase.PENDING))
            if w.requeue_count < before:
                assert w.phase is Phase.DEACTIVATED or before_phase is Phase.DEACTIVATED
            self.counts[one] = (w.requeue_count, w.phase)
            assert w.attempt >= self.attempts.get(one, 0)
            self.attempts[one] = w.attempt

    @invariant()
    def timers_belong_to_timed_phases(self) -> None:
        if not hasattr(self, "cluster"):
            return
        for w in self.cluster:
            if w.timer is not None:
                assert w.phase in NOT_READY_PHASES and w.timer.attempt == w.attempt


CoreMachine.TestCase.settings = hsettings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCore = CoreMachine.TestCase
