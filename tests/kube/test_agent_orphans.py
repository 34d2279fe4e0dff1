"""Pods orphaned by `kubectl delete --cascade=orphan` that the agent first sees without
their controller reference (it restarted, or relisted after a gap): still the deleted
Job's, by the labels the Job controller put on them, so their GPUs stay charged."""

from __future__ import annotations

from typing import Any

from muster.agent.watch import Change, Sync
from muster.core import Fleet, Settings
from muster.core.admission import holds_quota
from muster.core.model import Kind, Phase, PodObserved
from muster.core.predecessors import charged_predecessors
from muster.core.reconcile import SnapshotPart, complete, gone
from muster.kube.conventions import JOB_RESOURCE, NODE_RESOURCE, POD_RESOURCE
from muster.schema import parse_agent_event

from .test_agent import (  # noqa: F401 (fixtures)
    Clock,
    aws,
    clock,
    controller,
    job,
    job_pod,
    landed,
    make_agent,
    sleeps,
)
from .test_agent_capacity import gpu_node


def x_pod(rv: str, *, owned: bool = True, phase: str = "Running", uid: str = "uid-x") -> Any:
    """Pod x-0 of Job ml/x (uid `uid`) with the labels the Job controller writes, 8 GPUs."""
    pod = job_pod("x-0", rv, job_name="x", ready=phase == "Running", phase=phase)
    pod["metadata"]["labels"] |= {
        "job-name": "x",
        "batch.kubernetes.io/controller-uid": uid,
        "controller-uid": uid,
    }
    pod["metadata"]["ownerReferences"] = [controller("Job", "x", uid)] if owned else []
    pod["spec"]["containers"] = [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]
    return pod


def x_job(rv: str, uid: str = "uid-x") -> dict[str, Any]:
    obj = job("x", rv=rv, parallelism=1)
    obj["metadata"]["uid"] = uid
    return obj


def feed(aws: dict[str, Any], fleet: Fleet, now: float) -> list[Any]:  # noqa: F811
    """What the agent sent, applied to the core as the control plane does (snapshots too)."""
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    for e in events:
        snapshot = complete([e]) if isinstance(e, SnapshotPart) else None
        if snapshot is None:
            fleet.apply(e, now)
            continue
        for w in list(fleet):
            for told in gone(w, snapshot):
                fleet.apply(told, now)
    fleet.admission_pass(now)
    return events


def running_x(aws: dict[str, Any], clock: Clock, sleeps: list[float]) -> Fleet:  # noqa: F811
    """The core with Job ml/x admitted and Running, as an earlier agent reported it."""
    fleet = Fleet(Settings())
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(JOB_RESOURCE, "ADDED", x_job("10")))
    agent.handle(Change(POD_RESOURCE, "ADDED", x_pod("20")))
    agent.flush(everything=True)
    feed(aws, fleet, clock())
    assert fleet.get("ml/x").phase is Phase.RUNNING  # type: ignore[union-attr]
    return fleet


def test_an_orphaned_pod_present_at_agent_start_is_the_deleted_jobs(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a Running Job deleted with `--cascade=orphan` while the agent was down
    fleet = running_x(aws, clock, sleeps)
    # WHEN a new agent lists the cluster: no Job x, its pod running without an owner
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(NODE_RESOURCE, [gpu_node(rv="1")], "30"))
    agent.handle(Sync(JOB_RESOURCE, [], "30"))
    agent.handle(Sync(POD_RESOURCE, [x_pod("25", owned=False)], "30"))
    agent.flush(everything=True)
    events = feed(aws, fleet, clock())
    # THEN the pod is reported as the deleted Job's, never Ready, and listed as its
    [pod] = [e for e in events if isinstance(e, PodObserved)]
    assert (pod.workload, pod.pod, pod.owner, pod.deleted, pod.ready) == (
        "ml/x",
        "x-0",
        "uid-x",
        False,
        False,
    )
    [listing] = [e for e in events if isinstance(e, SnapshotPart) and e.scope == "Pod"]
    assert listing.pods == {"ml/x": {"x-0": "uid-x-0"}}
    # AND the deleted workload keeps holding its quota while the pod runs
    x = fleet.get("ml/x")
    assert x is not None and x.phase is Phase.FINISHED and holds_quota(x)
    # AND its GPUs are others' on the node (the control plane places nothing there)
    assert agent.foreign_on == {"node-a": 8}
    # WHEN the pod ends
    agent.handle(Change(POD_RESOURCE, "MODIFIED", x_pod("40", owned=False, phase="Succeeded")))
    agent.flush(everything=True)
    events = feed(aws, fleet, clock())
    # THEN its end is reported as the Job's pod, and the quota is free
    [end] = [e for e in events if isinstance(e, PodObserved)]
    assert (end.pod, end.phase, end.owner) == ("x-0", "Succeeded", "uid-x")
    assert not holds_quota(fleet.get("ml/x"))  # type: ignore[arg-type]
    assert agent.foreign_on == {}


