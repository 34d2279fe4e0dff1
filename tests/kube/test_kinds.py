"""A Job and a PyTorchJob (or a pod group) of one name in one namespace are two workloads.

The agent keeps one view per (kind, namespace, name), sends each under its own key
(a Job's `ns/name`, the others' `ns/name@kind`), and a listing of one kind never
reports the other deleted, however often it relists.
"""

from __future__ import annotations

from typing import Any

from muster.agent.watch import Change, Sync
from muster.core import Fleet, Settings
from muster.core.model import Kind, Phase, PodObserved, WorkloadFinished, WorkloadObserved
from muster.core.reconcile import SnapshotPart, complete, gone
from muster.kube.conventions import JOB_RESOURCE, POD_RESOURCE, PYTORCHJOB_RESOURCE
from muster.schema import parse_agent_event

from .test_agent import (
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

__all__ = ["aws", "clock", "sleeps"]  # the fixtures, shared with test_agent


def pytorchjob(name: str = "train", rv: str = "200", uid: str = "uid-pt") -> dict[str, Any]:
    replica = {
        "replicas": 1,
        "template": {
            "spec": {
                "containers": [{"name": "p", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
            }
        },
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-30T09:05:00Z",
            "labels": {"muster.io/queue": "gpu"},
        },
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": replica}},
    }


def pt_pod(name: str, rv: str, job_name: str = "train") -> dict[str, Any]:
    pod = job_pod(name, rv)
    pod["metadata"]["labels"] = {"training.kubeflow.org/job-name": job_name}
    pod["metadata"]["ownerReferences"] = [controller("PyTorchJob", job_name, "uid-pt")]
    return pod


def relist(agent: Any) -> None:
    agent.handle(Sync(JOB_RESOURCE, [job()], "300"))
    agent.handle(Sync(PYTORCHJOB_RESOURCE, [pytorchjob()], "300"))
    agent.handle(Sync(POD_RESOURCE, [job_pod("train-0", "101"), pt_pod("train-m-0", "201")], "300"))
    agent.flush(everything=True)


def test_a_job_and_a_pytorchjob_of_one_name_are_two_workloads_through_relists(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN a Job and a PyTorchJob both named ml/train, each with a pod
    agent = make_agent(aws["events"], clock, sleeps)
    fleet = Fleet(Settings())
    # WHEN the agent lists them three times (its resyncs)
    received: list[Any] = []
    for _ in range(3):
        relist(agent)
        received += [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN each kind went out under its own key, every time, and nothing was deleted
    observed = {(e.workload, e.kind) for e in received if isinstance(e, WorkloadObserved)}
    assert observed == {("ml/train", Kind.JOB), ("ml/train@pytorchjob", Kind.PYTORCHJOB)}
    assert [e for e in received if isinstance(e, WorkloadFinished)] == []
    assert {k: v.kind for k, v in agent.workloads.items()} == {
        "ml/train": Kind.JOB,
        "ml/train@pytorchjob": Kind.PYTORCHJOB,
    }
    # AND each pod counts for its own workload
    pods = {(e.pod, e.workload) for e in received if isinstance(e, PodObserved)}
    assert pods == {("train-0", "ml/train"), ("train-m-0", "ml/train@pytorchjob")}
    # AND the snapshots of each kind hold only that kind's key
    parts = [e for e in received if isinstance(e, SnapshotPart)]
    by_scope = {p.scope: (p.workloads, set(p.pods)) for p in parts}
    assert by_scope["Job"][0] == {"ml/train": ""}
    assert by_scope["PyTorchJob"][0] == {"ml/train@pytorchjob": "uid-pt"}
    assert by_scope["Pod"][1] == {"ml/train", "ml/train@pytorchjob"}
    # AND the core, fed all of it, holds both as live workloads (none finished)
    for e in received:
        snapshot = complete([e]) if isinstance(e, SnapshotPart) else None
        if snapshot is None:
            fleet.apply(e, clock())
            continue
        for w in list(fleet):
            for told in gone(w, snapshot):
                fleet.apply(told, clock())
    assert {w.key: (w.kind, w.phase is Phase.FINISHED) for w in fleet} == {
        "ml/train": (Kind.JOB, False),
        "ml/train@pytorchjob": (Kind.PYTORCHJOB, False),
    }


def test_deleting_the_pytorchjob_leaves_the_job_of_its_name(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN both known
    agent = make_agent(aws["events"], clock, sleeps)
    relist(agent)
    landed(aws)
    # WHEN the PyTorchJob is deleted (watch), then the Jobs are relisted
    agent.handle(Change(PYTORCHJOB_RESOURCE, "DELETED", pytorchjob(rv="400")))
    agent.handle(Sync(JOB_RESOURCE, [job()], "410"))
    agent.flush(everything=True)
    received = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN only the PyTorchJob's key is reported deleted, and the Job is still known
    finished = [(e.workload, e.reason.value) for e in received if isinstance(e, WorkloadFinished)]
    assert finished == [("ml/train@pytorchjob", "Deleted")]
    assert set(agent.workloads) == {"ml/train"}


def test_a_pod_group_named_as_a_job_is_its_own_workload(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN a Job ml/grp and a pod group ml/grp (pods labelled muster.io/pod-group: grp)
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(JOB_RESOURCE, [job("grp")], "100"))
    agent.handle(Sync(POD_RESOURCE, [group_pod("grp-0", "7"), group_pod("grp-1", "8")], "120"))
    agent.flush(everything=True)
    received = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN both are reported, each under its own key, and neither replaced the other
    observed = {(e.workload, e.kind) for e in received if isinstance(e, WorkloadObserved)}
    assert observed == {("ml/grp", Kind.JOB), ("ml/grp@podgroup", Kind.POD_GROUP)}
    assert {k: v.kind for k, v in agent.workloads.items()} == {
        "ml/grp": Kind.JOB,
        "ml/grp@podgroup": Kind.POD_GROUP,
    }
    assert [e for e in received if isinstance(e, WorkloadFinished)] == []
