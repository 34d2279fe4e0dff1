"""The PriorityClass a workload's pods run at, as the agent reads and reports it.

Objects are shaped as the API server returns them: a Job's, JobSet's or
PyTorchJob's pod templates name a class (or none, and get the cluster's
`globalDefault` one); a pod group's pods come with `spec.priorityClassName` and
`spec.priority` already filled in by the API server's Priority admission plugin.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from muster.agent.agent import Agent
from muster.agent.leader import LeaseElector
from muster.agent.mapping import (
    PriorityClasses,
    compact_pod,
    pod_group_view,
    with_priority_class,
    workload_view,
)
from muster.agent.runner import AgentRunner
from muster.agent.sender import EventBridgeSender, Outbox
from muster.agent.watch import Change, KubeWatchSource, Sync
from muster.core import WorkloadObserved, decide, parse_settings
from muster.core.decide import INADMISSIBLE
from muster.core.model import Kind
from muster.kube.conventions import JOB_RESOURCE, POD_RESOURCE, PRIORITYCLASS_RESOURCE
from muster.kube.http import KubeApi
from muster.schema import parse_agent_event

from . import test_agent, test_agent_http
from .test_agent import Clock, group_pod, job, landed, make_agent
from .test_agent_http import drain

# The same fixtures as the agent's other tests: moto's bus into a queue, a fake clock.
aws, clock, sleeps, bus = test_agent.aws, test_agent.clock, test_agent.sleeps, test_agent_http.bus


# The shape `kubectl get priorityclass -o yaml` shows.
def priority_class(name: str, value: int, rv: str = "5", default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "resourceVersion": rv},
        "value": value,
        "globalDefault": default,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"{name} workloads",
    }


CLASSES = PriorityClasses.of(
    [
        priority_class("team-high", 100000),
        priority_class("batch-low", -10),
        priority_class("cluster-default", 50, default=True),
        priority_class("system-cluster-critical", 2000000000),
    ]
)


def template(cls: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "t", "image": "trainer:1"}]}
    if cls is not None:
        spec["priorityClassName"] = cls
    return {"metadata": {"labels": {"app": "t"}}, "spec": spec}


def jobset(*classes: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "labels": {"muster.io/queue": "q"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": f"r{i}", "replicas": 1, "template": {"spec": {"template": template(c)}}}
                for i, c in enumerate(classes)
            ],
        },
    }


def pytorchjob(master: str | None, worker: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml", "labels": {"muster.io/queue": "q"}},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(master)},
                "Worker": {"replicas": 3, "template": template(worker)},
            },
        },
    }


def named_job(cls: str | None, name: str = "train", rv: str = "100") -> dict[str, Any]:
    obj = job(name, rv=rv)
    if cls is not None:
        obj["spec"]["template"]["spec"]["priorityClassName"] = cls
    return obj


def resolved(kind: Kind, obj: dict[str, Any]) -> tuple[str | None, int | None]:
    view = workload_view(kind, obj)
    assert view is not None
    view = with_priority_class(view, CLASSES)
    return view.priority_class, view.class_priority


# --------------------------------------------------------------------------- mapping


def test_a_jobs_template_names_its_class() -> None:
    assert resolved(Kind.JOB, named_job("team-high")) == ("team-high", 100000)
    assert resolved(Kind.JOB, named_job("batch-low")) == ("batch-low", -10)


def test_a_template_that_names_none_gets_the_clusters_default_class() -> None:
    assert resolved(Kind.JOB, named_job(None)) == ("cluster-default", 50)
    view = workload_view(Kind.JOB, named_job(None))
    assert view is not None
    # with no default class in the cluster there is no class: the annotation orders it
    alone = PriorityClasses.of([priority_class("team-high", 1)])
    assert with_priority_class(view, alone).priority_class is None
    # and before the classes are listed, none is reported, named or not
    named = workload_view(Kind.JOB, named_job("team-high"))
    assert named is not None and with_priority_class(named, None).priority_class is None


def test_a_class_that_does_not_exist_is_reported_without_a_value() -> None:
    assert resolved(Kind.JOB, named_job("hihg")) == ("hihg", None)
    # among several templates the missing one is the one reported
    assert resolved(Kind.JOBSET, jobset("team-high", "hihg")) == ("hihg", None)


def test_a_jobset_runs_at_the_highest_class_of_its_replicated_jobs() -> None:
    assert resolved(Kind.JOBSET, jobset("batch-low", "team-high")) == ("team-high", 100000)
    # a replicated job naming none counts with the default class
    assert resolved(Kind.JOBSET, jobset("batch-low", None)) == ("cluster-default", 50)


def test_a_pytorchjob_reads_its_replica_specs_templates() -> None:
    assert resolved(Kind.PYTORCHJOB, pytorchjob("team-high", "team-high")) == ("team-high", 100000)
    assert resolved(Kind.PYTORCHJOB, pytorchjob(None, "system-cluster-critical")) == (
        "system-cluster-critical",
        2000000000,
    )


def test_a_pod_groups_class_is_the_one_the_api_server_resolved() -> None:
    # GIVEN pods as the API server stores them: class and value filled in
    pods = [group_pod(f"grp-{i}", str(7 + i)) for i in range(2)]
    for pod in pods:
        pod["spec"] |= {"priorityClassName": "team-high", "priority": 100000}
    # WHEN the group is mapped from its pods, full or compacted as the agent keeps them
    for members in (pods, [compact_pod(p) for p in pods]):
        view = pod_group_view("ml/grp", members)
        assert view is not None
        # THEN the pods' own class and value are reported, whatever the agent's map says
        assert (view.priority_class, view.class_priority) == ("team-high", 100000)
        assert with_priority_class(view, PriorityClasses()) == view
    # a pod with no class has priority 0 and no class: the annotation orders it
    plain = group_pod("grp-0", "7")
    plain["spec"]["priority"] = 0
    view = pod_group_view("ml/grp", [plain])
    assert view is not None
    assert with_priority_class(view, PriorityClasses()).priority_class is None


def test_several_default_classes_resolve_to_the_lowest_as_the_api_server_does() -> None:
    classes = PriorityClasses.of(
        [priority_class("a", 10, default=True), priority_class("b", 5, default=True)]
    )
    assert classes.default == "b"
    # malformed entries are skipped, never guessed at
    assert PriorityClasses.of([{"metadata": {"name": "x"}, "value": "9"}]).values == {}


# --------------------------------------------------------------------------- agent


def workload_events(aws: dict[str, Any]) -> list[WorkloadObserved]:
    return [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, WorkloadObserved)]


def class_sync(*objs: dict[str, Any], rv: str = "500") -> Sync:
    return Sync(PRIORITYCLASS_RESOURCE, list(objs), rv)


def test_the_agent_reports_the_class_and_its_value(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(class_sync(priority_class("team-high", 100000, rv="5")))
    agent.handle(Change(JOB_RESOURCE, "ADDED", named_job("team-high", rv="100")))
    agent.handle(Change(JOB_RESOURCE, "ADDED", named_job("hihg", name="typo", rv="101")))
    agent.flush(everything=True)
    got = {e.workload: (e.priority_class, e.class_priority, e.seq) for e in workload_events(aws)}
    assert got == {"ml/train": ("team-high", 100000, 100), "ml/typo": ("hihg", None, 101)}


def test_a_workload_seen_before_the_classes_is_resent_at_the_listings_revision(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN a Job observed before the PriorityClasses were listed (reported without one)
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(JOB_RESOURCE, "ADDED", named_job(None, rv="100")))
    agent.flush(everything=True)
    [first] = workload_events(aws)
    assert (first.priority_class, first.seq) == (None, 100)
    # WHEN the listing arrives with a default class, then a relist brings the same
    agent.handle(class_sync(priority_class("cluster-default", 50, rv="5", default=True), rv="900"))
    agent.handle(class_sync(priority_class("cluster-default", 50, rv="5", default=True), rv="950"))
    agent.flush(everything=True)
    # THEN it is re-sent once, newer than what the control plane has
    [again] = workload_events(aws)
    assert (again.priority_class, again.class_priority, again.seq) == ("cluster-default", 50, 900)


def test_a_deleted_class_makes_its_workloads_report_it_missing(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    high = priority_class("team-high", 100000, rv="5")
    agent.handle(class_sync(high))
    agent.handle(Change(JOB_RESOURCE, "ADDED", named_job("team-high", rv="100")))
    agent.handle(Change(JOB_RESOURCE, "ADDED", named_job("batch-low", name="other", rv="101")))
    agent.flush(everything=True)
    landed(aws)
    # WHEN the class is deleted (the watch carries the deletion's revision)
    agent.handle(
        Change(
            PRIORITYCLASS_RESOURCE,
            "DELETED",
            {**high, "metadata": {**high["metadata"], "resourceVersion": "300"}},
        )
    )
    agent.flush(everything=True)
    # THEN only the workload naming it is re-sent, as missing, at that revision
    [event] = workload_events(aws)
    assert (event.workload, event.priority_class, event.class_priority, event.seq) == (
        "ml/train",
        "team-high",
        None,
        300,
    )


def test_a_pod_groups_event_carries_its_pods_class(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(class_sync())
    for i in range(2):
        pod = group_pod(f"grp-{i}", str(7 + i))
        pod["spec"] |= {"priorityClassName": "team-high", "priority": 100000}
        agent.handle(Change(POD_RESOURCE, "ADDED", pod))
    agent.flush(everything=True)
    [event] = workload_events(aws)
    assert (event.kind, event.priority_class, event.class_priority) == (
        Kind.POD_GROUP,
        "team-high",
        100000,
    )


# --------------------------------------------------------------------------- over HTTP


@pytest.mark.slow
def test_over_the_api_a_class_orders_and_a_forbidden_one_is_refused(
    apiserver: Any, bus: dict[str, Any]
) -> None:
    # GIVEN an API server with PriorityClasses and the agent leading against it
    h = apiserver.handler
    for res, kind, namespaced in [
        ("batch/v1/jobs", "Job", True),
        ("v1/pods", "Pod", True),
        ("v1/nodes", "Node", False),
        ("scheduling.k8s.io/v1/priorityclasses", "PriorityClass", False),
        ("coordination.k8s.io/v1/leases", "Lease", True),
    ]:
        h.resources[res] = {"kind": kind, "namespaced": namespaced}
    api = KubeApi.for_host(apiserver.url, watch_grace=0.5)
    for cls in (priority_class("team-high", 100000), priority_class("batch-low", -10)):
        cls["metadata"].pop("resourceVersion")
        api.create("/apis/scheduling.k8s.io/v1/priorityclasses", cls)
    agent = Agent("prod", Outbox(window=0.2), EventBridgeSender(bus["events"], "muster"))
    elector = LeaseElector(
        api, namespace="muster-system", name="muster-agent", identity="agent-0", retry_period=0.5
    )
    runner = AgentRunner(agent, KubeWatchSource(api), elector, watch_timeout=1, tick=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        # WHEN Jobs naming a class, a forbidden class and a missing one are created
        time.sleep(1.0)
        for name, cls in (("urgent", "team-high"), ("cheap", "batch-low"), ("typo", "hihg")):
            obj = named_job(cls, name=name)
            obj["metadata"].pop("resourceVersion")
            obj["metadata"]["namespace"] = "team-a"
            api.create("/apis/batch/v1/namespaces/team-a/jobs", obj)
        events = [e for e in drain(bus, want=3) if isinstance(e, WorkloadObserved)]
    finally:
        stop.set()
        thread.join(timeout=5)
    # THEN each event carries the class and its value as the cluster defines them
    latest = {e.workload: e for e in events}
    assert {k: (e.priority_class, e.class_priority) for k, e in latest.items()} == {
        "team-a/urgent": ("team-high", 100000),
        "team-a/cheap": ("batch-low", -10),
        "team-a/typo": ("hihg", None),
    }
    # AND the core, with the queue allowing only team-high, admits only that one
    s = parse_settings(
        {
            "queueAccess": {
                "restrict": True,
                "queues": {"gpu": {"namespaces": ["team-a"], "priorityClasses": ["team-high"]}},
            }
        }
    )
    states = {k: decide(None, e, s, 0.0).workload for k, e in latest.items()}
    assert {k: (w.reason, w.message) for k, w in states.items() if w is not None} == {
        "team-a/urgent": (None, None),
        "team-a/cheap": (
            INADMISSIBLE,
            "PriorityClass batch-low is not allowed on queue gpu (team-high)",
        ),
        "team-a/typo": (INADMISSIBLE, "PriorityClass hihg does not exist"),
    }
