"""The control plane's view stays true to the cluster on the stream a real cluster sends.

Each test is one way the view used to drift from the cluster: a Job re-created
under its name, a late event of a deleted pod, an earlier pod object, a late node
condition, deletions while no agent ran, a spec change while admitted, a pod
group's replacement pods, and items left behind by finished workloads.
"""

from __future__ import annotations

from muster.core import (
    DeadlineReached,
    Kind,
    NodeObserved,
    Outcome,
    PodObserved,
    Reason,
    SnapshotPart,
    TimerKind,
    WorkloadFinished,
    WorkloadObserved,
)

from .conftest import Rig

KEY = "ns/train"
DAY = 86400.0


def observed(seq: int, uid: str, gang: int = 2, gpus: int = 0, key: str = KEY, **kw: object):
    return WorkloadObserved(key, "default", gang, gpus=gpus, seq=seq, uid=uid, **kw)  # type: ignore[arg-type]


def running(rig: Rig, uid: str = "job-1", gang: int = 2, key: str = KEY, seq: int = 10) -> None:
    rig.plane().handle(observed(seq, uid, gang, key=key))
    assert key in rig.admit()
    for i in range(gang):
        rig.pod(key, f"{key}-p{i}", seq + 1 + i, ready=True, node="n1", uid=f"{uid}-p{i}")
    assert rig.phase(key) == "Running"


def snapshot(scope: str, revision: int, part: int = 1, parts: int = 1, **listed: object):
    return SnapshotPart(f"{scope}.{revision}", part, parts, scope, revision, **listed)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- 1. same name, new object


def test_a_job_re_created_under_its_name_starts_a_new_lifecycle(rig: Rig):
    # GIVEN a running Job, then deleted
    running(rig, "job-1")
    old_timer = rig.timers.started[0][1]
    rig.plane().handle(WorkloadFinished(KEY, Reason.DELETED, 20, uid="job-1"))
    assert rig.phase(KEY) == "Finished"
    # WHEN the same name is applied again: a new, suspended object
    rig.plane().handle(observed(30, "job-2"))
    # THEN it is a new workload: queued, admitted at attempt 1, with a timer of its own
    assert rig.phase(KEY) == "Pending"
    assert rig.admit() == [KEY]
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.attempt == 1 and snap.workload.uid == "job-2"
    new_timer = rig.timers.started[-1][1]
    assert rig.timers.name(KEY, new_timer) != rig.timers.name(KEY, old_timer)
    # and it inherits no pods: admitted, not PodsReady
    assert rig.phase(KEY) == "Admitted" and snap.workload.pods == {}
    # and the old object's timer, should it fire late, changes nothing
    late = DeadlineReached(KEY, 1, TimerKind.STARTUP, 1, incarnation=old_timer.incarnation)
    assert rig.plane().handle(late) == [Outcome.STALE]
    assert rig.phase(KEY) == "Admitted"


def test_a_re_created_job_whose_deletion_was_lost_releases_the_old_one(rig: Rig):
    # GIVEN a running Job whose deletion never reached the control plane
    running(rig, "job-1")
    # WHEN the new object under its name is observed
    rig.plane().handle(observed(30, "job-2"))
    # THEN the old incarnation is finished (its timer stopped) and the new one queued
    assert rig.bus.names(KEY)[-2:] == ["Finished", "Submitted"]
    assert rig.phase(KEY) == "Pending"
    assert rig.admit() == [KEY]
    # and a late event of the old object is stale, not a new lifecycle
    assert rig.plane().handle(observed(12, "job-1")) == [Outcome.STALE]


def test_nothing_of_a_finished_incarnation_outlives_its_ttl(rig: Rig):
    # GIVEN a finished Job with two pods
    running(rig, "job-1")
    rig.plane().handle(WorkloadFinished(KEY, Reason.DELETED, 20, uid="job-1"))
    # WHEN the table's TTL has run
    rig.store.expire(rig.clock.now + 31 * DAY)
    # THEN every item it owned is gone (state, pods, history)
    assert rig.store.load(KEY) is None and rig.store.pods.get(KEY, {}) == {}
    # and a same-name workload starts empty: admitted, not PodsReady without a timer
    rig.plane().handle(observed(40, "job-2"))
    rig.admit()
    assert rig.phase(KEY) == "Admitted" and rig.timers.running


