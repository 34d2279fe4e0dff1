"""The control plane service on in-memory adapters: lifecycle, races, crashes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from muster.core import (
    DeadlineReached,
    Kind,
    NodeObserved,
    Outcome,
    Phase,
    PodObserved,
    RequeueDue,
    TimerKind,
    WorkloadObserved,
)
from muster.runtime import describe, status
from muster.runtime.memory import MemoryStore
from muster.runtime.service import EffectFailed, WorkloadNotYetKnown

from .conftest import Rig

KEY = "ns/train"


def _running(rig: Rig, gang: int = 2) -> None:
    rig.submit(KEY, gang)
    assert rig.admit() == [KEY]
    for i in range(gang):
        rig.pod(KEY, f"p{i}", 1, ready=True, node=f"n{i}")
    assert rig.phase(KEY) == "Running"


def test_submitted_workload_is_admitted_with_a_startup_timer(rig: Rig):
    # GIVEN a submitted workload
    rig.submit(KEY, 2, gpus=16)
    assert rig.messages.admission_requests == [("submitted", KEY)]
    # WHEN an admission pass runs
    admitted = rig.admit()
    # THEN it is admitted on the cluster, its timer runs, and the transition is published
    assert admitted == [KEY]
    assert rig.cluster.calls == [("admit", KEY, 1)]
    assert [t.kind for _, t in rig.timers.started] == [TimerKind.STARTUP]
    assert rig.timers.started[0][1].deadline == rig.clock.now + 60
    assert rig.bus.names(KEY) == ["Submitted", "Admitted"]
    assert rig.metrics.total("Admissions") == 1
    assert rig.cluster.views[KEY]["phase"] == "Admitted"
    assert [h["event"] for h in rig.store.history(KEY)] == ["Submitted", "Admitted"]


def test_gang_ready_in_time_stops_the_timer_and_reports_wait(rig: Rig):
    rig.submit(KEY, 2)
    rig.admit()
    rig.clock.now += 12
    rig.pod(KEY, "p0", 1, ready=True)
    assert rig.phase(KEY) == "Admitted"
    rig.pod(KEY, "p1", 1, ready=True)
    assert rig.phase(KEY) == "Running"
    assert len(rig.timers.stopped) == 1 and not rig.timers.running
    assert rig.metrics.samples["AdmittedToReadySeconds"] == [12]
    assert rig.metrics.total("PodsReady") == 1


def test_deadline_evicts_requeues_with_backoff_and_records_why(rig: Rig):
    # GIVEN an admitted gang with one pod stuck unschedulable
    rig.submit(KEY, 2)
    rig.admit()
    rig.pod(KEY, "p0", 1, ready=True, node="n1")
    rig.pod(KEY, "p1", 1, ready=False, node=None, reason="Unschedulable", message="0/8 nodes")
    # WHEN the startup deadline fires
    rig.clock.now += 60
    outcome = rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    # THEN the whole workload is evicted and requeued after the base backoff
    assert outcome == [Outcome.APPLIED]
    assert rig.cluster.calls[-1] == ("evict", KEY, 1)
    assert rig.messages.requeues == [(KEY, 1, 60.0)]
    assert rig.phase(KEY) == "Requeued"
    assert rig.metrics.total("Evictions", reason="PodsReadyTimeout", cause="WaitForStart") == 1
    assert rig.metrics.total("Requeues") == 1
    # AND the history says which pod was not ready and why
    info = describe(rig.store, KEY)
    assert info is not None
    evicted = next(h for h in info["history"] if h["event"] == "Evicted")
    assert evicted["detail"]["notReady"] == [
        {
            "pod": "p1",
            "phase": "Pending",
            "node": None,
            "reason": "Unschedulable",
            "message": "0/8 nodes",
            "class": "Capacity",
        }
    ]
    # AND the diagnosis says the cluster was busy, not the job at fault
    diagnosis = evicted["detail"]["diagnosis"]
    assert (diagnosis["class"], diagnosis["workloadFault"]) == ("Capacity", False)


def test_requeue_after_backoff_makes_it_admissible_again(rig: Rig):
    rig.submit(KEY, 1)
    rig.admit()
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    # An early leg (SQS caps delays) is re-delayed for the rest of the backoff.
    rig.clock.now += 30
    rig.plane(inline_admission=True).handle(RequeueDue(KEY, 1))
    assert rig.messages.requeues[-1] == (KEY, 1, 30.0)
    rig.clock.now += 30
    plane = rig.plane(inline_admission=True)
    plane.handle(RequeueDue(KEY, 1))
    assert rig.phase(KEY) == "Pending"
    wanted, hints = plane.take_admission_request()
    assert wanted and hints == {KEY}
    assert plane.admission_pass(hints) == [KEY]
    assert rig.cluster.calls[-1] == ("admit", KEY, 2)
    # A duplicate requeue message is stale and changes nothing.
    assert rig.plane().handle(RequeueDue(KEY, 1)) == [Outcome.STALE]


def test_backoff_limit_deactivates(rig: Rig):
    rig.doc = {"timeout": "60s", "requeuingStrategy": {"backoffLimitCount": 0}}
    rig.submit(KEY, 1)
    rig.admit()
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    assert rig.phase(KEY) == "Deactivated"
    assert rig.messages.requeues == []
    assert rig.metrics.total("Deactivations") == 1
    # Kueue's vocabulary: the deactivating eviction is not one more readiness timeout,
    # so the eviction metric (and the EvictionsHigh alarm on it) does not count it as one.
    assert rig.metrics.total("Evictions", reason="PodsReadyTimeout") == 0
    assert rig.metrics.total("Evictions", reason="Deactivated", cause="RequeuingLimitExceeded") == 1
    history = [(h["event"], h["detail"].get("reason")) for h in rig.store.history(KEY)]
    assert history[-2:] == [("Evicted", "Deactivated"), ("Deactivated", "RequeuingLimitExceeded")]
    info = describe(rig.store, KEY)
    assert info is not None and info["evictions"] == {"Deactivated/RequeuingLimitExceeded": 1}


def test_duplicate_and_reordered_pod_events_change_nothing(rig: Rig):
    rig.submit(KEY, 2)
    rig.admit()
    rig.pod(KEY, "p0", 2, ready=True)
    writes = rig.store.writes
    # a duplicate, and an older observation arriving late
    assert rig.pod(KEY, "p0", 2, ready=True) == [Outcome.DUPLICATE]
    assert rig.pod(KEY, "p0", 1, ready=False) == [Outcome.STALE]
    assert rig.store.writes == writes
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.pods["p0"].ready
    assert rig.metrics.total("IgnoredEvents", outcome="duplicate") == 1
    assert rig.metrics.total("IgnoredEvents", outcome="stale") == 1


def test_pod_events_that_change_nothing_derived_write_only_the_pod(rig: Rig):
    rig.submit(KEY, 3)
    rig.admit()
    version = rig.store.items[KEY].version
    rig.pod(KEY, "p0", 1, ready=False)
    rig.pod(KEY, "p0", 2, ready=True)
    assert rig.store.items[KEY].version == version  # the workload item was not rewritten


@dataclass
class RacingStore(MemoryStore):
    """Runs `interleave` just before the first pod write: a concurrent writer."""

    interleave: Any = None

    def write_pod(self, key, write, epoch, ready_delta, now=0.0, **kw):
        if self.interleave is not None:
            run, self.interleave = self.interleave, None
            run()
        super().write_pod(key, write, epoch, ready_delta, now, **kw)


def test_two_concurrent_last_pods_make_the_gang_ready():
    # GIVEN a gang of two, admitted
    rig = Rig(store=RacingStore())
    rig.submit(KEY, 2)
    rig.admit()
    store = rig.store
    assert isinstance(store, RacingStore)
    # WHEN p1's event is applied by another writer after p0's event has read the gang
    # (so p0 saw p1 not ready) but before p0's pod is written
    store.interleave = lambda: rig.pod(KEY, "p1", 1, ready=True)
    rig.pod(KEY, "p0", 1, ready=True)
    # THEN the writer that came second re-derived readiness: the gang is PodsReady
    assert rig.phase(KEY) == "Running"
    assert rig.bus.names(KEY).count("PodsReady") == 1


def test_conflicts_are_retried(rig: Rig):
    rig.submit(KEY, 2)
    rig.admit()
    rig.store.conflict_next = 2
    plane = rig.plane()
    plane.handle(PodObserved(KEY, "p0", 1, phase="Running", ready=True))
    assert plane.stats.conflicts == 2
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.pods["p0"].ready


def test_crash_between_eviction_and_requeue_is_repaired_on_retry(rig: Rig):
    # GIVEN a deadline whose requeue send fails after the eviction was carried out
    rig.submit(KEY, 1)
    rig.admit()
    rig.clock.now += 60

    def broken(*args: object) -> None:
        raise ConnectionError("SQS unreachable")

    rig.messages.requeue = broken  # type: ignore[method-assign]
    with pytest.raises(EffectFailed, match="Requeue: ConnectionError"):
        rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    assert rig.store.items[KEY].outbox  # the effects wait in the outbox
    assert rig.phase(KEY) == "Requeued"
    # WHEN the same message is redelivered
    del rig.messages.requeue
    assert rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1)) == [Outcome.STALE]
    # THEN the requeue went out and the outbox is empty
    assert rig.messages.requeues == [(KEY, 1, 60.0)]
    assert not rig.store.items[KEY].outbox
    assert rig.cluster.calls.count(("evict", KEY, 1)) == 2  # idempotent re-drive


def test_crash_before_the_timer_started_is_repaired_by_the_next_event(rig: Rig):
    rig.submit(KEY, 2)
    rig.timers.start = lambda *a: (_ for _ in ()).throw(TimeoutError("states"))  # type: ignore[method-assign]
    plane = rig.plane(inline_admission=True)
    assert plane.admission_pass() == [KEY]
    assert plane.failed == {KEY: "StartTimer: TimeoutError: states"}
    assert rig.phase(KEY) == "Admitted" and not rig.timers.started
    del rig.timers.start
    rig.pod(KEY, "p0", 1, ready=False)  # any later event re-drives the outbox
    assert [t.kind for _, t in rig.timers.started] == [TimerKind.STARTUP]


def test_workload_gone_on_admit_finishes_it(rig: Rig):
    rig.submit(KEY, 1)
    rig.cluster.gone.add(KEY)
    rig.admit()
    assert rig.phase(KEY) == "Finished"
    info = describe(rig.store, KEY)
    assert info is not None and info["reason"] == "Deleted"


def test_node_failure_starts_recovery_and_recovery_deadline_evicts(rig: Rig):
    _running(rig, 2)
    # WHEN node n1 goes NotReady (routed by the node index)
    outcomes = rig.plane().handle(NodeObserved("n1", ready=False))
    # THEN the gang waits for recovery with its own deadline
    assert outcomes == [Outcome.APPLIED]
    assert rig.phase(KEY) == "Recovering"
    assert rig.timers.started[-1][1].kind is TimerKind.RECOVERY
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.RECOVERY, 1))
    assert rig.phase(KEY) == "Requeued"
    assert rig.metrics.total("Evictions", cause="WaitForRecovery") == 1


def test_node_recovery_makes_the_gang_whole_again(rig: Rig):
    _running(rig, 2)
    rig.plane().handle(NodeObserved("n1", ready=False))
    rig.pod(KEY, "p1", 2, ready=True, node="n1")
    assert rig.phase(KEY) == "Running"
    assert rig.bus.events[-1][2]["reason"] == "Recovered"


def test_node_event_for_no_workload_is_ignored(rig: Rig):
    assert rig.plane().handle(NodeObserved("n9", ready=False)) == []
    assert rig.metrics.total("IgnoredEvents", outcome="ignored") == 1


def test_pod_event_before_its_workload_is_retried_later(rig: Rig):
    with pytest.raises(WorkloadNotYetKnown):
        rig.pod("ns/early", "p0", 1, ready=False)


def test_block_admission_admits_one_at_a_time(rig: Rig):
    rig.doc = {"timeout": "60s", "blockAdmission": True}
    rig.submit("ns/a", 1, created_at=1.0)
    rig.submit("ns/b", 1, created_at=2.0)
    assert rig.admit() == ["ns/a"]
    assert rig.admit() == []
    rig.pod("ns/a", "a0", 1, ready=True)
    assert rig.admit() == ["ns/b"]
    assert status(rig.store)["admitted"] == ["ns/a", "ns/b"]


@dataclass
class RacingAdmissionStore(MemoryStore):
    """Runs `interleave` inside the first admission, before its transaction."""

    interleave: Any = None

    def admit(self, before, after, outbox, ledger, now):
        if self.interleave is not None:
            run, self.interleave = self.interleave, None
            run()
        return super().admit(before, after, outbox, ledger, now)


def test_racing_admission_passes_never_both_take_the_lock():
    # GIVEN blockAdmission and two queued workloads
    rig = Rig(store=RacingAdmissionStore())
    rig.doc = {"timeout": "60s", "blockAdmission": True}
    rig.submit("ns/a", 1, created_at=1.0)
    rig.submit("ns/b", 1, created_at=2.0)
    store = rig.store
    assert isinstance(store, RacingAdmissionStore)
    other = rig.plane(inline_admission=True)
    store.interleave = lambda: other.admission_pass()
    # WHEN a second pass completes in the middle of the first one's admission
    first = rig.plane(inline_admission=True)
    first.admission_pass()
    # THEN exactly one workload was admitted
    admitted = [w.key for w in store.active()]
    assert admitted == ["ns/a"]
    assert first.stats.conflicts >= 1
    assert [c for c in rig.cluster.calls if c[0] == "admit"] == [("admit", "ns/a", 1)]


def test_gpu_quota_skips_what_does_not_fit(rig: Rig):
    rig.doc = {"timeout": "60s", "gpuQuota": 16}
    rig.submit("ns/big", 1, gpus=16, created_at=1.0)
    rig.submit("ns/more", 1, gpus=8, created_at=2.0)
    assert rig.admit() == ["ns/big"]
    assert rig.admit() == []


def test_pod_group_waits_for_its_pods():
    rig = Rig()
    rig.plane().handle(WorkloadObserved(KEY, "q", 2, kind=Kind.POD_GROUP, seq=1))
    assert rig.admit() == []
    rig.pod(KEY, "p0", 1, ready=False, node=None)
    rig.pod(KEY, "p1", 1, ready=False, node=None)
    assert rig.admit() == [KEY]


def test_history_and_status_views(rig: Rig):
    _running(rig, 1)
    view = status(rig.store)
    assert view["counts"]["Running"] == 1
    info = describe(rig.store, KEY)
    assert info is not None
    assert [h["event"] for h in info["history"]] == ["Submitted", "Admitted", "PodsReady"]
    assert info["phase"] == Phase.RUNNING.value


def test_admission_pass_finishes_an_admission_that_stopped_before_its_timer(rig: Rig):
    # GIVEN an admission whose timer start failed (the pass stopped halfway)
    rig.doc = {"timeout": "60s", "blockAdmission": True}
    rig.submit("ns/a", 1)
    rig.timers.start = lambda *a: (_ for _ in ()).throw(TimeoutError("states"))  # type: ignore[method-assign]
    assert rig.admit() == ["ns/a"]
    assert not rig.timers.started
    del rig.timers.start
    # WHEN the next admission pass runs (no event for the workload came in between)
    rig.admit()
    # THEN the timer was started, so the lock it holds will be released by a deadline
    assert [k for k, _ in rig.timers.started] == ["ns/a"]
    assert not rig.store.items["ns/a"].outbox


def test_ready_count_follows_the_pods_through_node_loss_and_eviction(rig: Rig):
    def consistent() -> None:
        snap = rig.store.load(KEY)
        assert snap is not None
        assert snap.ready_count == snap.workload.ready_pods

    _running(rig, 3)
    consistent()
    rig.plane().handle(NodeObserved("n1", ready=False))
    consistent()
    rig.pod(KEY, "p2", 2, ready=False, node="n2")
    consistent()
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.RECOVERY, 1))
    consistent()
    snap = rig.store.load(KEY)
    assert snap is not None and snap.ready_count == 0 and snap.epoch == 1
    # a replacement pod of the next attempt counts from zero
    rig.pod(KEY, "p0", 1, ready=True, uid="p0-new")
    consistent()


@dataclass
class CountingStore(MemoryStore):
    full_loads: int = 0

    def load(self, key):
        self.full_loads += 1
        return super().load(key)


def test_pod_events_load_the_gang_only_when_it_may_become_whole():
    rig = Rig(store=CountingStore())
    rig.submit(KEY, 8)
    rig.admit()
    store = rig.store
    assert isinstance(store, CountingStore)
    store.full_loads = 0
    for i in range(8):
        rig.pod(KEY, f"p{i}", 1, ready=False)
    for i in range(8):
        rig.pod(KEY, f"p{i}", 2, ready=True)
    assert rig.phase(KEY) == "Running"
    assert store.full_loads <= 2  # the last pod, and its settled re-read


def test_one_pass_admits_every_admissible_workload(rig: Rig):
    for i in range(130):
        rig.submit(f"ns/w{i:03d}", 1, created_at=float(i))
    admitted = rig.admit()
    assert len(admitted) == 130 and admitted[:2] == ["ns/w000", "ns/w001"]


def test_describe_diagnoses_the_pods_not_ready_now(rig: Rig) -> None:
    # GIVEN an admitted gang of 3: one pod crash looping, one waiting for room, one Ready
    rig.submit(KEY, 3)
    rig.admit()
    rig.pod(
        KEY,
        "p0",
        1,
        ready=False,
        node="n1",
        phase="Running",
        waiting="CrashLoopBackOff",
        restarts=4,
        terminated="Error",
        exit_code=2,
    )
    rig.pod(KEY, "p1", 2, ready=False, node=None, reason="Unschedulable", scheduled=False)
    rig.pod(KEY, "p2", 3, ready=True)
    # WHEN someone asks
    info = describe(rig.store, KEY)
    assert info is not None
    # THEN each pod not ready now has its class, exit code and restarts
    pods = {p["pod"]: p for p in info["notReadyPods"]}
    assert pods["p0"]["class"] == "WorkloadFault"
    assert (pods["p0"]["exitCode"], pods["p0"]["restarts"]) == (2, 4)
    assert pods["p1"]["class"] == "Capacity"
    # AND the gang's diagnosis says it plainly: not the job's fault alone
    assert info["diagnosis"]["class"] == "Mixed"
    assert info["diagnosis"]["summary"] == (
        "1 of 3 pods crash at start (CrashLoopBackOff, exit code 2, 4 restarts); 1 of 3 pods "
        "are waiting for room on the cluster (Unschedulable): some pods fail on their own, "
        "others wait"
    )
