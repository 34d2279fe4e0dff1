"""`workloadFaults`: stop retrying a gang whose pods fail on their own; never one that waits."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from muster.core import (
    AdmissionGranted,
    DeadlineReached,
    Evict,
    Phase,
    PodObserved,
    Publish,
    Reactivate,
    Reason,
    RequeueDue,
    SettingsError,
    StartTimer,
    StopTimer,
    TimerKind,
    Workload,
    decide,
    parse_settings,
)
from muster.core.settings import Settings

from tests.unit.conftest import published, settings, submit

KEY = "team-a/llama"


def crash(pod: str, seq: int, restarts: int = 3) -> PodObserved:
    return PodObserved(
        KEY,
        pod,
        seq,
        uid=f"{pod}-{seq}",
        phase="Running",
        node="gpu-node-1",
        reason="CrashLoopBackOff",
        message="back-off 40s restarting failed container",
        scheduled=True,
        waiting="CrashLoopBackOff",
        restarts=restarts,
        terminated="Error",
        exit_code=1,
    )


def image(pod: str, seq: int) -> PodObserved:
    return PodObserved(
        KEY,
        pod,
        seq,
        uid=f"{pod}-{seq}",
        phase="Pending",
        node="gpu-node-1",
        reason="ImagePullBackOff",
        message='Back-off pulling image "repo/llama:nope"',
        scheduled=True,
        waiting="ImagePullBackOff",
    )


def unschedulable(pod: str, seq: int) -> PodObserved:
    return PodObserved(
        KEY,
        pod,
        seq,
        uid=f"{pod}-{seq}",
        phase="Pending",
        reason="Unschedulable",
        message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
        scheduled=False,
    )


def ready(pod: str, seq: int) -> PodObserved:
    return PodObserved(KEY, pod, seq, uid=f"{pod}-{seq}", phase="Running", ready=True, node="n")


class Run:
    """One workload through decide, on a hand-moved clock."""

    def __init__(self, s: Settings, pods: int = 2) -> None:
        self.s = s
        self.now = 0.0
        self.seq = 1
        self.w: Workload | None = None
        self.effects: list[Any] = []
        self.step(submit(KEY, pods=pods))

    def step(self, event: Any) -> Any:
        d = decide(self.w, event, self.s, self.now)
        self.w = d.workload
        self.effects = list(d.effects)
        return d

    def admit(self) -> None:
        assert self.w is not None
        if self.w.requeue_at is not None:
            self.now = max(self.now, self.w.requeue_at)
            self.step(RequeueDue(KEY, self.w.requeue_count))
        self.step(AdmissionGranted(KEY, self.w.attempt + 1))

    def pods(self, *make: Any) -> None:
        for i, m in enumerate(make):
            self.seq += 1
            self.step(m(f"w-{i}", self.seq))

    def timeout(self) -> Any:
        assert self.w is not None and self.w.timer is not None
        t = self.w.timer
        self.now = t.deadline
        return self.step(DeadlineReached(KEY, t.attempt, t.kind, t.episode, t.incarnation))

    def fault_deadline(self) -> Any:
        assert self.w is not None and self.w.fault_timer is not None
        t = self.w.fault_timer
        self.now = t.deadline
        return self.step(DeadlineReached(KEY, t.attempt, t.kind, t.episode, t.incarnation))

    @property
    def workload(self) -> Workload:
        assert self.w is not None
        return self.w


# --------------------------------------------------------------------------- settings


def test_settings_parse_validate_and_round_trip() -> None:
    s = parse_settings(
        {
            "workloadFaults": {"limitCount": 2, "evictAfter": "2m"},
            "queues": {"spot": {"workloadFaults": {"evictAfter": "30s"}}, "big": {}},
        }
    )
    assert (s.defaults.fault_limit_count, s.defaults.fault_evict_after) == (2, 120.0)
    # a queue inherits what it does not set
    assert (s.for_queue("spot").fault_limit_count, s.for_queue("spot").fault_evict_after) == (
        2,
        30.0,
    )
    assert s.for_queue("big").fault_evict_after == 120.0
    assert parse_settings(s.to_dict()) == s
    assert "workloadFaults" not in parse_settings({}).to_dict()


def test_bad_settings_name_every_field() -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(
            {
                "workloadFaults": {"limitCount": -1, "evictAfter": "soon", "limit": 1},
                "queues": {"q": {"workloadFaults": {"evictAfter": "0s"}}},
            }
        )
    errors = "\n".join(info.value.errors)
    assert "workloadFaults.limitCount: must be at least 0" in errors
    assert "workloadFaults.evictAfter:" in errors
    assert "workloadFaults.limit: unknown setting; did you mean 'limitCount'?" in errors
    assert "queues.q.workloadFaults.evictAfter: must be greater than 0s" in errors
    with pytest.raises(SettingsError, match="workloadFaults: must be a mapping"):
        parse_settings({"workloadFaults": 3})


# --------------------------------------------------------------------------- limitCount


def test_limit_count_deactivates_after_that_many_fault_evictions_in_a_row() -> None:
    # GIVEN workloadFaults.limitCount 2 and a gang whose pods crash loop on every attempt
    run = Run(settings(timeout="60s", workloadFaults={"limitCount": 2}))
    for attempt in (1, 2):
        run.admit()
        run.pods(crash, crash)
        run.timeout()
        # THEN the first two such evictions requeue it, each with its diagnosis
        assert run.workload.phase is Phase.REQUEUED
        assert run.workload.fault_evictions == attempt
        (evicted,) = published(run.effects, "Evicted")
        assert evicted.detail["reason"] == "PodsReadyTimeout"
        assert evicted.detail["diagnosis"]["class"] == "WorkloadFault"
        assert [p["class"] for p in evicted.detail["notReady"]] == ["WorkloadFault"] * 2
    # AND the third deactivates it with reason WorkloadFaults
    run.admit()
    run.pods(crash, crash)
    run.timeout()
    assert (run.workload.phase, run.workload.reason) == (Phase.DEACTIVATED, "WorkloadFaults")
    (evicted,) = published(run.effects, "Evicted")
    assert (evicted.detail["reason"], evicted.detail["cause"]) == ("Deactivated", "WorkloadFaults")
    (evict,) = [e for e in run.effects if isinstance(e, Evict)]
    assert (evict.reason, evict.cause) == (Reason.DEACTIVATED, Reason.WORKLOAD_FAULTS)
    (gone,) = published(run.effects, "Deactivated")
    assert gone.detail["reason"] == "WorkloadFaults"
    assert gone.detail["summary"] == (
        "2 of 2 pods crash at start (CrashLoopBackOff, exit code 1, 3 restarts): the job "
        "fails on its own; retries stopped: 3 evictions in a row failed this way "
        "(workloadFaults.limitCount 2)"
    )
    # AND reactivation starts a fresh streak
    run.step(Reactivate(KEY))
    assert run.workload.fault_evictions == 0


def test_an_eviction_with_a_pod_not_placed_never_counts_and_ends_the_streak() -> None:
    run = Run(settings(timeout="60s", workloadFaults={"limitCount": 1}))
    run.admit()
    run.pods(crash, crash)
    run.timeout()
    assert run.workload.fault_evictions == 1
    # GIVEN one pod crash looping and one waiting for room
    run.admit()
    run.pods(crash, unschedulable)
    run.timeout()
    # THEN it is requeued like any busy-cluster eviction, and the streak is over
    assert run.workload.phase is Phase.REQUEUED
    assert run.workload.fault_evictions == 0
    (evicted,) = published(run.effects, "Evicted")
    assert evicted.detail["diagnosis"]["class"] == "Mixed"
    assert evicted.detail["diagnosis"]["counts"] == {"Capacity": 1, "WorkloadFault": 1}
    # AND a fault eviction after it is the first of a new streak, not the limit
    run.admit()
    run.pods(crash, crash)
    run.timeout()
    assert run.workload.phase is Phase.REQUEUED


def test_a_busy_cluster_is_retried_forever_with_the_feature_on() -> None:
    run = Run(settings(timeout="60s", workloadFaults={"limitCount": 0, "evictAfter": "10s"}))
    for _ in range(5):
        run.admit()
        run.pods(unschedulable, unschedulable)
        assert run.workload.fault_timer is None
        run.timeout()
        assert run.workload.phase is Phase.REQUEUED
        (evicted,) = published(run.effects, "Evicted")
        assert evicted.detail["diagnosis"]["summary"] == (
            "2 of 2 pods are waiting for room on the cluster (Unschedulable): the cluster "
            "is busy, the job is not at fault"
        )


def test_without_the_settings_nothing_changes_but_the_diagnosis_is_recorded() -> None:
    run = Run(settings(timeout="60s", requeuingStrategy={"backoffLimitCount": 5}))
    for _ in range(4):
        run.admit()
        run.pods(image, image)
        assert run.workload.fault_timer is None
        run.timeout()
        assert run.workload.phase is Phase.REQUEUED
    (evicted,) = published(run.effects, "Evicted")
    assert evicted.detail["diagnosis"]["summary"].startswith(
        "2 of 2 pods cannot pull image repo/llama:nope (ImagePullBackOff)"
    )


# --------------------------------------------------------------------------- evictAfter


def test_evict_after_evicts_early_and_counts_like_a_timeout() -> None:
    # GIVEN evictAfter 30s, a 5m timeout, and a gang whose image cannot be pulled
    run = Run(settings(timeout="5m", workloadFaults={"evictAfter": "30s"}))
    run.admit()
    run.now = 10.0
    run.pods(image)
    assert run.workload.fault_timer is None  # one pod not created yet: not placed
    run.pods(image, image)
    timer = run.workload.fault_timer
    assert timer is not None and timer.kind is TimerKind.FAULT and timer.deadline == 40.0
    assert [type(e) for e in run.effects] == [StartTimer]
    # WHEN it runs out
    d = run.fault_deadline()
    # THEN the gang is evicted early with reason WorkloadFault, requeued with backoff
    (evict,) = [e for e in d.effects if isinstance(e, Evict)]
    assert (evict.reason, evict.cause) == (Reason.WORKLOAD_FAULT, Reason.WAIT_FOR_START)
    stops = [e for e in d.effects if isinstance(e, StopTimer)]
    assert [s.timer.kind for s in stops] == [TimerKind.STARTUP]
    w = run.workload
    assert (w.phase, w.requeue_count, w.fault_evictions) == (Phase.REQUEUED, 1, 1)
    assert w.evictions == {"WorkloadFault/WaitForStart": 1}
    assert w.requeue_at == 40.0 + 60.0


def test_evict_after_stops_when_a_pod_recovers_and_a_late_signal_is_ignored() -> None:
    run = Run(settings(timeout="5m", workloadFaults={"evictAfter": "30s"}))
    run.admit()
    run.pods(image, image)
    armed = run.workload.fault_timer
    assert armed is not None
    # WHEN one pod's image is pulled after all and it starts
    run.seq += 1
    run.step(
        PodObserved(KEY, "w-0", run.seq, uid="w-0-x", phase="Running", node="n", scheduled=True)
    )
    assert run.workload.fault_timer is None
    assert [type(e) for e in run.effects] == [StopTimer]
    # THEN the timer's signal, arriving anyway, evicts nothing
    run.now = armed.deadline
    d = run.step(DeadlineReached(KEY, armed.attempt, armed.kind, armed.episode, armed.incarnation))
    assert not [e for e in d.effects if isinstance(e, Evict)]
    assert run.workload.phase is Phase.ADMITTED


def test_evict_after_is_not_armed_beyond_the_readiness_deadline() -> None:
    run = Run(settings(timeout="60s", workloadFaults={"evictAfter": "2m"}))
    run.admit()
    run.pods(crash, crash)
    assert run.workload.fault_timer is None


def test_evict_after_reaching_the_limit_deactivates() -> None:
    run = Run(settings(timeout="5m", workloadFaults={"evictAfter": "30s", "limitCount": 0}))
    run.admit()
    run.pods(crash, crash)
    run.fault_deadline()
    assert (run.workload.phase, run.workload.reason) == (Phase.DEACTIVATED, "WorkloadFaults")
    (evicted,) = published(run.effects, "Evicted")
    assert evicted.detail["evictedEarly"] == "WorkloadFault"


def test_dry_run_reports_the_fault_eviction_and_evicts_nothing() -> None:
    run = Run(
        settings(timeout="5m", dryRun=True, workloadFaults={"evictAfter": "30s", "limitCount": 0})
    )
    run.admit()
    run.pods(crash, crash)
    d = run.fault_deadline()
    assert not [e for e in d.effects if isinstance(e, Evict)]
    (evicted,) = published(d.effects, "Evicted")
    assert evicted.detail["dryRun"] is True
    assert evicted.detail["wouldDeactivateReason"] == "WorkloadFaults"
    assert run.workload.phase is Phase.ADMITTED
    # AND it is reported once for the attempt: later pod reports arm nothing more
    run.seq += 1
    run.step(crash("w-0", run.seq, restarts=5))
    assert run.workload.fault_timer is None


def test_a_node_replacement_eviction_ends_the_streak() -> None:
    from muster.core import NodeObserved

    run = Run(settings(timeout="60s", workloadFaults={"limitCount": 1}))
    run.admit()
    run.pods(crash, crash)
    run.timeout()
    assert run.workload.fault_evictions == 1
    run.admit()
    run.pods(crash, crash)
    # WHEN HyperPod marks the gang's node for replacement before the deadline
    run.step(
        NodeObserved("gpu-node-1", health="UnschedulablePendingReplacement", workload=KEY, seq=99)
    )
    # THEN the eviction is the node's: the streak is over, the next fault eviction requeues
    assert (run.workload.phase, run.workload.fault_evictions) == (Phase.PENDING, 0)
    (evicted,) = published(run.effects, "Evicted")
    assert evicted.detail["diagnosis"]["class"] == "WorkloadFault"
    run.admit()
    run.pods(crash, crash)
    run.timeout()
    assert run.workload.phase is Phase.REQUEUED


def test_without_details_an_eviction_decides_the_same_and_leaves_out_its_diagnosis() -> None:
    # GIVEN workloadFaults.limitCount 1 and a gang whose pods crash loop on every attempt,
    # played with details; each timeout also decided without them from the same state
    run = Run(settings(timeout="60s", workloadFaults={"limitCount": 1}))
    for attempt in (1, 2):
        run.admit()
        run.pods(crash, crash)
        assert run.w is not None and run.w.timer is not None
        t = run.w.timer
        run.now = t.deadline
        event = DeadlineReached(KEY, t.attempt, t.kind, t.episode, t.incarnation)
        bare = decide(run.w, event, run.s, run.now, details=False)
        full = run.step(event)
        # THEN the state and every effect agree, but the published details
        assert bare.workload == full.workload and bare.outcome is full.outcome
        assert [type(e) for e in bare.effects] == [type(e) for e in full.effects]
        kept = [e for e in bare.effects if not isinstance(e, Publish | Evict)]
        assert kept == [e for e in full.effects if not isinstance(e, Publish | Evict)]
        (evict,) = [e for e in bare.effects if isinstance(e, Evict)]
        (evict_full,) = [e for e in full.effects if isinstance(e, Evict)]
        assert len(evict_full.not_ready) == 2 and evict.not_ready == ()
        assert replace(evict_full, not_ready=()) == evict
        assert full.workload.fault_evictions == attempt
        # AND without them the eviction carries no diagnosis and no not-ready pods
        (evicted,) = published(list(bare.effects), "Evicted")
        (with_them,) = published(list(full.effects), "Evicted")
        assert "diagnosis" in with_them.detail and "notReady" in with_them.detail
        assert {
            k: v for k, v in with_them.detail.items() if k not in ("diagnosis", "notReady")
        } == (evicted.detail)
    # AND the second, which deactivates it, says so without a summary
    (gone,) = published(list(bare.effects), "Deactivated")
    assert gone.detail == {"reason": "WorkloadFaults", "count": 1, "faultEvictions": 2}