def test_pods_of_an_earlier_object_are_not_the_new_ones_even_before_they_expire(rig: Rig):
    running(rig, "job-1")
    rig.plane().handle(observed(30, "job-2"))  # deletion lost; pod items still stored
    rig.admit()
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.pods == {} and snap.ready_count == 0
    assert rig.phase(KEY) == "Admitted"


# --------------------------------------------------------------------------- 2. a deleted pod comes back


def test_a_late_ready_event_of_a_deleted_pod_does_not_bring_it_back(rig: Rig):
    # GIVEN a running gang that lost a pod: Recovering, its recovery timer armed
    running(rig, "job-1")
    pod = f"{KEY}-p1"
    rig.plane().handle(PodObserved(KEY, pod, 20, uid="job-1-p1", phase="Running", deleted=True))
    assert rig.phase(KEY) == "Recovering"
    # WHEN a late (or redelivered) "ready" event of that pod arrives
    late = PodObserved(KEY, pod, 12, uid="job-1-p1", phase="Running", ready=True, node="n1")
    assert rig.plane().handle(late) in ([Outcome.STALE], [Outcome.DUPLICATE])
    # THEN the gang stays Recovering and its recovery deadline still evicts it
    assert rig.phase(KEY) == "Recovering"
    timer = rig.store.load(KEY).workload.timer  # type: ignore[union-attr]
    assert timer is not None and timer.kind is TimerKind.RECOVERY
    rig.clock.now = timer.deadline
    rig.plane().handle(
        DeadlineReached(KEY, timer.attempt, timer.kind, timer.episode, timer.incarnation)
    )
    assert rig.phase(KEY) == "Requeued"


# --------------------------------------------------------------------------- 3. an older pod object wins


def test_a_late_event_of_an_earlier_pod_object_does_not_overwrite_the_newer(rig: Rig):
    # GIVEN a pod replaced by a new object of the same name, not ready yet
    running(rig, "job-1")
    pod = f"{KEY}-p1"
    rig.plane().handle(PodObserved(KEY, pod, 20, uid="new", phase="Pending", node="n2"))
    assert rig.phase(KEY) == "Recovering"
    # WHEN a late event of the earlier object (lower seq, other uid) arrives
    late = PodObserved(KEY, pod, 15, uid="job-1-p1", phase="Running", ready=True, node="n1")
    # THEN it is stale: the newer object stays, and the gang is not whole
    assert rig.plane().handle(late) == [Outcome.STALE]
    assert rig.phase(KEY) == "Recovering"
    assert rig.store.load(KEY).workload.pods[pod].uid == "new"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- 4. node events have an order


def test_a_late_node_not_ready_does_not_evict_a_healthy_gang(rig: Rig):
    # GIVEN a running gang whose pods reported Ready at revisions 11 and 12
    running(rig, "job-1")
    # WHEN a NotReady of their node from revision 5 arrives late
    assert rig.plane().handle(NodeObserved("n1", ready=False, seq=5)) == [Outcome.STALE]
    # THEN the gang stays Running
    assert rig.phase(KEY) == "Running"


def test_a_node_ready_again_heals_what_its_not_ready_did(rig: Rig):
    # GIVEN a running gang whose node went NotReady after the pods' reports
    running(rig, "job-1")
    rig.plane().handle(NodeObserved("n1", ready=False, seq=20))
    assert rig.phase(KEY) == "Recovering"
    # WHEN the duplicate arrives again, and then the node's newer Ready (a relist re-sends it)
    assert rig.plane().handle(NodeObserved("n1", ready=False, seq=20)) == [Outcome.STALE]
    rig.plane().handle(NodeObserved("n1", ready=True, seq=30))
    # THEN the pods' last reports count again: the gang recovered
    assert rig.phase(KEY) == "Running"
    assert rig.bus.names(KEY)[-1] == "PodsReady"


