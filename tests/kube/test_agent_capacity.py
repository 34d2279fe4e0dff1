"""The agent's capacity reports: each node's GPUs, whether pods may land, others' GPUs on it."""

from __future__ import annotations

from typing import Any

from muster.agent.mapping import node_view, placement_rules, workload_view
from muster.agent.watch import Change, Sync
from muster.core.model import Kind, NodeObserved, WorkloadObserved
from muster.kube.conventions import JOB_RESOURCE, NODE_RESOURCE, POD_RESOURCE
from muster.schema import parse_agent_event

from .test_agent import (  # noqa: F401
    Clock,
    aws,
    clock,
    controller,
    job,
    landed,
    make_agent,
    sleeps,
)


def gpu_node(name: str = "node-a", rv: str = "1", gpus: str = "8", **spec: Any) -> dict[str, Any]:
    labels = spec.pop("labels", {})
    ready = spec.pop("ready", True)
    return {
        "metadata": {"name": name, "resourceVersion": rv, "labels": labels},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus, "cpu": "96"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def other_pod(
    name: str, rv: str, node: str | None = "node-a", gpus: int = 2, phase: str = "Running"
) -> dict[str, Any]:
    """A pod of a Deployment Muster does not manage."""
    return {
        "metadata": {
            "name": name,
            "namespace": "web",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"app": "inference"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def node_events(aws: dict[str, Any]) -> list[NodeObserved]:  # noqa: F811
    return [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, NodeObserved)]


def test_why_new_pods_may_not_land_on_a_node() -> None:
    assert node_view(gpu_node()).unschedulable is None
    assert node_view(gpu_node()).gpus == 8
    assert node_view(gpu_node(unschedulable=True)).unschedulable == "cordoned"
    assert node_view(gpu_node(ready=False)).unschedulable == "NotReady"
    health = {"sagemaker.amazonaws.com/node-health-status": "UnschedulablePendingReboot"}
    assert node_view(gpu_node(labels=health)).unschedulable == "health UnschedulablePendingReboot"
    fine = {"sagemaker.amazonaws.com/node-health-status": "Schedulable"}
    assert node_view(gpu_node(labels=fine)).unschedulable is None
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert node_view(gpu_node(taints=gpu_taint)).unschedulable is None
    other = [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    assert node_view(gpu_node(taints=other)).unschedulable == "taint dedicated=inference:NoSchedule"
    prefer = [{"key": "dedicated", "effect": "PreferNoSchedule"}]
    assert node_view(gpu_node(taints=prefer)).unschedulable is None


def test_a_workload_reports_its_pod_sizes_and_the_rules_the_check_cannot_evaluate() -> None:
    view = workload_view(Kind.JOB, job(parallelism=4))
    assert view is not None and view.shape == ((4, 8),) and view.placement == ""
    pinned = job()
    pinned["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    pinned["spec"]["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu"}]
    view = workload_view(Kind.JOB, pinned)
    assert view is not None and view.placement == "nodeSelector"
    assert placement_rules([{"spec": {"tolerations": [{"key": "spot"}]}}]) == "tolerations"


def test_node_capacity_and_others_gpus_reach_the_control_plane_summed_per_node(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN an agent that sees a GPU node
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(NODE_RESOURCE, [gpu_node(rv="10")], "10"))
    agent.flush(everything=True)
    first = node_events(aws)
    assert [(n.node, n.gpus, n.schedulable, n.foreign_gpus, n.seq) for n in first] == [
        ("node-a", 8, True, 0, 10)
    ]
    # WHEN 3 pods of another team's Deployment land on it within the coalescing window,
    # one more is pending (unbound) and one finished
    for i, rv in enumerate(("11", "12", "13")):
        agent.handle(Change(POD_RESOURCE, "ADDED", other_pod(f"web-{i}", rv)))
    agent.handle(Change(POD_RESOURCE, "ADDED", other_pod("web-p", "14", node=None)))
    agent.handle(Change(POD_RESOURCE, "ADDED", other_pod("web-d", "15", phase="Succeeded")))
    agent.flush(everything=True)
    # THEN one node event says 6 GPUs are held by others, at the newest revision it sums
    [summed] = node_events(aws)
    assert (summed.foreign_gpus, summed.seq, summed.gpus) == (6, 13, 8)
    # WHEN one of them is deleted and the node is cordoned
    agent.handle(Change(POD_RESOURCE, "DELETED", other_pod("web-0", "16")))
    agent.handle(Change(NODE_RESOURCE, "MODIFIED", gpu_node(rv="17", unschedulable=True)))
    agent.flush(everything=True)
    [latest] = node_events(aws)
    assert (latest.foreign_gpus, latest.schedulable, latest.unschedulable, latest.seq) == (
        4,
        False,
        "cordoned",
        17,
    )
    # AND a relist that no longer holds the others' pods gives them back
    agent.handle(Sync(POD_RESOURCE, [], "20"))
    agent.flush(everything=True)
    [freed] = node_events(aws)
    assert (freed.foreign_gpus, freed.seq) == (0, 20)


def test_pods_of_a_musters_workload_are_not_counted_as_others(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    # GIVEN a node, and a pod (with GPUs) of a Job that arrives before its Job
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(NODE_RESOURCE, "ADDED", gpu_node(rv="1")))
    pod = other_pod("train-0", "3")
    pod["metadata"]["namespace"] = "ml"
    pod["metadata"]["labels"] = {"batch.kubernetes.io/job-name": "train"}
    pod["metadata"]["ownerReferences"] = [controller("Job", "train")]
    agent.handle(Change(POD_RESOURCE, "ADDED", pod))
    assert agent.foreign_on == {"node-a": 2}
    # WHEN its labelled Job shows up
    agent.handle(Change(JOB_RESOURCE, "ADDED", job(rv="4")))
    agent.flush(everything=True)
    # THEN the pod is Muster's: the node's others' GPUs go back to 0
    assert agent.foreign_on == {}
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    nodes = [e for e in events if isinstance(e, NodeObserved)]
    assert nodes[-1].foreign_gpus == 0 and nodes[-1].seq >= 3
    assert any(isinstance(e, WorkloadObserved) and e.shape == ((2, 8),) for e in events)


def test_a_clusters_own_tolerated_taints_keep_its_nodes_open() -> None:
    dedicated = [{"key": "sagemaker.amazonaws.com/team", "value": "ml", "effect": "NoSchedule"}]
    tolerated = frozenset({"nvidia.com/gpu", "sagemaker.amazonaws.com/team"})
    assert node_view(gpu_node(taints=dedicated)).unschedulable is not None
    assert node_view(gpu_node(taints=dedicated), tolerated).unschedulable is None
    template = {"spec": {"tolerations": [{"key": "sagemaker.amazonaws.com/team"}]}}
    assert placement_rules([template]) == "tolerations"
    assert placement_rules([template], tolerated) == ""


def test_a_deleted_node_is_reported_as_deleted_by_its_watch_and_by_a_relist(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    from muster.schema import NODE_DELETED

    # GIVEN an agent that sees two GPU nodes
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(NODE_RESOURCE, [gpu_node("node-a", "10"), gpu_node("node-b", "10")], "10"))
    agent.flush(everything=True)
    node_events(aws)
    # WHEN the watch says node-a was deleted
    agent.handle(Change(NODE_RESOURCE, "DELETED", gpu_node("node-a", "12")))
    agent.flush(everything=True)
    # THEN it is reported with no GPUs, as deleted, at the deletion's revision
    [gone] = node_events(aws)
    assert (gone.node, gone.gpus, gone.schedulable, gone.unschedulable, gone.seq) == (
        "node-a",
        0,
        False,
        NODE_DELETED,
        12,
    )
    # AND a relist that no longer holds node-b reports it deleted too
    agent.handle(Sync(NODE_RESOURCE, [], "20"))
    agent.flush(everything=True)
    [relisted] = node_events(aws)
    assert (relisted.node, relisted.unschedulable, relisted.seq) == ("node-b", NODE_DELETED, 20)


def train_pod(name: str, rv: str, phase: str = "Running", gpus: int = 8) -> dict[str, Any]:
    """A pod of the Job `ml/train` (Muster's), bound to node-a."""
    pod = other_pod(name, rv, gpus=gpus, phase=phase)
    pod["metadata"]["namespace"] = "ml"
    pod["metadata"]["labels"] = {"batch.kubernetes.io/job-name": "train"}
    pod["metadata"]["ownerReferences"] = [controller("Job", "train")]
    return pod


def test_pods_outliving_their_jobs_deletion_count_as_others_until_they_end(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    from muster.core.model import PodObserved

    # GIVEN a node running a pod of Muster's Job (not counted as others')
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(NODE_RESOURCE, "ADDED", gpu_node(rv="1")))
    agent.handle(Change(JOB_RESOURCE, "ADDED", job(rv="2")))
    agent.handle(Change(POD_RESOURCE, "ADDED", train_pod("train-0", "3")))
    agent.flush(everything=True)
    assert agent.foreign_on == {}
    landed(aws)
    # WHEN the Job is deleted with `--cascade=orphan`: its pod keeps running
    agent.handle(Change(JOB_RESOURCE, "DELETED", job(rv="5")))
    agent.flush(everything=True)
    # THEN the node's report counts the pod's GPUs as held by others
    assert agent.foreign_on == {"node-a": 8}
    assert [(n.foreign_gpus, n.seq) for n in node_events(aws)] == [(8, 5)]
    # WHEN the pod ends: the control plane hears it (its quota is held until then)
    agent.handle(Change(POD_RESOURCE, "MODIFIED", train_pod("train-0", "6", phase="Succeeded")))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    pods = [e for e in events if isinstance(e, PodObserved)]
    assert [(p.pod, p.phase, p.deleted) for p in pods] == [("train-0", "Succeeded", False)]
    # AND the node's GPUs are free again
    assert agent.foreign_on == {}
    nodes = [e for e in events if isinstance(e, NodeObserved)]
    assert nodes[-1].foreign_gpus == 0


def test_pods_still_running_when_their_job_finished_count_as_others(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(NODE_RESOURCE, "ADDED", gpu_node(rv="1")))
    agent.handle(Change(JOB_RESOURCE, "ADDED", job(rv="2")))
    agent.handle(Change(POD_RESOURCE, "ADDED", train_pod("train-0", "3")))
    assert agent.foreign_on == {}
    # WHEN the Job is marked Failed while its pod is still terminating
    failed = job(rv="4", status={"conditions": [{"type": "Failed", "status": "True"}]})
    agent.handle(Change(JOB_RESOURCE, "MODIFIED", failed))
    # THEN its GPUs are others' until the pod is gone
    assert agent.foreign_on == {"node-a": 8}
    agent.handle(Change(POD_RESOURCE, "DELETED", train_pod("train-0", "5")))
    assert agent.foreign_on == {}