def test_an_orphaned_pod_of_a_recreated_job_is_its_predecessors(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a Running Job deleted with `--cascade=orphan` and created again under its
    # name while the agent was down
    fleet = running_x(aws, clock, sleeps)
    # WHEN a new agent lists the new Job and the old one's pod, running without an owner
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(JOB_RESOURCE, [x_job("28", uid="uid-x2")], "30"))
    agent.handle(Sync(POD_RESOURCE, [x_pod("25", owned=False)], "30"))
    agent.flush(everything=True)
    events = feed(aws, fleet, clock())
    # THEN the pod is reported with the old Job's uid
    [pod] = [e for e in events if isinstance(e, PodObserved)]
    assert (pod.workload, pod.owner, pod.ready) == ("ml/x", "uid-x", False)
    # AND it charges the old Job's holding, never counting for the new Job
    x = fleet.get("ml/x")
    assert x is not None and x.uid == "uid-x2" and x.pods == {}
    assert charged_predecessors(x) == [("gpu", 8)]
    # WHEN it ends, the holding does
    agent.handle(Change(POD_RESOURCE, "MODIFIED", x_pod("40", owned=False, phase="Failed")))
    agent.flush(everything=True)
    feed(aws, fleet, clock())
    assert charged_predecessors(fleet.get("ml/x")) == []  # type: ignore[arg-type]


def test_labels_on_a_pod_naming_a_live_job_ended_or_without_gpus_count_nowhere(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a live Job x and a node
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(NODE_RESOURCE, [gpu_node(rv="1")], "30"))
    agent.handle(Sync(JOB_RESOURCE, [x_job("10")], "30"))
    landed(aws)
    # WHEN bare pods carry its labels and its uid (a forgery, or a pod being orphaned
    # while the Job still exists), and an ended bare pod names a deleted Job
    forged = x_pod("25", owned=False)
    ended = x_pod("26", owned=False, phase="Succeeded", uid="uid-gone")
    ended["metadata"] |= {"name": "y-0", "uid": "uid-y-0"}
    ended["metadata"]["labels"] |= {"batch.kubernetes.io/job-name": "y", "job-name": "y"}
    # AND a CPU pod orphaned from a Job gone (maybe another team's): it holds no GPUs
    cpu = x_pod("27", owned=False, uid="uid-gone")
    cpu["metadata"] |= {"name": "y-1", "uid": "uid-y-1"}
    cpu["metadata"]["labels"] |= {"batch.kubernetes.io/job-name": "y", "job-name": "y"}
    cpu["spec"]["containers"] = [{"resources": {"requests": {"cpu": "2"}}}]
    agent.handle(Sync(POD_RESOURCE, [forged, ended, cpu], "40"))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN neither is reported as any workload's, nor listed as one's
    assert [e for e in events if isinstance(e, PodObserved)] == []
    [listing] = [e for e in events if isinstance(e, SnapshotPart) and e.scope == "Pod"]
    assert listing.pods == {}
    # AND the forged pod's GPUs are others', not free capacity
    assert agent.foreign_on == {"node-a": 8}


def test_only_a_jobs_own_labels_on_an_ownerless_pod_name_the_job_it_left() -> None:
    from muster.agent.mapping import orphaned_from

    assert orphaned_from(x_pod("5", owned=False)) == (Kind.JOB, "ml/x", "uid-x")
    # a pod with a controller is its controller's (`pod_workload`)
    assert orphaned_from(x_pod("5")) is None
    # no uid label, or labels that disagree: nothing to tell which object it left
    bare = x_pod("5", owned=False)
    for label in ("batch.kubernetes.io/controller-uid", "controller-uid"):
        del bare["metadata"]["labels"][label]
    assert orphaned_from(bare) is None
    legacy = x_pod("5", owned=False)
    del legacy["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
    assert orphaned_from(legacy) == (Kind.JOB, "ml/x", "uid-x")
    mixed = x_pod("5", owned=False)
    mixed["metadata"]["labels"]["controller-uid"] = "uid-other"
    assert orphaned_from(mixed) is None
    renamed = x_pod("5", owned=False)
    renamed["metadata"]["labels"]["job-name"] = "z"
    assert orphaned_from(renamed) is None
    # a JobSet's or a PyTorchJob's pod is not a Job's
    js = x_pod("5", owned=False)
    js["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] = "big"
    assert orphaned_from(js) is None
    pt = x_pod("5", owned=False)
    pt["metadata"]["labels"]["training.kubeflow.org/job-name"] = "x"
    assert orphaned_from(pt) is None


def test_a_bare_pod_reported_before_the_job_it_names_never_counts_ready(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a bare Ready pod labelled with Job x's name and uid, heard of before the Job
    # (the watches' order), so reported as a gone object's
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(POD_RESOURCE, "ADDED", x_pod("25", owned=False)))
    # WHEN the Job is heard of, and the pod changes
    agent.handle(Change(JOB_RESOURCE, "ADDED", x_job("20")))
    agent.handle(Change(POD_RESOURCE, "MODIFIED", x_pod("30", owned=False)))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN the pod is never reported Ready
    reports = [(e.seq, e.ready) for e in events if isinstance(e, PodObserved)]
    assert reports and all(not ready for _, ready in reports), reports


def test_a_pod_known_by_its_controller_stays_ready_while_its_orphaning_is_under_way(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a live Job's Ready pod, known by its controller reference
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(JOB_RESOURCE, "ADDED", x_job("10")))
    agent.handle(Change(POD_RESOURCE, "ADDED", x_pod("20")))
    agent.flush(everything=True)
    landed(aws)
    # WHEN the garbage collector removes the reference before the Job goes
    agent.handle(Change(POD_RESOURCE, "MODIFIED", x_pod("25", owned=False)))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN it is still the Job's Ready pod (its gang does not look broken meanwhile)
    assert [e for e in events if isinstance(e, PodObserved) and not e.ready] == []
    kind, workload, view = agent.pods["ml/x-0"]
    assert (kind, workload, view.owner, view.ready) == (Kind.JOB, "ml/x", "uid-x", True)