def test_a_pod_report_older_than_the_node_condition_does_not_override_it(rig: Rig):
    running(rig, "job-1")
    rig.plane().handle(NodeObserved("n1", ready=False, seq=20))
    pod = f"{KEY}-p0"
    late = PodObserved(KEY, pod, 15, uid="job-1-p0", phase="Running", ready=True, node="n1")
    rig.plane().handle(late)
    assert rig.phase(KEY) == "Recovering"


# --------------------------------------------------------------------------- 5. deletions in an agent gap


def test_a_listing_finishes_workloads_deleted_while_no_agent_ran(rig: Rig):
    # GIVEN two running Jobs holding all 16 GPUs of the quota, and a third waiting
    rig.doc = {"timeout": "60s", "gpuQuota": 16}
    rig.plane().handle(observed(10, "a-1", gpus=8, key="ns/a"))
    rig.plane().handle(observed(11, "b-1", gpus=8, key="ns/b"))
    rig.admit()
    rig.plane().handle(observed(12, "c-1", gpus=8, key="ns/c"))
    assert rig.admit() == [] and rig.phase("ns/c") == "Pending"
    # WHEN a new agent lists Jobs at revision 50: `ns/a` was deleted during the gap
    part1 = snapshot("Job", 50, 1, 2, workloads={"ns/b": "b-1"})
    part2 = snapshot("Job", 50, 2, 2, workloads={"ns/c": "c-1"})
    # THEN nothing happens on a partial listing
    assert rig.plane().handle(part1) == [Outcome.IGNORED]
    assert rig.phase("ns/a") == "Admitted"
    # and once complete, the missing Job is finished and its GPUs are free
    rig.plane().handle(part2)
    assert rig.phase("ns/a") == "Finished" and rig.phase("ns/b") == "Admitted"
    assert rig.admit() == ["ns/c"]


def test_a_listing_forgets_pods_deleted_while_no_agent_ran_but_not_newer_ones(rig: Rig):
    # GIVEN a running gang of two
    running(rig, "job-1")
    p0, p1 = f"{KEY}-p0", f"{KEY}-p1"
    # WHEN pods are listed at revision 40 without p1, and p0 changed at 45 (after the list)
    rig.pod(KEY, p0, 45, ready=True, node="n1", uid="job-1-p0")
    rig.plane().handle(snapshot("Pod", 40, pods={KEY: {}}))
    # THEN p1 is forgotten (the gang lost readiness) and p0, newer than the list, stays
    pods = rig.store.load(KEY).workload.pods  # type: ignore[union-attr]
    assert pods[p1].deleted and not pods[p0].deleted
    assert rig.phase(KEY) == "Recovering"


def test_a_pod_replaced_in_a_gap_is_taken_even_when_the_listing_comes_first(rig: Rig):
    # GIVEN a running gang; in an agent gap its pod p1 is deleted and re-created (revision 36)
    running(rig, "job-1")
    p1 = f"{KEY}-p1"
    # WHEN the new agent's listing (revision 46, p1 under its new uid) arrives first
    rig.plane().handle(snapshot("Pod", 46, pods={KEY: {f"{KEY}-p0": "job-1-p0", p1: "new"}}))
    assert rig.phase(KEY) == "Recovering"  # the old p1 is gone
    # and then the relist's event of the new p1, older than the listing
    rig.pod(KEY, p1, 36, ready=True, node="n2", uid="new")
    # THEN the new pod is taken: the gang is whole again
    assert rig.store.load(KEY).workload.pods[p1].uid == "new"  # type: ignore[union-attr]
    assert rig.phase(KEY) == "Running"


def test_a_late_event_of_a_pod_gone_before_a_listing_is_stale(rig: Rig):
    # GIVEN an admitted gang whose pod p0 was created (revision 20) and deleted again,
    # neither event seen, and a listing at revision 30 that does not hold it
    rig.plane().handle(observed(10, "job-1"))
    rig.admit()
    rig.plane().handle(snapshot("Pod", 30, pods={KEY: {}}))
    # WHEN the creation event arrives late
    late = PodObserved(KEY, f"{KEY}-p0", 20, uid="gone", phase="Pending")
    # THEN it is stale: the pod was gone when the cluster was listed
    assert rig.plane().handle(late) == [Outcome.STALE]
    assert rig.store.load(KEY).workload.pods == {}  # type: ignore[union-attr]
    # while a pod created after the listing is taken
    rig.pod(KEY, f"{KEY}-p1", 31, ready=False, uid="fresh")
    assert f"{KEY}-p1" in rig.store.load(KEY).workload.pods  # type: ignore[union-attr]


