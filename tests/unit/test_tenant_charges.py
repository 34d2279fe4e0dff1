"""Tenants are charged for what they run: growth after admission, withdrawals not yet
carried out, and pods that outlive their workload's deletion (the core's rules)."""

from __future__ import annotations

from dataclasses import replace

from muster.core import (
    AdmissionGranted,
    Admit,
    DeadlineReached,
    Evict,
    Fleet,
    Kind,
    Phase,
    PodObserved,
    PodsListed,
    Reason,
    RunAdmission,
    TimerKind,
    WorkloadFinished,
    decide,
    plan_admission,
)
from muster.core.admission import holds_quota
from muster.core.model import Pod, Workload
from muster.core.workloads import ends_outliving

from tests.unit.conftest import kinds, published, ready, settings, submit

KEY = "team/a"
QUOTA = settings(gpuQuota=16, timeout="60s")


def admitted(s=QUOTA, pods: int = 2, gpus: int = 8) -> Workload:
    w = decide(None, submit(KEY, pods=pods, gpus=gpus), s, 0).workload
    assert w is not None
    d = decide(w, AdmissionGranted(KEY, 1), s, 0)
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    return d.workload


def running(s=QUOTA, pods: int = 2, gpus: int = 8) -> Workload:
    w = admitted(s, pods, gpus)
    for i in range(pods):
        w = decide(w, ready(KEY, f"p{i}", seq=2 + i, node=f"n{i}"), s, 1).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING
    return w


# --------------------------------------------------------------------------- growth


def test_an_admitted_job_that_grows_is_evicted_and_queued_again_with_its_new_size() -> None:
    # GIVEN a Job admitted for 2 pods and 8 GPUs
    w = admitted()
    # WHEN its owner raises parallelism: 64 pods, 512 GPUs
    d = decide(w, submit(KEY, seq=5, pods=64, gpus=512), QUOTA, 10)
    # THEN it is withdrawn at once, with the reason and both sizes in the history
    assert d.workload is not None
    assert kinds(d.effects) == ["StopTimer", "Evict", "Publish:Evicted", "RunAdmission"]
    evict = next(e for e in d.effects if isinstance(e, Evict))
    assert (evict.attempt, evict.reason) == (1, Reason.OUTGREW_ADMISSION)
    (evicted,) = published(d.effects, "Evicted")
    assert evicted.detail == {
        "attempt": 1,
        "reason": "OutgrewAdmission",
        "admitted": {"gangSize": 2, "gpus": 8},
        "requested": {"gangSize": 64, "gpus": 512},
    }
    # AND it waits in the queue with what it asks for now, charged nothing meanwhile
    grown = d.workload
    assert (grown.phase, grown.gang_size, grown.gpus, grown.next_spec) == (
        Phase.PENDING,
        64,
        512,
        None,
    )
    assert grown.timer is None and grown.requeue_at is None and grown.requeue_count == 0
    assert grown.reason == "OutgrewAdmission" and "512 GPUs" in (grown.message or "")
    assert grown.evictions == {"OutgrewAdmission": 1}
    assert not holds_quota(grown)


def test_more_gpus_for_the_same_gang_is_growth_too() -> None:
    w = running(pods=2, gpus=8)
    d = decide(w, submit(KEY, seq=9, pods=2, gpus=16), QUOTA, 10)
    assert d.workload is not None and d.workload.phase is Phase.PENDING
    assert [e.reason for e in d.effects if isinstance(e, Evict)] == [Reason.OUTGREW_ADMISSION]
    # and its running pods belong to the withdrawn attempt
    assert d.withdrawn and all(p.retired for p in d.workload.pods.values())


