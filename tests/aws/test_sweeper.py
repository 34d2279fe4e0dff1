"""The sweeper: whatever a lost message should have moved on, it sends again."""

from __future__ import annotations

import pytest
from muster.core import (
    DeadlineReached,
    Kind,
    NodeObserved,
    Outcome,
    Phase,
    RequeueDue,
    TimerKind,
)
from muster.harness.lambda_events import LambdaContext
from muster.runtime.memory import MemoryMetrics, MemoryStore
from muster.runtime.service import MAX_EFFECT_TRIES, EffectFailed
from muster.runtime.sweeper import FIT_CHECK_SECONDS, GRACE_SECONDS, Sweeper

from functions.sweeper.handler import handler as sweeper_handler

from .conftest import Rig

KEY = "ns/train"


def _sweeper(rig: Rig) -> Sweeper:
    return Sweeper(rig.store, rig.messages, rig.settings, rig.metrics)


def _evicted(rig: Rig) -> None:
    rig.submit(KEY, 1)
    assert rig.admit() == [KEY]
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    assert rig.phase(KEY) == "Requeued"


def test_a_lost_requeue_message_is_sent_again_once_its_time_passed(rig: Rig):
    # GIVEN a requeued workload whose requeue message was lost (e.g. it reached the DLQ)
    _evicted(rig)
    rig.messages.requeues.clear()
    sweeper = _sweeper(rig)
    # WHEN the sweeper runs before the requeue time (plus grace): nothing to do
    assert sweeper.run(rig.clock.now + 60).requeues == []
    # WHEN it runs after it
    rig.clock.now += 60 + GRACE_SECONDS
    report = sweeper.run(rig.clock.now)
    # THEN the requeue goes out again, and delivering it makes the workload admissible
    assert report.requeues == [KEY]
    assert rig.messages.requeues == [(KEY, 1, 0.0)]
    assert rig.plane().handle(RequeueDue(KEY, 1)) == [Outcome.APPLIED]
    assert rig.phase(KEY) == "Pending"


def test_a_deadline_with_no_timer_acting_is_signalled_by_the_sweeper(rig: Rig):
    # GIVEN an admitted workload whose timer execution never started
    rig.submit(KEY, 2)
    rig.admit()
    rig.timers.running.clear()
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.timer is not None
    deadline = snap.workload.timer.deadline
    # WHEN the sweeper runs after the deadline
    rig.clock.now = deadline + GRACE_SECONDS
    report = _sweeper(rig).run(rig.clock.now)
    # THEN the timer's signal is sent, and it evicts on the attempt it was armed for
    assert report.deadlines == [KEY]
    [(workload, timer, delay)] = rig.messages.deadlines
    assert (workload, timer, delay) == (KEY, snap.workload.timer, 0.0)
    rig.plane().handle(DeadlineReached(KEY, timer.attempt, timer.kind, timer.episode))
    assert rig.phase(KEY) == "Requeued"


def test_a_lost_workload_faults_signal_is_sent_again_by_the_sweeper(rig: Rig):
    # GIVEN evictAfter 30s and a gang whose pods cannot pull their image, whose
    # fault timer's execution never started
    rig.doc = {**rig.doc, "workloadFaults": {"evictAfter": "30s"}}
    rig.submit(KEY, 2)
    rig.admit()
    for i in range(2):
        rig.pod(KEY, f"p{i}", 10 + i, ready=False, waiting="ImagePullBackOff", scheduled=True)
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.fault_timer is not None
    fault = snap.workload.fault_timer
    rig.timers.running.clear()
    # WHEN the sweeper runs after its deadline (the readiness deadline still ahead)
    rig.clock.now = fault.deadline + GRACE_SECONDS
    report = _sweeper(rig).run(rig.clock.now)
    # THEN the fault timer's signal is sent, and it evicts the gang early
    assert report.deadlines == [KEY]
    [(workload, timer, _)] = rig.messages.deadlines
    assert (workload, timer) == (KEY, fault)
    rig.plane().handle(
        DeadlineReached(KEY, timer.attempt, timer.kind, timer.episode, timer.incarnation)
    )
    assert rig.phase(KEY) == "Requeued"
    w = rig.store.load(KEY).workload
    assert w.evictions == {"WorkloadFault/WaitForStart": 1}


def test_an_admissible_workload_with_no_pass_coming_gets_one(rig: Rig):
    # GIVEN a submitted workload whose admission request was lost
    rig.submit(KEY, 1)
    rig.messages.admission_requests.clear()
    # WHEN the sweeper runs
    report = _sweeper(rig).run(rig.clock.now)
    # THEN it asks for a pass, which admits it
    assert report.admission_requested
    assert rig.messages.admission_requests == [("sweeper: admissible, no pass seen", None)]
    assert rig.admit() == [KEY]


def test_a_pod_group_with_its_pods_and_no_pass_coming_gets_one(rig: Rig):
    # GIVEN a pod group whose pods are all there, the admission request it made lost
    group = "ns/grp@podgroup"
    rig.submit(group, 2, kind=Kind.POD_GROUP)
    for i, seq in enumerate((2, 3)):
        rig.pod(group, f"g{i}", seq, ready=False, node=None)
    rig.messages.admission_requests.clear()
    # WHEN the sweeper runs
    report = _sweeper(rig).run(rig.clock.now)
    # THEN it judges the group on its pods (the phase index holds none of them) and
    # asks for a pass, which admits it
    assert report.admission_requested
    assert rig.admit() == [group]


