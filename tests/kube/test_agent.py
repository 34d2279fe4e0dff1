"""The agent against scripted watch streams, sending to moto's EventBridge.

Events travel bus -> rule -> SQS queue, and every one that lands is parsed with
the control plane's own validating parser, so a schema drift fails here.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from muster.agent.agent import Agent
from muster.agent.mapping import pod_view, workload_view
from muster.agent.memory import SeqSource
from muster.agent.sender import Entry, EventBridgeSender, Outbox, batches
from muster.agent.watch import Change, Reflector, Sync
from muster.core.model import Kind, NodeObserved, PodObserved, WorkloadFinished, WorkloadObserved
from muster.core.reconcile import SnapshotPart, complete
from muster.kube.conventions import JOB_RESOURCE, NODE_RESOURCE, POD_RESOURCE
from muster.schema import POD_OBSERVED, parse_agent_event

from .scripted import ScriptedSource, event, expired

REGION = "us-east-1"
T0 = 1_800_000_000.0


# --------------------------------------------------------------------------- objects


def job(name: str = "train", rv: str = "100", parallelism: int = 2, **extra: Any) -> dict[str, Any]:
    annotations = extra.pop("annotations", {})
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-30T09:00:00Z",
            "labels": {"muster.io/queue": "gpu"},
            "annotations": annotations,
        },
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "template": {
                "spec": {
                    "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
                }
            },
        },
    }
    obj.update(extra)
    return obj


def job_pod(
    name: str, rv: str, job_name: str = "train", ready: bool = False, **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"batch.kubernetes.io/job-name": job_name},
            "ownerReferences": [controller("Job", job_name)],
        },
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": status.get("phase", "Running" if ready else "Pending"),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            **{k: v for k, v in status.items() if k != "phase"},
        },
    }


def controller(kind: str, name: str, uid: str = "") -> dict[str, Any]:
    """The owner reference a workload controller puts on the pods it creates."""
    api = {"Job": "batch/v1", "PyTorchJob": "kubeflow.org/v1"}[kind]
    return {
        "apiVersion": api,
        "kind": kind,
        "name": name,
        "uid": uid or f"uid-{name}",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def group_pod(name: str, rv: str, min_available: str | None = "2") -> dict[str, Any]:
    notes = {"muster.io/min-available": min_available} if min_available else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-30T09:00:00Z",
            "labels": {"muster.io/pod-group": "grp", "muster.io/queue": "gpu"},
            "annotations": notes,
        },
        "spec": {
            "schedulingGates": [{"name": "muster.io/admission"}],
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Pending"},
    }


# --------------------------------------------------------------------------- AWS


@pytest.fixture()
def aws() -> Iterator[dict[str, Any]]:
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        events.create_event_bus(Name="muster")
        queue_url = sqs.create_queue(QueueName="ingest")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        events.put_rule(
            Name="agent",
            EventBusName="muster",
            EventPattern=json.dumps({"source": ["muster.agent"]}),
        )
        events.put_targets(
            Rule="agent", EventBusName="muster", Targets=[{"Id": "ingest", "Arn": arn}]
        )
        yield {"events": events, "sqs": sqs, "queue": queue_url}


def landed(aws: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    while True:
        got = aws["sqs"].receive_message(QueueUrl=aws["queue"], MaxNumberOfMessages=10)
        messages = got.get("Messages", [])
        if not messages:
            return out
        for m in messages:
            out.append(json.loads(m["Body"]))
            aws["sqs"].delete_message(QueueUrl=aws["queue"], ReceiptHandle=m["ReceiptHandle"])


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def sleeps() -> list[float]:
    return []


def make_agent(client: Any, clock: Clock, sleeps: list[float], window: float = 1.0) -> Agent:
    sender = EventBridgeSender(client, "muster", sleep=sleeps.append)
    return Agent("prod", Outbox(window=window), sender, clock=clock)


# --------------------------------------------------------------------------- mapping


def test_job_gang_size_gpus_and_annotations() -> None:
    view = workload_view(
        Kind.JOB,
        job(
            parallelism=4,
            annotations={
                "muster.io/min-available": "3",
                "muster.io/timeout": "10m",
                "muster.io/priority": "5",
            },
        ),
    )
    assert view is not None
    assert (view.key, view.queue, view.gang_size, view.gpus, view.priority, view.timeout) == (
        "ml/train",
        "gpu",
        3,
        32,
        5,
        "10m",
    )


def test_bad_annotations_are_reported_and_ignored() -> None:
    view = workload_view(
        Kind.JOB, job(annotations={"muster.io/min-available": "lots", "muster.io/timeout": "soon"})
    )
    assert view is not None
    assert view.gang_size == 2 and view.timeout is None
    assert [p.split(":")[0] for p in view.problems] == [
        "muster.io/min-available",
        "muster.io/timeout",
    ]


def test_jobset_and_pytorchjob_gang_sizes() -> None:
    jobset = {
        "metadata": {"name": "js", "namespace": "ml", "labels": {"muster.io/queue": "q"}},
        "spec": {
            "replicatedJobs": [
                {"replicas": 2, "template": {"spec": {"parallelism": 4, "template": {}}}},
                {"template": {"spec": {"template": {}}}},
            ]
        },
        "status": {"conditions": [{"type": "Completed", "status": "True"}]},
    }
    pytorch = {
        "metadata": {"name": "pt", "namespace": "ml", "labels": {"muster.io/queue": "q"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {
                        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}]}
                    },
                },
                "Worker": {
                    "replicas": 3,
                    "template": {
                        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}]}
                    },
                },
            }
        },
    }
    js = workload_view(Kind.JOBSET, jobset)
    pt = workload_view(Kind.PYTORCHJOB, pytorch)
    assert js is not None and (js.gang_size, js.status) == (9, "Succeeded")
    assert pt is not None and (pt.gang_size, pt.gpus) == (4, 32)


def test_unlabelled_workloads_are_not_musters() -> None:
    obj = job()
    obj["metadata"]["labels"] = {}
    assert workload_view(Kind.JOB, obj) is None


def test_pod_not_ready_reason_comes_from_the_most_telling_place() -> None:
    pulling = job_pod(
        "p",
        "1",
        containerStatuses=[
            {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
        ],
    )
    unschedulable = job_pod("q", "1")
    unschedulable["status"]["conditions"].append(
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/8 nodes",
        }
    )
    assert (pod_view("ml/train", pulling).reason, pod_view("ml/train", pulling).message) == (
        "ImagePullBackOff",
        "no such image",
    )
    assert pod_view("ml/train", unschedulable).reason == "Unschedulable"


def test_seq_is_the_resource_version_with_a_monotonic_fallback(clock: Clock) -> None:
    seq = SeqSource(clock)
    assert seq("812") == 812
    first = seq("opaque")
    assert first == int(T0 * 1_000_000)
    assert seq("opaque") == first + 1  # same microsecond: still increasing


# --------------------------------------------------------------------------- end to end


def test_watch_stream_to_sqs_through_the_bus(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN a labelled Job and its pods; the pods are seen before the Job
    source = ScriptedSource(
        listings={"pods": [([job_pod("train-0", "90")], "95")], "jobs": [([], "95")]},
        streams={
            "pods": [[event("MODIFIED", job_pod("train-1", "99"))]],
            "jobs": [[event("ADDED", job(rv="100"))]],
        },
    )
    agent = make_agent(aws["events"], clock, sleeps)
    pods = Reflector(POD_RESOURCE, source, agent.handle)
    jobs = Reflector(JOB_RESOURCE, source, agent.handle, label_selector="muster.io/queue")
    # WHEN the reflectors run one round each and the window passes
    pods.step()
    jobs.step()
    clock.now += 1.0
    agent.flush()
    # THEN the Job and both pods arrive in the queue, valid for the control plane,
    # and so does what each list held (for the control plane's reconciliation)
    everything = [parse_agent_event(e) for e in landed(aws)]
    listings = sorted(
        (
            (e.scope, e.revision, dict(e.pods), dict(e.workloads))
            for _, e in everything
            if isinstance(e, SnapshotPart)
        ),
    )
    assert listings == [
        ("Job", 95, {}, {}),
        ("Pod", 95, {"ml/train": {"train-0": "uid-train-0"}}, {}),
    ]
    parsed = [(c, e) for c, e in everything if not isinstance(e, SnapshotPart)]
    assert [c for c, _ in parsed] == ["prod"] * 3
    events = [e for _, e in parsed]
    assert isinstance(events[0], WorkloadObserved)
    assert (events[0].workload, events[0].gang_size, events[0].gpus, events[0].seq) == (
        "ml/train",
        2,
        16,
        100,
    )
    assert sorted((e.pod, e.seq) for e in events[1:] if isinstance(e, PodObserved)) == [
        ("train-0", 90),
        ("train-1", 99),
    ]
    # and the Jobs were listed and watched by the queue label, resuming from the list's version
    assert ("watch", "jobs", "95", "muster.io/queue") in source.calls


def test_pods_of_other_jobs_are_not_sent(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(POD_RESOURCE, "ADDED", job_pod("web-0", "5", job_name="web")))
    agent.flush(everything=True)
    assert landed(aws) == []


def test_updates_of_one_pod_are_coalesced_in_the_window(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps, window=1.0)
    agent.handle(Change(JOB_RESOURCE, "ADDED", job()))
    agent.flush()
    landed(aws)
    # WHEN one pod changes three times within the window
    agent.handle(Change(POD_RESOURCE, "ADDED", job_pod("train-0", "101")))
    clock.now += 0.3
    agent.handle(Change(POD_RESOURCE, "MODIFIED", job_pod("train-0", "102", phase="Running")))
    clock.now += 0.3
    agent.handle(Change(POD_RESOURCE, "MODIFIED", job_pod("train-0", "103", ready=True)))
    assert agent.flush() == 0  # still inside the window of the first change
    clock.now += 0.5
    agent.flush()
    # THEN one event goes out, with the latest state
    [(_, pod)] = [parse_agent_event(e) for e in landed(aws)]
    assert isinstance(pod, PodObserved)
    assert (pod.seq, pod.ready, pod.phase) == (103, True, "Running")
    assert agent.outbox.stats["coalesced"] == 2


def test_a_relist_resends_state_and_reports_what_vanished(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN the agent knows a Job with two pods
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(JOB_RESOURCE, [job()], "100"))
    agent.handle(Sync(POD_RESOURCE, [job_pod("train-0", "101"), job_pod("train-1", "102")], "102"))
    agent.flush(everything=True)
    landed(aws)
    # WHEN a relist (after 410 Gone) finds one pod gone and the other unchanged
    agent.handle(Sync(POD_RESOURCE, [job_pod("train-0", "101")], "150"))
    agent.flush(everything=True)
    # THEN the unchanged pod is sent again with its old seq (a duplicate the control
    # plane drops) and the missing one is reported deleted at the list's version
    got = sorted(
        (
            (e.pod, e.seq, e.deleted)
            for _, e in map(parse_agent_event, landed(aws))
            if isinstance(e, PodObserved)
        )
    )
    assert got == [("train-0", 101, False), ("train-1", 150, True)]


def test_a_relist_in_pages_counts_only_a_listing_that_ended(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    from muster.agent.watch import SyncPage
    from muster.core.reconcile import SnapshotPart

    # GIVEN the agent knows a Job with three pods
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Sync(JOB_RESOURCE, [job(parallelism=3)], "100"))
    three = [job_pod(f"train-{i}", str(101 + i)) for i in range(3)]
    agent.handle(Sync(POD_RESOURCE, three, "103"))
    agent.flush(everything=True)
    landed(aws)
    # WHEN a paged relist shows one page, expires, and starts over: the pages of the
    # listing that ends hold train-0 and train-1 only
    agent.handle(SyncPage(POD_RESOURCE, three[:1], "150", first=True, last=False))
    agent.handle(SyncPage(POD_RESOURCE, three[:1], "160", first=True, last=False))
    agent.handle(SyncPage(POD_RESOURCE, three[1:2], "160", first=False, last=True))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    # THEN only the missing pod is deleted, at the revision of the listing that ended,
    # and the snapshot holds what that listing's pages held
    deleted = [(e.pod, e.seq) for e in events if isinstance(e, PodObserved) and e.deleted]
    assert deleted == [("train-2", 160)]
    [snapshot] = [e for e in events if isinstance(e, SnapshotPart)]
    assert snapshot.revision == 160
    assert sorted(snapshot.pods["ml/train"]) == ["train-0", "train-1"]


def test_job_deleted_and_completed(aws: dict[str, Any], clock: Clock, sleeps: list[float]) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(JOB_RESOURCE, "ADDED", job("a", rv="10")))
    agent.handle(Change(JOB_RESOURCE, "ADDED", job("b", rv="11")))
    agent.handle(
        Change(
            JOB_RESOURCE,
            "MODIFIED",
            job("a", rv="20", status={"conditions": [{"type": "Complete", "status": "True"}]}),
        )
    )
    agent.handle(Change(JOB_RESOURCE, "DELETED", job("b", rv="21")))
    agent.flush()
    finished = {
        e.workload: (e.reason.value, e.seq)
        for _, e in map(parse_agent_event, landed(aws))
        if isinstance(e, WorkloadFinished)
    }
    assert finished == {"ml/a": ("Succeeded", 20), "ml/b": ("Deleted", 21)}


def test_pod_group_gang_from_its_pods(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(POD_RESOURCE, "ADDED", group_pod("grp-0", "7")))
    agent.handle(Change(POD_RESOURCE, "ADDED", group_pod("grp-1", "8")))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    [workload] = [e for e in events if isinstance(e, WorkloadObserved)]
    assert (workload.workload, workload.kind, workload.gang_size, workload.gpus, workload.seq) == (
        "ml/grp@podgroup",
        Kind.POD_GROUP,
        2,
        8,
        7,
    )
    assert sorted(e.pod for e in events if isinstance(e, PodObserved)) == ["grp-0", "grp-1"]


def test_pod_group_without_min_available_is_counted_not_sent(
    aws: dict[str, Any], clock: Clock, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(POD_RESOURCE, "ADDED", group_pod("grp-0", "7", min_available=None)))
    agent.flush(everything=True)
    assert not [
        e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, WorkloadObserved)
    ]
    assert agent.stats["invalid_workloads"] == 1
    assert "muster.io/min-available: required" in caplog.text


def test_node_changes_are_sent_once_per_change(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)

    def node(rv: str, ready: bool, health: str | None = None) -> dict[str, Any]:
        labels = {"sagemaker.amazonaws.com/node-health-status": health} if health else {}
        return {
            "metadata": {"name": "node-a", "resourceVersion": rv, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }

    agent.handle(Change(NODE_RESOURCE, "ADDED", node("1", True)))
    agent.handle(Change(NODE_RESOURCE, "MODIFIED", node("2", True)))  # a heartbeat: nothing new
    agent.flush(everything=True)
    agent.handle(
        Change(NODE_RESOURCE, "MODIFIED", node("3", True, "UnschedulablePendingReplacement"))
    )
    agent.flush(everything=True)
    nodes = [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, NodeObserved)]
    assert [(n.node, n.ready, n.health) for n in nodes] == [
        ("node-a", True, None),
        ("node-a", True, "UnschedulablePendingReplacement"),
    ]


# --------------------------------------------------------------------------- sending


def entry(i: int, size: int = 0) -> Entry:
    return Entry(f"pod:ml/p{i}", POD_OBSERVED, {"i": i, "pad": "x" * size})


def test_batches_hold_at_most_ten_entries_and_256_kb() -> None:
    assert [len(b) for b in batches([entry(i) for i in range(25)])] == [10, 10, 5]
    big = [entry(i, size=100_000) for i in range(5)]
    split = batches(big)
    assert [len(b) for b in split] == [2, 2, 1]
    assert all(sum(e.size for e in b) <= 256 * 1024 for b in split)


class FlakyEvents:
    """Delegates to moto's client but fails chosen entries, as EventBridge can."""

    def __init__(self, real: Any, fail: list[set[int]]) -> None:
        self.real = real
        self.fail = fail  # per call: indexes of entries to fail
        self.calls: list[list[str]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append([json.loads(e["Detail"])["i"] for e in Entries])
        failing = self.fail.pop(0) if self.fail else set()
        keep = [e for n, e in enumerate(Entries) if n not in failing]
        sent = iter(self.real.put_events(Entries=keep)["Entries"] if keep else [])
        results = [
            {"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"}
            if n in failing
            else next(sent)
            for n in range(len(Entries))
        ]
        return {"FailedEntryCount": len(failing), "Entries": results}


def test_only_failed_entries_are_retried_with_backoff(
    aws: dict[str, Any], sleeps: list[float]
) -> None:
    flaky = FlakyEvents(aws["events"], fail=[{1, 3}, {0}])
    sender = EventBridgeSender(flaky, "muster", sleep=sleeps.append)
    sender.send([entry(i) for i in range(5)])
    assert flaky.calls == [[0, 1, 2, 3, 4], [1, 3], [1]]
    assert sleeps == [0.5, 1.0]
    assert sorted(json.loads(json.dumps(m["detail"]))["i"] for m in landed(aws)) == [0, 1, 2, 3, 4]
    assert (sender.stats["sent"], sender.stats["retried"], sender.stats["undeliverable"]) == (
        5,
        3,
        0,
    )


def test_what_cannot_be_sent_is_logged_and_counted(
    aws: dict[str, Any], sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    flaky = FlakyEvents(aws["events"], fail=[{0}] * 5)
    sender = EventBridgeSender(flaky, "muster", sleep=sleeps.append)
    with caplog.at_level(logging.ERROR, logger="muster.agent"):
        sender.send([entry(0), entry(1), entry(2, size=300_000)])
    assert sender.stats["undeliverable"] == 2
    assert "pod:ml/p0: ThrottlingException" in caplog.text
    assert "pod:ml/p2: EntryTooLarge" in caplog.text
    assert sorted(m["detail"]["i"] for m in landed(aws)) == [1]
    assert sleeps == [0.5, 1.0, 2.0, 4.0]


def test_a_follower_sends_nothing(aws: dict[str, Any], clock: Clock, sleeps: list[float]) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.may_send = lambda: False
    agent.handle(Change(JOB_RESOURCE, "ADDED", job()))
    assert agent.flush(everything=True) == 0
    assert landed(aws) == []


# --------------------------------------------------------------------------- reflector


def test_reflector_resumes_relists_on_410_and_backs_off_on_errors(clock: Clock) -> None:
    messages: list[Any] = []
    sleeps: list[float] = []
    source = ScriptedSource(
        listings={"jobs": [([job(rv="10")], "10"), ([job(rv="30")], "31"), ([job(rv="30")], "40")]},
        streams={
            "jobs": [
                [
                    event("MODIFIED", job(rv="11")),
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                ],
                [ConnectionResetError("stream dropped")],
                [event("MODIFIED", job(rv="20")), expired()],
                [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
                [],
            ]
        },
    )
    r = Reflector(
        JOB_RESOURCE, source, messages.append, clock=clock, sleep=sleeps.append, resync=1e9
    )
    for _ in range(5):
        r.step()
    assert [c[:3] for c in source.calls] == [
        ("list", "jobs", None),
        ("watch", "jobs", "10"),
        ("watch", "jobs", "15"),  # resumed after the bookmark
        ("watch", "jobs", "15"),  # after the dropped stream, backed off
        ("list", "jobs", None),  # WatchExpired (410 at connect): relist
        ("watch", "jobs", "31"),
        ("list", "jobs", None),  # a 410 ERROR event inside the stream: relist
        ("watch", "jobs", "40"),
    ]
    assert sleeps == [1.0]
    assert [type(m).__name__ for m in messages] == ["Sync", "Change", "Change", "Sync", "Sync"]


def test_reflector_relists_on_its_resync_period(clock: Clock) -> None:
    source = ScriptedSource(listings={"nodes": [([], "1"), ([], "2")]})
    r = Reflector(NODE_RESOURCE, source, lambda m: None, clock=clock, resync=600)
    r.step()
    clock.now += 601
    r.step()
    assert [c[0] for c in source.calls] == ["list", "watch", "list", "watch"]


def test_stop_ends_the_reflector(clock: Clock) -> None:
    stop = threading.Event()
    stop.set()
    r = Reflector(NODE_RESOURCE, ScriptedSource(), lambda m: None, clock=clock)
    r.run(stop)  # returns at once
    assert r.stats["lists"] == 0


def test_a_compacted_pod_maps_like_the_original() -> None:
    from muster.agent.mapping import compact_pod, pod_gpus, pod_group_view

    full = group_pod("grp-0", "7")
    full["spec"]["containers"][0]["image"] = "trainer:latest"
    full["status"]["containerStatuses"] = [{"state": {"waiting": {"reason": "ContainerCreating"}}}]
    small = compact_pod(full)
    assert "image" not in small["spec"]["containers"][0]
    assert pod_view("ml/grp", small) == pod_view("ml/grp", full)
    assert pod_gpus(small) == pod_gpus(full) == 4
    assert pod_group_view("ml/grp", [small]) == pod_group_view("ml/grp", [full])


def test_a_pod_group_whose_pods_all_succeeded_is_finished(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    for name, rv in (("grp-0", "7"), ("grp-1", "8")):
        agent.handle(Change(POD_RESOURCE, "ADDED", group_pod(name, rv)))
    for name, rv in (("grp-0", "20"), ("grp-1", "21")):
        done = group_pod(name, rv)
        done["status"]["phase"] = "Succeeded"
        agent.handle(Change(POD_RESOURCE, "MODIFIED", done))
    agent.flush(everything=True)
    finished = [
        e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, WorkloadFinished)
    ]
    assert [(e.workload, e.reason.value, e.seq) for e in finished] == [
        ("ml/grp@podgroup", "Succeeded", 21)
    ]


def test_a_deleted_job_takes_its_pods_out_of_the_agents_memory(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(JOB_RESOURCE, "ADDED", job(rv="10")))
    agent.handle(Change(POD_RESOURCE, "ADDED", job_pod("train-0", "11")))
    assert "ml/train-0" in agent.pods
    agent.handle(Change(JOB_RESOURCE, "DELETED", job(rv="12")))
    agent.handle(Change(POD_RESOURCE, "DELETED", job_pod("train-0", "13")))
    assert agent.pods == {} and agent.waiting == {}


def test_a_missing_crd_is_reported_once_and_checked_slowly(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    from muster.kube.conventions import JOBSET_RESOURCE
    from muster.kube.http import ApiException

    class NoJobSets(ScriptedSource):
        def list(self, resource: Any, label_selector: str | None) -> Any:
            raise ApiException(status=404, reason="Not Found")

    sleeps: list[float] = []
    r = Reflector(JOBSET_RESOURCE, NoJobSets(), lambda m: None, clock=clock, sleep=sleeps.append)
    for _ in range(3):
        r.step()
    assert sleeps == [60.0, 60.0, 60.0]
    assert caplog.text.count("jobsets: not served by this cluster") == 1


# --------------------------------------------------------------------------- reconciliation, memory


def test_a_pod_deleted_after_its_job_is_still_reported(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN a Job and its pod, known to the agent
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(JOB_RESOURCE, "ADDED", job(rv="10")))
    agent.handle(Change(POD_RESOURCE, "ADDED", job_pod("train-0", "11")))
    agent.flush(everything=True)
    landed(aws)
    # WHEN the Job is deleted, and garbage collection deletes its pod after it
    agent.handle(Change(JOB_RESOURCE, "DELETED", job(rv="12")))
    agent.handle(Change(POD_RESOURCE, "DELETED", job_pod("train-0", "13")))
    agent.flush(everything=True)
    # THEN the pod's deletion is sent too (the control plane keeps a tombstone that expires)
    got = [e for _, e in map(parse_agent_event, landed(aws))]
    assert [(type(e).__name__, e.seq) for e in got] == [
        ("WorkloadFinished", 12),
        ("PodObserved", 13),
    ]
    assert isinstance(got[1], PodObserved) and got[1].deleted


def test_pods_of_jobs_that_are_not_musters_are_not_kept(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN many pods of another team's (unlabelled) Jobs
    agent = make_agent(aws["events"], clock, sleeps)
    for i in range(500):
        agent.handle(Change(POD_RESOURCE, "ADDED", job_pod(f"web-{i}", str(i), job_name=f"w{i}")))
    assert sum(len(w) for w in agent.waiting.values()) == 500
    # WHEN their Jobs do not show up within a minute
    clock.now += 61
    agent.flush()
    # THEN the agent forgets them: its memory holds only what Muster manages
    assert agent.waiting == {} and agent.waiting_since == {} and agent.pods == {}


def test_a_listing_of_10000_pods_fits_eventbridge_and_sqs(
    aws: dict[str, Any], clock: Clock, sleeps: list[float]
) -> None:
    # GIVEN a cluster of 10,000 pods (100 Jobs of 100 pods each)
    agent = make_agent(aws["events"], clock, sleeps)
    pods = [
        job_pod(f"train-{j:03d}-worker-{i:03d}-x7k2p", str(1000 + j * 100 + i), job_name=f"j{j}")
        for j in range(100)
        for i in range(100)
    ]
    for p in pods:
        p["metadata"]["uid"] = (
            f"5f1c2a9b-{p['metadata']['resourceVersion']:0>4}-4e0b-9d2a-1b6c3e8f7a10"
        )
    # WHEN the agent lists them
    agent.handle(Sync(POD_RESOURCE, pods, "20000"))
    parts = [e for e in agent.outbox.pending.values() if e.detail_type == "Cluster Snapshot"]
    # THEN the listing goes out in parts, each within one EventBridge entry and one SQS message
    assert len(parts) > 1
    for entry in parts:
        assert entry.size <= 256 * 1024
        assert len(json.dumps({"detail": entry.detail}).encode()) + 1024 < 256 * 1024
    assert all(sum(e.size for e in batch) <= 256 * 1024 for batch in batches(parts))
    # and the parts, parsed as the control plane parses them, make the whole listing
    parsed = [
        parse_agent_event(
            {"source": "muster.agent", "detail-type": e.detail_type, "detail": e.detail}
        )[1]
        for e in parts
    ]
    whole = complete(p for p in parsed if isinstance(p, SnapshotPart))
    assert whole is not None and whole.revision == 20000
    assert sum(len(m) for m in whole.pods.values()) == 10_000
