"""Tenants are charged for what they run, through the control plane and its stores:
an eviction the cluster refuses keeps its quota held, pods that outlive their Job's
deletion keep it held until they are gone, a view the API server refuses holds
nothing back, a Job that grows is withdrawn, and one candidate the planner cannot
judge stops neither the admission pass nor the sweeper."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from muster import contract
from muster.core import (
    POD_SCOPE,
    DeadlineReached,
    Evict,
    Kind,
    Phase,
    PodObserved,
    Reason,
    SnapshotPart,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core import admission as core_admission
from muster.core.capacity import NodeCapacity
from muster.kube.adapter import ClusterActionError
from muster.runtime.ports import RecordingCluster
from muster.runtime.service import MAX_EFFECT_TRIES, EffectFailed
from muster.runtime.sweeper import sweep

from tests.aws.conftest import Rig
from tests.aws.stores import dynamo_store

FIRST, SECOND = "ns/first", "ns/second"
PADDED = "the API server refused (422 Invalid): metadata.annotations: Too long: must have at most 262144 bytes"


@dataclass
class PaddedCluster(RecordingCluster):
    """A cluster whose objects' owners filled their annotations to the limit: every
    patch that adds one is refused with 422 (as the Kubernetes adapter raises it)."""

    refuse_evict: bool = False
    refuse_record: bool = False

    def evict(self, effect: Evict) -> None:
        if self.refuse_evict:
            raise ClusterActionError(f"{effect.workload}: {PADDED}")
        super().evict(effect)

    def record(self, workload: str, kind: Kind, view: object) -> None:  # type: ignore[override]
        if self.refuse_record:
            raise ClusterActionError(f"{workload}: {PADDED}")
        super().record(workload, kind, view)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "dynamodb"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    doc = {"timeout": "60s", "gpuQuota": 16}
    if request.param == "memory":
        yield Rig(cluster=PaddedCluster(), doc=doc)
        return
    with dynamo_store(f"charges{id(request)}") as store:
        yield Rig(store=store, cluster=PaddedCluster(), doc=doc)  # type: ignore[arg-type]


def phase(rig: Rig, key: str) -> Phase:
    snap = rig.store.load(key)
    assert snap is not None
    return snap.workload.phase


def first_admitted_second_waiting(rig: Rig, pods: int = 1) -> None:
    """A 16-GPU quota held by FIRST (16 GPUs); SECOND (16 GPUs) waits behind it."""
    rig.submit(FIRST, pods, gpus=16)
    assert rig.admit() == [FIRST]
    rig.plane().handle(WorkloadObserved(SECOND, "default", 1, gpus=16, seq=2))
    assert rig.admit() == []


def timed_out(rig: Rig, key: str) -> DeadlineReached:
    snap = rig.store.load(key)
    assert snap is not None and snap.workload.timer is not None
    rig.clock.now += 61
    timer = snap.workload.timer
    return DeadlineReached(key, timer.attempt, timer.kind, timer.episode, timer.incarnation)


# --------------------------------------------------------------------------- 5. refused withdrawals


def test_an_eviction_the_cluster_refuses_keeps_the_quota_held_even_quarantined(rig: Rig) -> None:
    cluster = rig.cluster
    assert isinstance(cluster, PaddedCluster)
    first_admitted_second_waiting(rig)
    # GIVEN the Job's owner padded its annotations: its eviction is refused (422)
    cluster.refuse_evict = True
    # WHEN its startup deadline passes: the eviction is committed, its withdrawal refused
    with pytest.raises(EffectFailed):
        rig.plane().handle(timed_out(rig, FIRST))
    assert phase(rig, FIRST) is Phase.REQUEUED
    # THEN its GPUs are still charged: nothing is admitted on them, pass after pass,
    # also once it is quarantined
    for _ in range(MAX_EFFECT_TRIES):
        assert rig.admit() == []
    snap = rig.store.load(FIRST)
    assert snap is not None and snap.quarantine is not None
    assert rig.admit() == []
    assert phase(rig, SECOND) is Phase.PENDING
    # WHEN the cause is fixed and the workload released
    cluster.refuse_evict = False
    assert rig.store.release(FIRST)
    # THEN the withdrawal is carried out first, and only then are its GPUs given to the next
    assert rig.admit() == [SECOND]
    assert ("evict", FIRST, 1) in cluster.calls
    assert FIRST not in rig.store.ledger().recent


def test_an_eviction_carried_out_frees_the_quota_at_once(rig: Rig) -> None:
    first_admitted_second_waiting(rig)
    rig.plane().handle(timed_out(rig, FIRST))
    assert FIRST not in rig.store.ledger().recent
    assert rig.admit() == [SECOND]


def test_a_view_the_api_server_refuses_holds_nothing_back(rig: Rig) -> None:
    # GIVEN a Job whose owner padded its annotations, so Muster's view is refused (422)
    cluster = rig.cluster
    assert isinstance(cluster, PaddedCluster)
    cluster.refuse_record = True
    first_admitted_second_waiting(rig)
    # WHEN it times out, again and again past the quarantine limit
    rig.plane().handle(timed_out(rig, FIRST))
    # THEN its eviction and requeue went through, nothing is left to carry out,
    # it is never quarantined, and the refusals are counted
    snap = rig.store.load(FIRST)
    assert snap is not None and not snap.outbox and snap.quarantine is None
    assert ("evict", FIRST, 1) in cluster.calls
    assert rig.metrics.total(contract.METRIC_EFFECT_FAILURES, effect="RecordView") >= 2
    assert rig.admit() == [SECOND]


# --------------------------------------------------------------------------- 7. orphaning deletes


def test_pods_outliving_their_jobs_deletion_keep_its_quota_until_they_are_gone(rig: Rig) -> None:
    # GIVEN a running gang of two pods holding the 16-GPU quota, another one waiting
    first_admitted_second_waiting(rig, pods=2)
    rig.pod(FIRST, "first-0", 10, ready=True, node="n1")
    rig.pod(FIRST, "first-1", 11, ready=True, node="n2")
    assert phase(rig, FIRST) is Phase.RUNNING
    # WHEN it is deleted with `kubectl delete --cascade=orphan`: its pods keep running
    rig.plane().handle(WorkloadFinished(FIRST, Reason.DELETED, seq=20))
    assert phase(rig, FIRST) is Phase.FINISHED
    # THEN its GPUs stay charged
    assert rig.admit() == []
    # AND a pod of it ending asks for a pass, which still finds one running
    requests = len(rig.messages.admission_requests)
    rig.pod(FIRST, "first-0", 21, ready=False, node="n1", phase="Succeeded")
    assert rig.messages.admission_requests[requests:] == [
        ("pods of a deleted workload gone", FIRST)
    ]
    assert rig.admit() == []
    # WHEN the last one is deleted (through the batched pod path)
    gone = PodObserved(FIRST, "first-1", 22, uid="first-1-uid", node="n2", deleted=True)
    rig.plane().handle_pods(FIRST, [gone])
    assert rig.messages.admission_requests[-1] == ("pods of a deleted workload gone", FIRST)
    # THEN the pass frees its quota and admits the next one
    assert rig.admit() == [SECOND]
    assert FIRST not in rig.store.ledger().recent


def test_a_pod_snapshot_without_the_outliving_pods_ends_the_holding(rig: Rig) -> None:
    # GIVEN a Job deleted while its pod ran, the pod's own deletion event lost
    first_admitted_second_waiting(rig)
    rig.pod(FIRST, "first-0", 10, ready=True, node="n1")
    rig.plane().handle(WorkloadFinished(FIRST, Reason.DELETED, seq=20))
    assert rig.admit() == []
    # WHEN the agent's next pod listing no longer holds the pod
    listing = SnapshotPart("Pod.30", 1, 1, POD_SCOPE, 30, pods={SECOND: {}})
    rig.plane().handle(listing)
    # THEN the workload holds nothing any more, and a pass is asked for
    assert FIRST not in rig.store.ledger().recent
    assert rig.messages.admission_requests[-1] == ("pods of a deleted workload gone", FIRST)
    assert rig.admit() == [SECOND]


def test_an_eviction_that_finds_the_job_gone_keeps_its_quota_while_its_pods_run(
    rig: Rig,
) -> None:
    cluster = rig.cluster
    assert isinstance(cluster, PaddedCluster)
    # GIVEN a 16-GPU gang of two pods, one bound and starting, one not bound yet
    first_admitted_second_waiting(rig, pods=2)
    rig.pod(FIRST, "first-0", 10, ready=False, node="n1")
    rig.pod(FIRST, "first-1", 11, ready=False, node=None)
    # AND the Job deleted with its pods orphaned, which the control plane has not heard
    cluster.gone.add(FIRST)
    # WHEN its startup deadline passes: the eviction finds the object gone (404)
    rig.plane().handle(timed_out(rig, FIRST))
    assert phase(rig, FIRST) is Phase.FINISHED
    # THEN nobody withdrew its pods: its GPUs stay charged while they may run
    assert rig.admit() == []
    rig.pod(FIRST, "first-0", 20, ready=False, node="n1", deleted=True)
    assert rig.admit() == []  # the pending one may still be bound
    # AND once the last is gone, the next one is admitted
    rig.pod(FIRST, "first-1", 21, ready=False, node=None, deleted=True)
    assert rig.admit() == [SECOND]


def test_a_job_deleted_with_its_pods_gone_frees_its_quota_at_once(rig: Rig) -> None:
    first_admitted_second_waiting(rig)
    rig.pod(FIRST, "first-0", 10, ready=True, node="n1")
    rig.pod(FIRST, "first-0", 11, ready=False, node="n1", deleted=True)
    rig.plane().handle(WorkloadFinished(FIRST, Reason.DELETED, seq=20))
    assert FIRST not in rig.store.ledger().recent
    assert rig.admit() == [SECOND]


# --------------------------------------------------------------------------- 2. growth


def test_a_running_job_scaled_up_is_withdrawn_and_waits_for_its_new_quota(rig: Rig) -> None:
    # GIVEN a running 1-pod Job of 8 GPUs under a 16-GPU quota
    rig.submit(FIRST, 1, gpus=8)
    assert rig.admit() == [FIRST]
    rig.pod(FIRST, "first-0", 10, ready=True, node="n1")
    # WHEN its owner raises parallelism to 64 pods of 8 GPUs
    rig.plane().handle(WorkloadObserved(FIRST, "default", 64, gpus=512, seq=30))
    # THEN it is suspended, and queued with what it asks for now, over its quota
    assert ("evict", FIRST, 1) in rig.cluster.calls
    snap = rig.store.load(FIRST)
    assert snap is not None and snap.workload.phase is Phase.PENDING
    assert (snap.workload.gang_size, snap.workload.gpus) == (64, 512)
    evicted = [d for e, k, d in rig.bus.events if e == "Evicted" and k == FIRST]
    assert evicted[-1]["reason"] == "OutgrewAdmission"
    assert rig.admit() == []


# --------------------------------------------------------------------------- 6. one bad candidate

FIT = {"timeout": "60s", "capacityCheck": True}


def nodes(rig: Rig, count: int = 2) -> None:
    for i in range(count):
        rig.store.put_node(NodeCapacity(f"n{i}", 1, 8, True, None, 0))


def test_an_absurd_job_does_not_stop_the_pass_or_the_sweeper() -> None:
    # GIVEN the capacity check, two nodes, a suspended Job of 2,147,483,647 pods
    # without GPUs, and a real gang queued behind it
    rig = Rig(doc=FIT)
    nodes(rig)
    rig.plane().handle(WorkloadObserved("ns/absurd", "default", 2_147_483_647, seq=1))
    rig.plane().handle(WorkloadObserved(SECOND, "default", 2, gpus=16, shape=((2, 8),), seq=2))
    # WHEN the sweeper judges the queue, and a pass runs
    report = sweep(rig.store, rig.messages, rig.settings(), rig.clock(), rig.metrics)
    # THEN both are planned, pod groups never listed one entry per pod
    assert report.admission_requested
    assert sorted(rig.admit()) == ["ns/absurd", SECOND]


def test_a_candidate_the_planner_cannot_judge_is_set_aside_counted_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(doc=FIT)
    nodes(rig)
    real_fit = core_admission.fit

    def breaks(fitter, w, known, **kw):  # type: ignore[no-untyped-def]
        if w.key == "ns/bad":
            raise MemoryError("cannot list its pods")
        return real_fit(fitter, w, known, **kw)

    monkeypatch.setattr(core_admission, "fit", breaks)
    rig.plane().handle(WorkloadObserved("ns/bad", "default", 1, gpus=8, seq=1))
    rig.plane().handle(WorkloadObserved(SECOND, "default", 1, gpus=8, seq=2))
    # WHEN the sweeper and a pass plan the queue
    report = sweep(rig.store, rig.messages, rig.settings(), rig.clock(), rig.metrics)
    admitted = rig.admit()
    # THEN the other one is admitted; the bad one is passed over with its error, counted
    assert report.admission_requested
    assert admitted == [SECOND]
    assert phase(rig, "ns/bad") is Phase.PENDING
    assert rig.metrics.total(contract.METRIC_PLANNING_FAILURES) >= 2
    logged = [r for r in caplog.records if "could not judge" in r.getMessage()]
    assert logged and all(getattr(r, "workload", "") == "ns/bad" for r in logged)


def test_a_sweep_whose_judgement_fails_still_does_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(doc=FIT)
    rig.plane().handle(WorkloadObserved(SECOND, "default", 1, gpus=8, seq=2))
    rig.store.quarantine(SECOND, 1, _quarantine())

    def broken(*_a: object, **_kw: object) -> None:
        raise RuntimeError("planner down")

    monkeypatch.setattr("muster.runtime.sweeper._admissible", broken)
    report = sweep(rig.store, rig.messages, rig.settings(), rig.clock(), rig.metrics)
    assert report.quarantined == [SECOND]
    assert rig.metrics.total(contract.METRIC_QUARANTINED) == 1
    assert rig.metrics.total(contract.METRIC_PLANNING_FAILURES) == 1


def _quarantine():  # type: ignore[no-untyped-def]
    from muster.runtime.ports import Quarantine

    return Quarantine("Evict: refused", "Evict", 5, 0.0)


# --------------------------------------------------------------------------- 8. re-created, heard late

OLD, NEW = "first-old-uid", "first-new-uid"


def test_a_job_recreated_while_its_orphans_run_keeps_them_charged(rig: Rig) -> None:
    # GIVEN FIRST (16 GPUs, object OLD) running on the 16-GPU quota, SECOND waiting
    rig.submit(FIRST, 2, gpus=16, uid=OLD)
    assert rig.admit() == [FIRST]
    rig.plane().handle(WorkloadObserved(SECOND, "default", 1, gpus=16, seq=2))
    rig.pod(FIRST, "old-0", 10, ready=True, node="n1", owner=OLD)
    rig.pod(FIRST, "old-1", 11, ready=True, node="n2", owner=OLD)
    # WHEN it is deleted with its pods orphaned, and re-created under its name at once
    rig.plane().handle(WorkloadFinished(FIRST, Reason.DELETED, seq=20, uid=OLD))
    rig.plane().handle(WorkloadObserved(FIRST, "default", 2, gpus=16, seq=21, uid=NEW))
    snap = rig.store.load(FIRST)
    assert snap is not None and snap.workload.uid == NEW
    # THEN the orphans' GPUs stay charged: neither the new object nor SECOND is admitted
    assert rig.admit() == []
    # AND an orphan's report (through the batched path too) never counts for the new one
    rig.pod(FIRST, "old-0", 22, ready=True, node="n1", owner=OLD)
    report = PodObserved(
        FIRST, "old-1", 23, uid="old-1-uid", phase="Running", ready=True, node="n2", owner=OLD
    )
    rig.plane().handle_pods(FIRST, [report])
    snap = rig.store.load(FIRST)
    assert snap is not None and snap.workload.pods == {}
    assert rig.admit() == []
    # WHEN one orphan ends: still held; the last: a pass is asked for and admits
    rig.pod(FIRST, "old-0", 24, ready=False, node="n1", phase="Succeeded", owner=OLD)
    assert rig.admit() == []
    gone = PodObserved(FIRST, "old-1", 25, uid="old-1-uid", node="n2", deleted=True, owner=OLD)
    rig.plane().handle_pods(FIRST, [gone])
    assert rig.messages.admission_requests[-1] == ("pods of a deleted workload gone", FIRST)
    assert rig.admit() == [FIRST]


def test_a_deleted_jobs_pod_heard_running_after_its_deletion_is_charged(rig: Rig) -> None:
    # GIVEN FIRST admitted and deleted before any pod of it was heard of: quota free
    first_admitted_second_waiting(rig)
    rig.plane().handle(WorkloadFinished(FIRST, Reason.DELETED, seq=20))
    assert FIRST not in rig.store.ledger().recent
    # WHEN its orphaned pod is heard of running (its events came late)
    version = rig.store.ledger().version
    rig.pod(FIRST, "first-0", 15, ready=True, node="n1")
    # THEN it is named a holder again, the ledger moved (a pass that read it before
    # commits nothing), and SECOND waits
    assert FIRST in rig.store.ledger().recent
    assert rig.store.ledger().version > version
    assert rig.admit() == []
    # AND once the pod ends, SECOND is admitted
    rig.pod(FIRST, "first-0", 21, ready=False, node="n1", deleted=True)
    assert rig.admit() == [SECOND]