def test_a_grown_job_is_readmitted_only_within_its_quota() -> None:
    # GIVEN a 16-GPU quota, a running Job of 8 GPUs and another of 8 GPUs queued behind
    fleet = Fleet(QUOTA)
    fleet.apply(submit(KEY, pods=1, gpus=8), 0)
    fleet.apply(ready(KEY, "p0", seq=2), 1)
    fleet.apply(submit("team/b", pods=1, gpus=16, seq=3), 2)
    assert fleet.get("team/b").phase is Phase.PENDING  # type: ignore[union-attr]
    # WHEN the running one grows to 64 GPUs
    step = fleet.apply(submit(KEY, seq=4, pods=8, gpus=64), 3)
    # THEN it is evicted and stays queued (over quota); the other one is admitted
    assert [e.workload for e in step.effects if isinstance(e, Evict)] == [KEY]
    assert [e.workload for e in step.effects if isinstance(e, Admit)] == ["team/b"]
    assert fleet.get(KEY).phase is Phase.PENDING  # type: ignore[union-attr]


def test_shrinking_or_other_changes_still_wait_for_the_next_eviction() -> None:
    w = admitted(pods=4, gpus=16)
    d = decide(w, submit(KEY, seq=5, pods=2, gpus=8, priority=3), QUOTA, 10)
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    assert (d.workload.gang_size, d.workload.gpus) == (4, 16)
    assert d.workload.next_spec is not None and d.workload.next_spec["gpus"] == 8
    assert not [e for e in d.effects if isinstance(e, Evict)]


def test_a_pod_group_growing_is_left_to_its_pod_rules() -> None:
    w = replace(admitted(pods=2, gpus=8), kind=Kind.POD_GROUP)
    d = decide(w, submit(KEY, seq=5, pods=4, gpus=16, kind=Kind.POD_GROUP), QUOTA, 10)
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    assert not [e for e in d.effects if isinstance(e, Evict)]


def test_growth_is_evicted_in_a_dry_run_queue_too() -> None:
    # dryRun reports readiness evictions; this one keeps the quota true
    shadow = settings(gpuQuota=16, dryRun=True)
    w = admitted(shadow)
    d = decide(w, submit(KEY, seq=5, pods=8, gpus=64), shadow, 10)
    assert [e.reason for e in d.effects if isinstance(e, Evict)] == [Reason.OUTGREW_ADMISSION]


# --------------------------------------------------------------------------- what holds quota


def test_an_eviction_holds_the_quota_until_its_withdrawal_is_carried_out() -> None:
    w = admitted()
    assert w.timer is not None
    d = decide(w, DeadlineReached(KEY, 1, TimerKind.STARTUP, 1, w.timer.incarnation), QUOTA, 61)
    evicted = d.workload
    assert evicted is not None and evicted.phase is Phase.REQUEUED
    # while its Evict is still to be carried out it holds its quota; after, not
    assert holds_quota(evicted, d.effects)
    assert not holds_quota(evicted)
    # an Evict of an earlier attempt, or of another workload, does not count
    other = tuple(e for e in d.effects if not isinstance(e, Evict))
    earlier = Evict(KEY, 0, Kind.JOB, Reason.PODS_READY_TIMEOUT, None)
    elsewhere = Evict("team/b", 1, Kind.JOB, Reason.PODS_READY_TIMEOUT, None)
    assert not holds_quota(evicted, (*other, earlier, elsewhere))


def test_a_workload_deleted_while_its_pods_run_holds_its_quota_until_they_are_gone() -> None:
    # GIVEN a running gang of 2 pods, deleted with `--cascade=orphan`
    w = running()
    gone = decide(w, WorkloadFinished(KEY, Reason.DELETED, seq=10), QUOTA, 20).workload
    assert gone is not None and gone.phase is Phase.FINISHED
    # THEN it holds its quota while one of its pods still runs
    assert holds_quota(gone)
    d = decide(gone, PodObserved(KEY, "p0", 11, uid="p0-uid", deleted=True), QUOTA, 21)
    assert d.workload is not None and holds_quota(d.workload)
    d = decide(d.workload, PodObserved(KEY, "p1", 12, uid="p1-uid", phase="Succeeded"), QUOTA, 22)
    assert d.workload is not None and not holds_quota(d.workload)