def test_leftover_effects_of_a_deactivated_workload_are_repaired_by_a_pass_naming_it(rig: Rig):
    # GIVEN a deactivating eviction whose effects stopped halfway (its Evict failed once)
    rig.doc = {"timeout": "60s", "requeuingStrategy": {"backoffLimitCount": 0}}
    rig.submit(KEY, 1)
    rig.admit()
    rig.clock.now += 60
    rig.cluster.fail_next = ConnectionError("API server unreachable")
    with pytest.raises(EffectFailed):  # redelivered by SQS; say the message was lost instead
        rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    assert rig.phase(KEY) == "Deactivated" and rig.store.items[KEY].outbox
    # WHEN the sweeper runs
    report = _sweeper(rig).run(rig.clock.now)
    # THEN it asks for a pass naming it, and the pass carries the eviction out
    assert report.repairs == [KEY]
    assert rig.messages.admission_requests[-1] == ("sweeper: unfinished effects", KEY)
    rig.plane(inline_admission=True).admission_pass([KEY])
    assert ("evict", KEY, 1) in rig.cluster.calls
    assert not rig.store.items[KEY].outbox


def test_a_quiet_cluster_sends_nothing_and_quarantined_workloads_are_counted(rig: Rig):
    # GIVEN a running workload, one waiting out its backoff, one blocked by quota,
    # and one quarantined
    rig.doc = {"timeout": "60s", "gpuQuota": 8}
    rig.submit("ns/run", 1, gpus=8, created_at=1.0)
    rig.admit()
    rig.pod("ns/run", "r0", 1, ready=True)
    rig.submit("ns/wait", 1, gpus=8, created_at=2.0)
    rig.submit("ns/bad", 1, gpus=0, created_at=3.0)
    for _ in range(MAX_EFFECT_TRIES):
        rig.cluster.fail_next = PermissionError("forbidden")
        rig.admit()
    assert rig.store.load("ns/bad").quarantine is not None  # type: ignore[union-attr]
    rig.messages.admission_requests.clear()
    rig.messages.requeues.clear()
    metrics = MemoryMetrics()
    # WHEN the sweeper runs, long after everything
    report = Sweeper(rig.store, rig.messages, rig.settings, metrics).run(rig.clock.now + 3600)
    # THEN it sends nothing (the quarantined workload's timer is left alone too)
    assert report.sent == 0
    assert rig.messages.admission_requests == [] and rig.messages.deadlines == []
    # AND it reports the quarantined workload, for the alarm
    assert report.quarantined == ["ns/bad"]
    assert metrics.total("QuarantinedWorkloads") == 1


def test_the_sweeper_function_reports_what_it_sent(rig: Rig):
    rig.submit(KEY, 1)
    out = sweeper_handler({}, LambdaContext(), sweeper=_sweeper(rig))
    assert out["admissionRequested"] is True and out["quarantined"] == 0
    assert rig.store.load(KEY).workload.phase is Phase.PENDING  # type: ignore[union-attr]


class LoadCountingStore(MemoryStore):
    """Counts whole-gang loads (what the fit on the nodes reads for each quota holder)."""

    loads = 0

    def load(self, key):
        self.loads += 1
        return super().load(key)


def test_with_the_capacity_check_the_sweeper_reads_holders_pods_only_when_quota_admits():
    # GIVEN capacityCheck, one 8-GPU node held by a running gang, and a queued gang
    rig = Rig(store=LoadCountingStore())
    rig.doc = {"timeout": "60s", "capacityCheck": True, "gpuQuota": 8}
    rig.plane().handle(NodeObserved("n0", seq=1, gpus=8))
    rig.submit("ns/holder", 1, gpus=8)
    assert rig.admit() == ["ns/holder"]
    rig.pod("ns/holder", "h-0", 2, ready=True, node="n0")
    rig.submit("ns/waiting", 1, gpus=8)
    store = rig.store
    assert isinstance(store, LoadCountingStore)
    sweeper = _sweeper(rig)
    # WHEN it sweeps while the quota is full
    store.loads = 0
    assert not sweeper.run(rig.clock.now).admission_requested
    # THEN it read no gang's pods: quota alone says nobody is admissible
    assert store.loads == 0
    # WHEN the quota is raised but the node is still full
    rig.doc = {"timeout": "60s", "capacityCheck": True, "gpuQuota": 16}
    assert not sweeper.run(rig.clock.now).admission_requested
    # THEN it read the holder's pods to judge the fit, once
    assert store.loads == 1
    # AND the sweeps of the next few minutes do not read them again
    for _ in range(4):
        rig.clock.now += 60
        assert not sweeper.run(rig.clock.now).admission_requested
    assert store.loads == 1
    # AND once FIT_CHECK_SECONDS have passed, a sweep judges the fit again and, with
    # a second node reported meanwhile (its pass request lost), asks for a pass
    rig.plane().handle(NodeObserved("n1", seq=2, gpus=8))
    rig.messages.admission_requests.clear()
    rig.clock.now += FIT_CHECK_SECONDS
    assert sweeper.run(rig.clock.now).admission_requested
    assert store.loads == 2
    assert rig.admit() == ["ns/waiting"]
