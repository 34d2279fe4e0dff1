"""The ingest batch: a workload's pod events applied together, each workload's order kept,
and failures reported for exactly the records that failed."""

from __future__ import annotations

import copy
import json
from typing import Any

from muster.core import NodeObserved, PodObserved, WorkloadObserved
from muster.core.reconcile import SnapshotPart
from muster.harness.lambda_events import LambdaContext, sqs_event
from muster.lambdas.ingest import plan
from muster.retry import Transient
from muster.runtime.memory import MemoryStore
from muster.runtime.messages import EARLY_DELAYS
from muster.runtime.ports import PodWrite

from functions.ingest.handler import handler as ingest_handler

from ..lambda_events import sample
from .conftest import Rig

CTX = LambdaContext()


def pod(w: str, name: str, seq: int, ready: bool = True) -> PodObserved:
    return PodObserved(w, name, seq, uid=f"{name}-uid", phase="Running", ready=ready, node="n1")


def test_a_workload_s_pod_events_form_runs_that_keep_its_order() -> None:
    # GIVEN a batch mixing two workloads' pod events with a workload event and a node report
    items: list[tuple[str, Any]] = [
        ("m0", pod("a/x", "x-0", 1)),
        ("m1", pod("a/y", "y-0", 2)),
        ("m2", pod("a/x", "x-1", 3)),
        ("m3", WorkloadObserved("a/x", "q", 2, seq=4)),
        ("m4", pod("a/x", "x-0", 5)),
        ("m5", pod("a/y", "y-1", 6)),
        ("m6", NodeObserved("n1", seq=7, ready=False)),
        ("m7", pod("a/y", "y-0", 8)),
        ("m8", SnapshotPart("s1", 0, 1, "Pod", 9)),
        ("m9", pod("a/y", "y-1", 10)),
    ]
    steps = [(s.pods, s.ids) for s in plan(items)]
    # THEN x's pod events before and after its workload event are two runs, y's first run
    # ends at the node report and its next at the snapshot, and nothing moves across those
    assert steps == [
        ("a/x", ["m0", "m2"]),
        ("a/y", ["m1", "m5"]),
        (None, ["m3"]),
        ("a/x", ["m4"]),
        (None, ["m6"]),
        ("a/y", ["m7"]),
        (None, ["m8"]),
        ("a/y", ["m9"]),
    ]


def _pod_body(workload: str, name: str, seq: int, ready: bool = True) -> dict[str, Any]:
    body = copy.deepcopy(sample("pod_observed.json"))
    body["detail"].update(workload=workload, pod=name, seq=seq, uid=f"{name}-uid", ready=ready)
    return body


def _workload_body(workload: str, gang: int) -> dict[str, Any]:
    body = copy.deepcopy(sample("workload_observed.json"))
    body["detail"].update(workload=workload, gangSize=gang)
    return body


