"""The whole agent over real HTTP: kmock's API server -> watch -> agent -> moto's bus -> SQS."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from muster.agent.agent import Agent
from muster.agent.leader import LeaseElector
from muster.agent.runner import AgentRunner
from muster.agent.sender import EventBridgeSender, Outbox
from muster.agent.watch import KubeWatchSource
from muster.core.model import NodeObserved, PodObserved, WorkloadObserved
from muster.core.reconcile import SnapshotPart
from muster.kube.http import KubeApi
from muster.schema import parse_agent_event

REGION = "us-east-1"


@pytest.fixture()
def bus() -> Iterator[dict[str, Any]]:
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        events.create_event_bus(Name="muster")
        url = sqs.create_queue(QueueName="ingest")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        events.put_rule(
            Name="agent",
            EventBusName="muster",
            EventPattern=json.dumps({"source": ["muster.agent"], "detail": {"cluster": ["prod"]}}),
        )
        events.put_targets(Rule="agent", EventBusName="muster", Targets=[{"Id": "q", "Arn": arn}])
        yield {"events": events, "sqs": sqs, "url": url}


def drain(bus: dict[str, Any], want: int, timeout: float = 10.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        messages = (
            bus["sqs"]
            .receive_message(QueueUrl=bus["url"], MaxNumberOfMessages=10)
            .get("Messages", [])
        )
        for m in messages:
            event = parse_agent_event(json.loads(m["Body"]))[1]
            if not isinstance(event, SnapshotPart):  # what each list held: not counted here
                got.append(event)
            bus["sqs"].delete_message(QueueUrl=bus["url"], ReceiptHandle=m["ReceiptHandle"])
        if not messages:
            time.sleep(0.1)
    return got


@pytest.mark.slow
def test_the_leader_agent_reports_a_job_and_its_pod_created_over_the_api(
    apiserver: Any, bus: dict[str, Any]
) -> None:
    h = apiserver.handler
    for res, kind, namespaced in [
        ("batch/v1/jobs", "Job", True),
        ("jobset.x-k8s.io/v1alpha2/jobsets", "JobSet", True),
        ("kubeflow.org/v1/pytorchjobs", "PyTorchJob", True),
        ("v1/pods", "Pod", True),
        ("v1/nodes", "Node", False),
        ("coordination.k8s.io/v1/leases", "Lease", True),
    ]:
        h.resources[res] = {"kind": kind, "namespaced": namespaced}
    api = KubeApi.for_host(apiserver.url, watch_grace=0.5)
    agent = Agent("prod", Outbox(window=0.2), EventBridgeSender(bus["events"], "muster"))
    elector = LeaseElector(
        api, namespace="muster-system", name="muster-agent", identity="agent-0", retry_period=0.5
    )
    runner = AgentRunner(agent, KubeWatchSource(api), elector, watch_timeout=1, tick=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        # WHEN a labelled, suspended Job and then its pod are created through the API
        time.sleep(1.0)
        api.create(
            "/apis/batch/v1/namespaces/ml/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "train",
                    "namespace": "ml",
                    "creationTimestamp": "2026-11-30T09:00:00Z",
                    "labels": {"muster.io/queue": "gpu"},
                },
                "spec": {
                    "suspend": True,
                    "parallelism": 2,
                    "template": {"spec": {"containers": []}},
                },
            },
        )
        api.create(
            "/api/v1/namespaces/ml/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "train-0",
                    "namespace": "ml",
                    "labels": {"job-name": "train"},
                    "ownerReferences": [
                        {"kind": "Job", "name": "train", "uid": "uid-train", "controller": True}
                    ],
                },
                "status": {"phase": "Pending"},
            },
        )
        # THEN the control plane's queue receives the workload and the pod
        events = drain(bus, want=2)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert any(
        isinstance(e, WorkloadObserved) and e.workload == "ml/train" and e.gang_size == 2
        for e in events
    )
    assert any(isinstance(e, PodObserved) and e.pod == "train-0" for e in events)
    lease = h.objects["coordination.k8s.io/v1/leases", "muster-system", "muster-agent"]
    assert lease["spec"]["holderIdentity"] == "agent-0"


@pytest.mark.slow
def test_node_capacity_and_others_gpus_reach_the_bus_over_the_api(
    apiserver: Any, bus: dict[str, Any]
) -> None:
    h = apiserver.handler
    for res, kind, namespaced in [
        ("batch/v1/jobs", "Job", True),
        ("jobset.x-k8s.io/v1alpha2/jobsets", "JobSet", True),
        ("kubeflow.org/v1/pytorchjobs", "PyTorchJob", True),
        ("v1/pods", "Pod", True),
        ("v1/nodes", "Node", False),
        ("coordination.k8s.io/v1/leases", "Lease", True),
    ]:
        h.resources[res] = {"kind": kind, "namespaced": namespaced}
    api = KubeApi.for_host(apiserver.url, watch_grace=0.5)
    agent = Agent("prod", Outbox(window=0.2), EventBridgeSender(bus["events"], "muster"))
    elector = LeaseElector(
        api, namespace="muster-system", name="muster-agent", identity="agent-0", retry_period=0.5
    )
    runner = AgentRunner(agent, KubeWatchSource(api), elector, watch_timeout=1, tick=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        # WHEN a GPU node and a pod of another team's Deployment on it are created
        time.sleep(1.0)
        api.create(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gpu-0"},
                "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
                "status": {
                    "allocatable": {"nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        time.sleep(1.0)
        api.create(
            "/api/v1/namespaces/web/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "inference-0", "namespace": "web", "labels": {"app": "x"}},
                "spec": {
                    "nodeName": "gpu-0",
                    "containers": [{"resources": {"limits": {"nvidia.com/gpu": "3"}}}],
                },
                "status": {"phase": "Running"},
            },
        )
        # THEN the control plane's queue hears of the node's 8 GPUs, then of 3 held by others
        events = drain(bus, want=2)
    finally:
        stop.set()
        thread.join(timeout=5)
    nodes = [e for e in events if isinstance(e, NodeObserved)]
    assert [(n.node, n.gpus, n.schedulable, n.foreign_gpus) for n in nodes] == [
        ("gpu-0", 8, True, 0),
        ("gpu-0", 8, True, 3),
    ]
    assert nodes[1].seq > nodes[0].seq
