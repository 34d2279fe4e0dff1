"""The agent says whose a pod is: its controller's uid on every pod event, nobody's
for a pod whose labels name a workload its controller does not own, and a pod group
reported active only while it has pods that run or wait."""

from __future__ import annotations

from typing import Any

from muster.agent.mapping import (
    compact_pod,
    pod_group_view,
    pod_owner,
    pod_view,
    pod_workload,
)
from muster.agent.watch import Change, Sync
from muster.core import Fleet, Settings
from muster.core.admission import holds_quota
from muster.core.model import Kind, Phase, PodObserved, WorkloadFinished, WorkloadObserved
from muster.core.reconcile import SnapshotPart
from muster.kube.conventions import JOB_RESOURCE, NODE_RESOURCE, POD_RESOURCE
from muster.schema import parse_agent_event

from .test_agent import (  # noqa: F401 (fixtures)
    Clock,
    aws,
    clock,
    controller,
    group_pod,
    job,
    job_pod,
    landed,
    make_agent,
    sleeps,
)
from .test_agent_capacity import gpu_node


def owned(pod: dict[str, Any], kind: str, uid: str, *, controller: bool = True) -> dict[str, Any]:
    refs = [{"apiVersion": "x", "kind": kind, "name": "n", "uid": uid, "controller": controller}]
    pod["metadata"]["ownerReferences"] = refs
    return pod


def test_a_pods_owner_is_the_workload_object_that_controls_it() -> None:
    job_owned = owned(job_pod("train-0", "5"), "Job", "job-uid")
    assert pod_owner(Kind.JOB, job_owned) == "job-uid"
    assert pod_workload(job_owned) == (Kind.JOB, "ml/train")
    assert pod_owner(Kind.PYTORCHJOB, owned(job_pod("p-0", "5"), "PyTorchJob", "pt-uid")) == (
        "pt-uid"
    )
    # a JobSet's pod is its child Job's: the JobSet's uid is in the JobSet label, not the reference
    child = owned(job_pod("js-0", "5"), "Job", "child-job-uid")
    assert pod_owner(Kind.JOBSET, child) == ""
    child["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-uid"] = "jobset-uid"
    assert pod_owner(Kind.JOBSET, child) == "jobset-uid"
    # a controller of another kind, a reference that does not control, a pod group: unknown
    assert pod_owner(Kind.PYTORCHJOB, owned(job_pod("p-1", "5"), "Job", "j")) == ""
    assert pod_owner(Kind.JOB, owned(job_pod("t-2", "5"), "Job", "j", controller=False)) == ""
    assert pod_owner(Kind.POD_GROUP, owned(group_pod("g-0", "5"), "ReplicaSet", "r")) == ""
    # and the agent's compact copy keeps what this reads
    small = compact_pod(job_owned)
    assert pod_view("ml/train", small, Kind.JOB) == pod_view("ml/train", job_owned, Kind.JOB)
    assert pod_view("ml/train", small, Kind.JOB).owner == "job-uid"
    assert pod_workload(small) == (Kind.JOB, "ml/train")