def test_a_finished_or_never_admitted_workload_holds_nothing() -> None:
    w = running()
    done = decide(w, WorkloadFinished(KEY, Reason.SUCCEEDED, seq=10), QUOTA, 20).workload
    assert done is not None and not holds_quota(done)
    # pods of a Job created unsuspended (never admitted) were never Muster's to charge
    pods = {"p0": Pod("p0", 2, "u", "Running", True, "n0")}
    bypass = Workload(KEY, "q", 1, gpus=8, phase=Phase.FINISHED, reason="Deleted", pods=pods)
    assert not holds_quota(bypass)
    # nor an admitted one whose pods have all ended or are gone
    for ended in (replace(pods["p0"], phase="Succeeded"), replace(pods["p0"], deleted=True)):
        assert not holds_quota(replace(bypass, attempt=1, pods={"p0": ended}))


def test_a_deleted_workloads_pods_hold_its_quota_whatever_their_attempt_until_they_end() -> None:
    # GIVEN an admitted workload deleted (its pods orphaned, or terminating)
    pod = Pod("p0", 2, "u", "Running", True, "n0")
    gone = Workload(KEY, "q", 1, gpus=8, phase=Phase.FINISHED, reason="Deleted", attempt=2)
    # THEN a pod of an evicted attempt still running holds it (an eviction that met the
    # object gone withdrew nothing), and so does a pending one (it may still be bound)
    assert holds_quota(replace(gone, pods={"p0": replace(pod, retired=True, ready=False)}))
    pending = replace(pod, phase="Pending", ready=False, node=None)
    assert holds_quota(replace(gone, pods={"p0": pending}))
    # AND the end of the last one ends the holding
    before, after = pending, replace(pending, phase="Failed")
    assert ends_outliving(gone, before, after)
    assert not holds_quota(replace(gone, pods={"p0": after}))


def test_the_planner_charges_what_is_held_after_an_admission_ended() -> None:
    s = settings(gpuQuota=16, queues={"q": {"gpuQuota": 16}})
    waiting = Workload("team/b", "q", 1, gpus=16)
    gone = Workload(KEY, "q", 1, gpus=8, phase=Phase.FINISHED, reason="Deleted", attempt=1)
    assert plan_admission([waiting], [], s, 0, held=[gone]).admit == ()
    assert plan_admission([waiting], [], s, 0).admit == ("team/b",)


def test_the_fleet_keeps_charging_a_deleted_workload_until_its_pods_are_gone() -> None:
    # GIVEN a 16-GPU quota, a running 16-GPU gang and another one queued behind it
    fleet = Fleet(QUOTA)
    fleet.apply(submit(KEY, pods=2, gpus=16), 0)
    for i in range(2):
        fleet.apply(ready(KEY, f"p{i}", seq=2 + i, node=f"n{i}"), 1)
    fleet.apply(submit("team/b", pods=1, gpus=16, seq=5), 2)
    # WHEN the first is deleted with its pods left running
    step = fleet.apply(WorkloadFinished(KEY, Reason.DELETED, seq=6), 3)
    # THEN the queued one is not admitted on GPUs still in use
    assert not [e for e in step.effects if isinstance(e, Admit)]
    step = fleet.apply(PodObserved(KEY, "p0", 7, uid="p0-uid", deleted=True), 4)
    assert not [e for e in step.effects if isinstance(e, Admit)]
    # AND once the last pod is gone, it is
    step = fleet.apply(PodObserved(KEY, "p1", 8, uid="p1-uid", deleted=True), 5)
    assert [e.workload for e in step.effects if isinstance(e, Admit)] == ["team/b"]


# --------------------------------------------------------------------------- re-created, heard late

A1, A2 = "a-first-uid", "a-second-uid"


