"""The agent says whose a pod is: its owner's uid on every pod event, and a pod group
reported active only while it has pods that run or wait."""

from __future__ import annotations

from typing import Any

from muster.agent.mapping import compact_pod, pod_group_view, pod_owner, pod_view
from muster.agent.watch import Change
from muster.core.model import Kind, PodObserved, WorkloadFinished, WorkloadObserved
from muster.kube.conventions import JOB_RESOURCE, POD_RESOURCE
from muster.schema import parse_agent_event

from .test_agent import (  # noqa: F401 (fixtures)
    Clock,
    aws,
    clock,
    group_pod,
    job,
    job_pod,
    landed,
    make_agent,
    sleeps,
)


def owned(pod: dict[str, Any], kind: str, uid: str, *, controller: bool = True) -> dict[str, Any]:
    refs = [{"apiVersion": "x", "kind": kind, "name": "n", "uid": uid, "controller": controller}]
    pod["metadata"]["ownerReferences"] = refs
    return pod


def test_a_pods_owner_is_the_workload_object_that_controls_it() -> None:
    job_owned = owned(job_pod("train-0", "5"), "Job", "job-uid")
    assert pod_owner(Kind.JOB, job_owned) == "job-uid"
    # a Job's pod without the reference still carries its Job's uid in a label
    labelled = job_pod("train-1", "5")
    labelled["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "job-uid"
    assert pod_owner(Kind.JOB, labelled) == "job-uid"
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