def test_labels_alone_make_a_pod_nobodys() -> None:
    # a bare pod with a Job's labels, even its uid label, has no controller: nobody's
    bare = job_pod("train-1", "5")
    del bare["metadata"]["ownerReferences"]
    bare["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "job-uid"
    assert pod_workload(bare) is None
    assert pod_owner(Kind.JOB, bare) == ""
    # a controller of the wrong kind, or one that does not control
    assert pod_workload(owned(job_pod("t-3", "5"), "ReplicaSet", "rs")) is None
    assert pod_workload(owned(job_pod("t-4", "5"), "Job", "j", controller=False)) is None
    pt = owned(job_pod("p-2", "5"), "Job", "j")
    pt["metadata"]["labels"] = {"training.kubeflow.org/job-name": "train"}
    assert pod_workload(pt) is None
    assert pod_workload(owned(pt, "PyTorchJob", "pt-uid")) == (
        Kind.PYTORCHJOB,
        "ml/train@pytorchjob",
    )
    # a JobSet's pod counts only under a child Job named after the JobSet
    js = job_pod("big-w-0-0", "5")
    js["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "big"}
    js["metadata"]["ownerReferences"] = [controller("Job", "big-workers-0")]
    assert pod_workload(js) == (Kind.JOBSET, "ml/big@jobset")
    js["metadata"]["ownerReferences"] = [controller("Job", "mine-0")]
    assert pod_workload(js) is None
    # a pod group's members are its members by their labels
    assert pod_workload(group_pod("grp-0", "5")) == (Kind.POD_GROUP, "ml/grp@podgroup")


def eight_gpu_job(uid: str) -> dict[str, Any]:
    x = job("x", rv="10", parallelism=8)
    x["metadata"]["uid"] = uid
    return x


def run_core(events: list[Any], fleet: Fleet, now: float) -> None:
    for e in events:
        if not isinstance(e, SnapshotPart):
            fleet.apply(e, now)


def test_bare_pods_labelled_with_a_jobs_name_do_not_make_its_gang_ready(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN an admitted Job of 8 pods, 3 of them Ready
    agent = make_agent(aws["events"], clock, sleeps)
    fleet = Fleet(Settings())
    agent.handle(Change(JOB_RESOURCE, "ADDED", eight_gpu_job("uid-x")))
    for i in range(3):
        real = job_pod(f"x-{i}", str(20 + i), job_name="x", ready=True)
        agent.handle(Change(POD_RESOURCE, "ADDED", real))
    # WHEN five bare CPU pods labelled job-name: x turn Ready beside them, on a node of its
    # own, and five more that another Job of the tenant controls
    agent.handle(Change(NODE_RESOURCE, "ADDED", gpu_node("node-b", rv="30")))
    for i in range(5):
        bare = job_pod(f"fake-{i}", str(40 + i), job_name="x", ready=True)
        del bare["metadata"]["ownerReferences"]
        bare["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "uid-x"
        bare["spec"] = {
            "nodeName": "node-b",
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        }
        agent.handle(Change(POD_RESOURCE, "ADDED", bare))
        other = owned(job_pod(f"other-{i}", str(50 + i), job_name="x", ready=True), "Job", "uid-y")
        agent.handle(Change(POD_RESOURCE, "ADDED", other))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    run_core(events, fleet, clock())
    # THEN the gang is still 3 of 8: admitted and waiting for its pods, not Running
    w = fleet.get("ml/x")
    assert w is not None
    assert (w.phase, w.ready_pods, w.gang_size) == (Phase.ADMITTED, 3, 8)
    # AND no bare pod was reported as the Job's; the other Job's pods were, as its own
    pods = {e.pod: e.owner for e in events if isinstance(e, PodObserved)}
    assert sorted(p for p in pods if p.startswith("fake")) == []
    assert {pods[f"other-{i}"] for i in range(5)} == {"uid-y"}
    # AND the bare pods' GPUs are others' GPUs on their node, not free capacity
    assert agent.foreign_on == {"node-b": 5}


def test_pods_orphaned_by_their_jobs_deletion_stay_charged_until_they_end(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN an admitted Job of one 8-GPU pod, Running
    agent = make_agent(aws["events"], clock, sleeps)
    fleet = Fleet(Settings())
    x = job("x", rv="10", parallelism=1)
    x["metadata"]["uid"] = "uid-x"
    agent.handle(Change(JOB_RESOURCE, "ADDED", x))
    agent.handle(Change(POD_RESOURCE, "ADDED", job_pod("x-0", "20", job_name="x", ready=True)))
    agent.flush(everything=True)
    run_core([e for _, e in map(parse_agent_event, landed(aws))], fleet, clock())
    fleet.admission_pass(clock())
    assert fleet.get("ml/x").phase is Phase.RUNNING  # type: ignore[union-attr]
    # WHEN it is deleted with `kubectl delete job --cascade=orphan`: the garbage
    # collector removes the pod's controller reference, then the Job goes
    orphan = job_pod("x-0", "25", job_name="x", ready=True)
    del orphan["metadata"]["ownerReferences"]
    agent.handle(Change(POD_RESOURCE, "MODIFIED", orphan))
    agent.handle(Change(JOB_RESOURCE, "DELETED", job("x", rv="26", parallelism=1)))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    run_core(events, fleet, clock())
    # THEN the pod is not reported gone: the deleted workload keeps holding its quota
    assert not [e for e in events if isinstance(e, PodObserved) and e.deleted]
    gone = fleet.get("ml/x")
    assert gone is not None and gone.phase is Phase.FINISHED and holds_quota(gone)
    # WHEN the orphaned pod ends
    done = job_pod("x-0", "30", job_name="x", phase="Succeeded")
    del done["metadata"]["ownerReferences"]
    agent.handle(Change(POD_RESOURCE, "MODIFIED", done))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    run_core(events, fleet, clock())
    # THEN its end is reported as the Job's pod, and the quota is free
    [end] = [e for e in events if isinstance(e, PodObserved)]
    assert (end.pod, end.phase, end.owner) == ("x-0", "Succeeded", "uid-x")
    assert not holds_quota(fleet.get("ml/x"))  # type: ignore[arg-type]


def test_a_relist_keeps_an_orphaned_pod_its_workloads(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a Job's pod that lost its controller reference while it runs
    agent = make_agent(aws["events"], clock, sleeps)
    x = job("x", rv="10", parallelism=1)
    x["metadata"]["uid"] = "uid-x"
    agent.handle(Change(JOB_RESOURCE, "ADDED", x))
    agent.handle(Change(POD_RESOURCE, "ADDED", job_pod("x-0", "20", job_name="x", ready=True)))
    orphan = job_pod("x-0", "25", job_name="x", ready=True)
    del orphan["metadata"]["ownerReferences"]
    agent.handle(Change(POD_RESOURCE, "MODIFIED", orphan))
    # AND a pod labelled as the Job's that it never owned
    forged = job_pod("fake-0", "27", job_name="x", ready=True)
    del forged["metadata"]["ownerReferences"]
    agent.handle(Change(POD_RESOURCE, "ADDED", forged))
    agent.flush(everything=True)
    landed(aws)
    # WHEN the agent lists the pods again
    agent.handle(Sync(POD_RESOURCE, [orphan, forged], "40"))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN the pod snapshot lists the orphaned pod as the Job's, and the forged one not
    [listing] = [e for e in events if isinstance(e, SnapshotPart) and e.scope == "Pod"]
    assert listing.pods == {"ml/x": {"x-0": "uid-x-0"}}
    assert not [e for e in events if isinstance(e, PodObserved) and e.deleted]


def test_pod_events_carry_their_owners_uid(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    train = job(rv="10")
    train["metadata"]["uid"] = "job-2"
    agent.handle(Change(JOB_RESOURCE, "ADDED", train))
    # the new Job's pod, and a terminating pod of the deleted Job of that name
    agent.handle(Change(POD_RESOURCE, "ADDED", owned(job_pod("train-new", "11"), "Job", "job-2")))
    old = owned(job_pod("train-old", "12", ready=True), "Job", "job-1")
    agent.handle(Change(POD_RESOURCE, "MODIFIED", old))
    agent.flush(everything=True)
    pods = [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, PodObserved)]
    assert sorted((e.pod, e.owner) for e in pods) == [
        ("train-new", "job-2"),
        ("train-old", "job-1"),
    ]


def test_a_pod_group_of_finished_pods_that_did_not_succeed_is_not_reported_active(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a pod group whose pods all succeeded (reported finished)
    agent = make_agent(aws["events"], clock, sleeps)
    for name, rv in (("grp-0", "7"), ("grp-1", "8")):
        agent.handle(Change(POD_RESOURCE, "ADDED", group_pod(name, rv)))
    done = {}
    for name, rv in (("grp-0", "20"), ("grp-1", "21")):
        done[name] = group_pod(name, rv)
        done[name]["status"]["phase"] = "Succeeded"
        agent.handle(Change(POD_RESOURCE, "MODIFIED", done[name]))
    agent.flush(everything=True)
    landed(aws)
    # WHEN its pods are deleted one by one (one succeeded pod left, short of the gang)
    agent.handle(
        Change(
            POD_RESOURCE,
            "DELETED",
            {**done["grp-0"], "metadata": {**done["grp-0"]["metadata"], "resourceVersion": "30"}},
        )
    )
    agent.flush(everything=True)
    # THEN the group is not reported again (an active report would be a new run)
    groups = [
        e
        for _, e in map(parse_agent_event, landed(aws))
        if isinstance(e, WorkloadObserved | WorkloadFinished)
    ]
    assert groups == []
    assert pod_group_view("ml/grp@podgroup", [done["grp-1"]]) is None
    # WHEN a new run's gated pods appear THEN the group is reported active
    agent.handle(
        Change(
            POD_RESOURCE,
            "DELETED",
            {**done["grp-1"], "metadata": {**done["grp-1"]["metadata"], "resourceVersion": "31"}},
        )
    )
    agent.handle(Change(POD_RESOURCE, "ADDED", group_pod("grp-b0", "40")))
    agent.flush(everything=True)
    groups = [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, WorkloadObserved)]
    assert [(e.workload, e.seq) for e in groups] == [("ml/grp@podgroup", 40)]