def _orphaned_then_recreated(fleet: Fleet, gpus: int = 8) -> None:
    """KEY (object A1, queue q) runs 2 pods, is deleted with its pods orphaned, and is
    re-created at once as object A2, asking for as much."""
    fleet.apply(submit(KEY, pods=2, gpus=gpus, uid=A1), 0)
    for i in range(2):
        pod = replace(ready(KEY, f"a1-{i}", seq=2 + i, node=f"n{i}"), owner=A1)
        fleet.apply(pod, 1)
    assert fleet.get(KEY).phase is Phase.RUNNING  # type: ignore[union-attr]
    fleet.apply(WorkloadFinished(KEY, Reason.DELETED, seq=10, uid=A1), 2)
    fleet.apply(submit(KEY, pods=2, gpus=gpus, seq=11, uid=A2), 3)


def test_a_job_recreated_while_its_predecessors_pods_run_keeps_them_charged() -> None:
    # GIVEN a queue quota of 12, a Job of 8 GPUs deleted with its pods orphaned, and
    # re-created under its name at once, asking for 8 GPUs again
    fleet = Fleet(settings(gpuQuota=64, queues={"q": {"gpuQuota": 12}}))
    _orphaned_then_recreated(fleet)
    # THEN the new object waits: the predecessor's pods still run on its quota
    now = fleet.get(KEY)
    assert now is not None and now.uid == A2 and now.phase is Phase.PENDING
    assert holds_quota(now)
    # AND the predecessor's pods never count for the new object's gang
    step = fleet.apply(replace(ready(KEY, "a1-0", seq=12, node="n0"), owner=A1), 4)
    assert fleet.get(KEY).pods == {}  # type: ignore[union-attr]
    assert not [e for e in step.effects if isinstance(e, Admit)]
    # WHEN one of them ends: still held; the last: free, and the new object is admitted
    gone = PodObserved(KEY, "a1-0", 13, uid="a1-0-uid", deleted=True, owner=A1)
    step = fleet.apply(gone, 5)
    assert not [e for e in step.effects if isinstance(e, Admit)]
    done = PodObserved(KEY, "a1-1", 14, uid="a1-1-uid", phase="Succeeded", owner=A1)
    step = fleet.apply(done, 6)
    assert [e.workload for e in step.effects if isinstance(e, Admit)] == [KEY]
    assert fleet.get(KEY).attempt == 1  # type: ignore[union-attr]


def test_the_predecessors_holding_is_charged_to_its_own_queue() -> None:
    # GIVEN the predecessor in queue q, the new object moved to queue r
    fleet = Fleet(settings(queues={"q": {"gpuQuota": 12}, "r": {"gpuQuota": 12}}))
    _orphaned_then_recreated(fleet)
    fleet.apply(submit(KEY, queue="r", pods=2, gpus=8, seq=12, uid=A2), 4)
    # THEN the new one is admitted on r's quota, and q stays charged for the orphans
    assert fleet.get(KEY).phase is Phase.ADMITTED  # type: ignore[union-attr]
    fleet.apply(submit("team/b", pods=1, gpus=8, seq=13), 5)
    assert fleet.get("team/b").phase is Phase.PENDING  # type: ignore[union-attr]


def test_a_new_object_seen_before_its_predecessors_deletion_takes_its_holding_over() -> None:
    # GIVEN a running Job whose deletion event is lost: the new object is heard first
    s = settings(gpuQuota=64, queues={"q": {"gpuQuota": 12}})
    w = running(s)
    w = replace(w, uid=A1)
    d = decide(w, submit(KEY, pods=2, gpus=8, seq=20, uid=A2), s, 5)
    # THEN the old object's pods, which may still run, are charged until heard ended
    assert d.workload is not None and d.workload.uid == A2
    assert holds_quota(d.workload)
    (held,) = d.workload.predecessors
    assert (held.uid, held.queue, held.gpus) == (A1, "q", 8)