class CountingStore(MemoryStore):
    """The in-memory store, counting pod write requests; `throttled` workloads' fail."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, int]] = []
        self.throttled: set[str] = set()

    def write_pods(self, key, writes, epoch, ready_delta, now=0.0, **kw):  # type: ignore[no-untyped-def]
        if key in self.throttled:
            raise Transient(f"{key}: throttled")
        self.requests.append((key, len(writes)))
        super().write_pods(key, writes, epoch, ready_delta, now, **kw)

    def write_pod(
        self, key: str, write: PodWrite, epoch: int, ready_delta: int, now: float = 0.0, **kw
    ):  # type: ignore[no-untyped-def]
        self.requests.append((key, 1))
        super().write_pod(key, write, epoch, ready_delta, now, **kw)


def test_the_ingest_handler_writes_a_gang_s_pod_events_together() -> None:
    # GIVEN an admitted gang of 8
    store = CountingStore()
    rig = Rig(store=store)
    rig.submit("team-a/big", 8, gpus=8)
    assert rig.admit() == ["team-a/big"]
    # WHEN its 8 pods' Ready events come in one SQS batch
    bodies = [_pod_body("team-a/big", f"big-{i}", 10 + i) for i in range(8)]
    response = ingest_handler(sqs_event(*bodies), CTX, plane=rig.plane(), cluster_name="training")  # type: ignore[arg-type]
    # THEN they were one write request, and the gang is Running
    assert response == {"batchItemFailures": []}
    assert store.requests == [("team-a/big", 8)]
    assert rig.phase("team-a/big") == "Running"


def test_a_failed_run_fails_exactly_its_records() -> None:
    # GIVEN two admitted workloads, one of whose writes are throttled
    store = CountingStore()
    rig = Rig(store=store, doc={"timeout": "60s", "gpuQuota": 1000})
    for key in ("team-a/ok", "team-a/slow"):
        rig.submit(key, 2, gpus=2)
    assert sorted(rig.admit()) == ["team-a/ok", "team-a/slow"]
    store.throttled.add("team-a/slow")
    # WHEN one batch holds pod events of both, a workload not known yet, and a malformed record
    bodies = [
        _pod_body("team-a/slow", "slow-0", 10),  # m0
        _pod_body("team-a/ok", "ok-0", 11),  # m1
        _pod_body("team-a/unknown", "u-0", 12),  # m2
        _pod_body("team-a/slow", "slow-1", 13),  # m3
        "{not json",  # m4: rejected, never retried
        _pod_body("team-a/ok", "ok-1", 14),  # m5
        _workload_body("team-a/later", 1),  # m6
        _pod_body("team-a/later", "later-0", 15),  # m7: after its workload, in order
    ]
    response = ingest_handler(sqs_event(*bodies), CTX, plane=rig.plane(), cluster_name="training")  # type: ignore[arg-type]
    # THEN exactly the throttled run's records and the unknown workload's fail
    failed = sorted(f["itemIdentifier"] for f in response["batchItemFailures"])
    assert failed == ["m0", "m2", "m3"]
    assert rig.phase("team-a/ok") == "Running"
    later = rig.store.load("team-a/later")
    assert later is not None and "later-0" in later.workload.pods
    slow = rig.store.load("team-a/slow")
    assert slow is not None and slow.workload.pods == {}
    assert rig.metrics.total("InvalidEvents") == 1


def test_a_run_delivered_again_after_a_failure_is_applied_once() -> None:
    # GIVEN a batch whose run failed after the workload became known
    store = CountingStore()
    rig = Rig(store=store)
    bodies = [_pod_body("team-a/bert", f"b-{i}", 10 + i) for i in range(2)]
    first = ingest_handler(
        sqs_event(_workload_body("team-a/bert", 2), *bodies),
        CTX,
        plane=rig.plane(),
        cluster_name="training",
    )  # type: ignore[arg-type]
    assert first == {"batchItemFailures": []}
    # WHEN the same pod events come again (a redelivery)
    again = ingest_handler(sqs_event(*bodies), CTX, plane=rig.plane(), cluster_name="training")  # type: ignore[arg-type]
    # THEN they are duplicates: nothing more is written
    assert again == {"batchItemFailures": []}
    assert len(store.requests) == 1
    assert rig.metrics.total("IgnoredEvents", outcome="duplicate") == 2


class IngestQueue:
    """The ingest queue as far as the control plane's own messages go: what was sent back."""

    def __init__(self) -> None:
        self.early: list[tuple[str, float]] = []

    def send_slice(self, s: Any, delay: float) -> None:
        raise AssertionError("no reconciliation here")

    def send_early(self, body: str, delay: float) -> None:
        self.early.append((body, delay))


def test_pod_events_before_their_workload_are_sent_back_and_applied_once_it_is_known() -> None:
    # GIVEN a control plane with an ingest queue, and pod events of a workload it does not know
    rig = Rig()
    queue = IngestQueue()
    plane = rig.plane()
    plane.slices = queue
    bodies = [_pod_body("team-a/early", f"e-{i}", 10 + i) for i in range(2)]
    response = ingest_handler(sqs_event(*bodies), CTX, plane=plane, cluster_name="training")  # type: ignore[arg-type]
    # THEN no record fails (none waits out the visibility timeout): each is sent back, a second later
    assert response == {"batchItemFailures": []}
    assert [delay for _, delay in queue.early] == [1.0, 1.0]
    # WHEN the workload is known and they come back
    rig.submit("team-a/early", 2)
    resent = [json.loads(body) for body, _ in queue.early]
    queue.early.clear()
    response = ingest_handler(sqs_event(*resent), CTX, plane=plane, cluster_name="training")  # type: ignore[arg-type]
    # THEN they are applied
    assert response == {"batchItemFailures": []} and queue.early == []
    w = rig.store.load("team-a/early")
    assert w is not None and sorted(w.workload.pods) == ["e-0", "e-1"]


def test_an_event_whose_workload_never_comes_fails_after_its_last_try() -> None:
    rig = Rig()
    queue = IngestQueue()
    plane = rig.plane()
    plane.slices = queue
    body: Any = _pod_body("team-a/never", "n-0", 10)
    delays = []
    for _ in range(len(EARLY_DELAYS)):
        response = ingest_handler(sqs_event(body), CTX, plane=plane, cluster_name="training")  # type: ignore[arg-type]
        assert response == {"batchItemFailures": []}
        sent, delay = queue.early.pop()
        delays.append(delay)
        body = json.loads(sent)
    # the tries back off, and the last one fails the record: redelivered, in the end dead-lettered
    assert delays == list(EARLY_DELAYS)
    other = _workload_body("team-a/other", 1)
    response = ingest_handler(sqs_event(body, other), CTX, plane=plane, cluster_name="training")  # type: ignore[arg-type]
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == ["m0"]
    assert queue.early == []