def test_an_older_listing_changes_nothing(rig: Rig):
    running(rig, "job-1")
    rig.plane().handle(snapshot("Job", 50, workloads={KEY: "job-1"}))
    # a listing taken before the last one acted on (redelivered, or reordered)
    assert rig.plane().handle(snapshot("Job", 30, workloads={})) == [Outcome.STALE]
    assert rig.phase(KEY) == "Running"


def test_a_listing_older_than_the_workload_does_not_finish_it(rig: Rig):
    rig.plane().handle(observed(60, "job-1"))
    rig.plane().handle(snapshot("Job", 50, workloads={}))  # listed before it was created
    assert rig.phase(KEY) == "Pending"


# --------------------------------------------------------------------------- 6. spec changes while active


def test_a_spec_change_while_admitted_takes_effect_at_the_next_admission(rig: Rig):
    # GIVEN an admitted gang of 8 pods and 64 GPUs
    rig.plane().handle(observed(10, "job-1", gang=8, gpus=64))
    rig.admit()
    # WHEN it is scaled down to 2 pods and 16 GPUs while admitted
    rig.plane().handle(observed(11, "job-1", gang=2, gpus=16))
    w = rig.store.load(KEY).workload  # type: ignore[union-attr]
    assert (w.gang_size, w.gpus) == (8, 64)  # its quota does not change under it
    # THEN after its eviction it is requeued, and readmitted, with the new size
    rig.clock.now += 60
    timer = w.timer
    assert timer is not None
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1, timer.incarnation))
    w = rig.store.load(KEY).workload  # type: ignore[union-attr]
    assert (w.phase.value, w.gang_size, w.gpus, w.next_spec) == ("Requeued", 2, 16, None)


# --------------------------------------------------------------------------- 7. pod groups


def test_replacement_pods_of_an_admitted_pod_group_are_released(rig: Rig):
    # GIVEN an admitted pod group of two whose pods exist
    key = "ns/grp"
    rig.plane().handle(WorkloadObserved(key, "default", 2, kind=Kind.POD_GROUP, seq=10, uid=""))
    for i in range(2):
        rig.pod(key, f"g-{i}", 11 + i, ready=False, node=None, uid=f"g{i}")
    assert rig.admit() == [key]
    # WHEN one pod is terminating and its controller creates a replacement (gated)
    rig.pod(key, "g-1", 20, ready=False, node=None, uid="g1", deleted=True)
    rig.pod(key, "g-1b", 21, ready=False, node=None, uid="g1b")
    # THEN the control plane releases the group again: the replacement is ungated
    assert rig.cluster.calls.count(("admit", key, 1)) == 2
    assert rig.phase(key) == "Admitted"


# --------------------------------------------------------------------------- 8. leaks


def test_node_events_do_not_reach_finished_workloads(rig: Rig):
    running(rig, "job-1")
    rig.plane().handle(WorkloadFinished(KEY, Reason.SUCCEEDED, 30, uid="job-1"))
    assert rig.store.workloads_on_node("n1") == []
    assert rig.plane().handle(NodeObserved("n1", ready=False, seq=40)) == []


def test_pod_deletions_after_their_workloads_expire_as_tombstones(rig: Rig):
    # GIVEN a finished Job whose pods' deletions arrive after its own
    running(rig, "job-1")
    rig.plane().handle(WorkloadFinished(KEY, Reason.DELETED, 30, uid="job-1"))
    for i in range(2):
        rig.pod(KEY, f"{KEY}-p{i}", 31 + i, ready=False, uid=f"job-1-p{i}", deleted=True)
    # WHEN the TTLs have run (tombstones' first)
    rig.store.expire(rig.clock.now + 2 * DAY)
    assert rig.store.pods.get(KEY, {}) == {}
    rig.store.expire(rig.clock.now + 31 * DAY)
    # THEN nothing of it is left in the table
    assert rig.store.item_count() == 0