def test_pods_of_a_deleted_job_heard_bound_after_its_deletion_are_charged() -> None:
    # GIVEN a 16-GPU quota, a Job of 16 GPUs admitted and deleted before any pod of it
    # was heard of: its quota went free
    fleet = Fleet(QUOTA)
    fleet.apply(submit(KEY, pods=1, gpus=16), 0)
    assert fleet.get(KEY).phase is Phase.ADMITTED  # type: ignore[union-attr]
    fleet.apply(WorkloadFinished(KEY, Reason.DELETED, seq=5), 1)
    # WHEN its orphaned pod is heard of late, bound and running
    fleet.apply(ready(KEY, "p0", seq=4, node="n0"), 2)
    # THEN it is charged again: a Job queued now waits
    fleet.apply(submit("team/b", pods=1, gpus=16, seq=6), 3)
    assert fleet.get("team/b").phase is Phase.PENDING  # type: ignore[union-attr]
    # AND once the pod ends, the queued one is admitted
    step = fleet.apply(PodObserved(KEY, "p0", 7, uid="p0-uid", deleted=True), 4)
    assert [e.workload for e in step.effects if isinstance(e, Admit)] == ["team/b"]


def test_a_later_objects_end_heard_first_hands_the_earlier_ones_holding_over() -> None:
    # GIVEN the record of a running Job (object A1), whose deletion and re-creation as
    # A2 were never heard; then A2's own deletion is
    s = settings(gpuQuota=64, queues={"q": {"gpuQuota": 12}})
    w = replace(running(s), uid=A1)
    d = decide(w, WorkloadFinished(KEY, Reason.DELETED, seq=30, uid=A2), s, 5)
    # THEN the record is A2's, finished, with none of A1's pods as its own, and A1's
    # pods, which may run on orphaned, still charged to A1's queue
    done = d.workload
    assert done is not None and d.reborn
    assert (done.uid, done.phase, done.pods) == (A2, Phase.FINISHED, {})
    (held,) = done.predecessors
    assert (held.uid, held.queue, held.gpus, set(held.pods)) == (A1, "q", 8, {"p0", "p1"})
    assert holds_quota(done)
    # AND A1's pods ending ends it, asking for a pass
    for i, seq in enumerate((31, 32)):
        gone = PodObserved(KEY, f"p{i}", seq, uid=f"p{i}-uid", deleted=True, owner=A1)
        d = decide(done, gone, s, 6)
        assert d.workload is not None
        done = d.workload
    assert not holds_quota(done)
    assert [e.reason for e in d.effects if isinstance(e, RunAdmission)] == [
        "pods of a deleted workload gone"
    ]


def test_an_admitted_predecessor_with_no_pod_known_is_charged_until_a_listing() -> None:
    # GIVEN an admitted Job (object A1) none of whose pods was heard of (an agent gap),
    # and the agent's relist: the new object A2 first, the pods after
    s = settings(gpuQuota=64, queues={"q": {"gpuQuota": 12}})
    w = replace(admitted(s), uid=A1)
    d = decide(w, submit(KEY, pods=2, gpus=8, seq=20, uid=A2), s, 5)
    # THEN the new object's record charges A1's GPUs: its pods may be running
    assert d.workload is not None and holds_quota(d.workload)
    assert d.workload.predecessors[0].presumed
    # AND a pod listing that holds none of them ends it, asking for a pass
    listing = decide(d.workload, PodsListed(KEY, 30, {}), s, 6)
    assert listing.workload is not None and not holds_quota(listing.workload)
    assert [e.reason for e in listing.effects if isinstance(e, RunAdmission)] == [
        "pods of a deleted workload gone"
    ]
    # OR one of its pods heard of, running, charges it as any other
    pod = replace(ready(KEY, "a1-0", seq=21), owner=A1)
    heard = decide(d.workload, pod, s, 6).workload
    assert heard is not None and holds_quota(heard) and not heard.predecessors[0].presumed
