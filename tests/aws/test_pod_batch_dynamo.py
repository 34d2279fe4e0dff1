"""Pod events of one gang applied together on DynamoDB (moto): the write requests a burst
costs, counted from the real API calls, and the gang it leaves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from muster.aws.dynamo import DynamoStore
from muster.core import Outcome, PodObserved, WorkloadObserved
from muster.local.resources import create_resources
from muster.runtime.ports import MAX_POD_WRITES, Conflict, PodWrite

from .conftest import Rig

KEY = "ns/big"
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


@pytest.fixture
def dynamo() -> Iterator[tuple[DynamoStore, Counter[str]]]:
    with mock_aws():
        session = boto3.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        names = create_resources(session, "podbatch")
        client = session.client("dynamodb")
        calls: Counter[str] = Counter()

        def count(model: Any, **_: Any) -> None:
            calls[model.name] += 1

        client.meta.events.register("before-call.dynamodb.*", count)
        yield DynamoStore(client, names["MUSTER_TABLE_NAME"], "training"), calls


def _waves(pods: int) -> list[PodObserved]:
    """Every pod Pending, then Running, then Ready."""
    events = []
    for wave, (phase, ready) in enumerate(
        (("Pending", False), ("Running", False), ("Running", True))
    ):
        for i in range(pods):
            node = None if phase == "Pending" else f"node-{i // 8}"
            events.append(
                PodObserved(
                    KEY,
                    f"big-{i}",
                    1000 * (wave + 1) + i,
                    uid=f"u{i}",
                    phase=phase,
                    ready=ready,
                    node=node,
                )
            )
    return events


def _admitted(rig: Rig, pods: int) -> None:
    rig.plane().handle(WorkloadObserved(KEY, "default", pods, seq=1))
    assert rig.admit() == [KEY]


def test_a_burst_in_batches_of_a_hundred_is_under_half_a_write_per_pod_event(dynamo) -> None:
    store, calls = dynamo
    # GIVEN an admitted gang of 150 on DynamoDB, and the same gang in memory
    rig, reference = Rig(store=store), Rig()  # type: ignore[arg-type]
    _admitted(rig, 150)
    _admitted(reference, 150)
    events = _waves(150)
    calls.clear()
    # WHEN its 450 pod events come in SQS batches of 100
    plane = rig.plane()
    outcomes = [
        o for i in range(0, len(events), 100) for o in plane.handle_pods(KEY, events[i : i + 100])
    ]
    # THEN every event is applied in well under half a write request each
    assert outcomes == [Outcome.APPLIED] * len(events)
    writes = sum(n for op, n in calls.items() if op in WRITES)
    assert writes / len(events) <= 0.5, dict(calls)
    assert writes <= 12, dict(calls)  # 5 batches, <= 2 transactions each, the transition
    # AND the gang is what one-by-one handling leaves
    for e in events:
        reference.plane().handle(e)
    snap, expected = store.load(KEY), reference.store.load(KEY)
    assert snap is not None and expected is not None
    assert snap.workload == expected.workload
    assert snap.ready_count == expected.ready_count == 150
    assert rig.bus.events == reference.bus.events  # Submitted, Admitted, PodsReady


def test_one_by_one_the_same_burst_is_a_write_per_pod_event(dynamo) -> None:
    store, calls = dynamo
    rig = Rig(store=store)  # type: ignore[arg-type]
    _admitted(rig, 20)
    events = _waves(20)
    calls.clear()
    for e in events:
        rig.plane().handle(e)
    writes = sum(n for op, n in calls.items() if op in WRITES)
    assert writes >= len(events)  # what the batch path saves


def test_write_pods_is_all_or_nothing_on_each_pod_s_revision(dynamo) -> None:
    store, _calls = dynamo
    rig = Rig(store=store)  # type: ignore[arg-type]
    _admitted(rig, 3)
    light = store.load_pods(KEY, ["big-0", "big-1"])
    assert light is not None and light.pods == {} and light.revs == {}
    pod = _waves(3)[0]
    from muster.core.pods import observe_stored_pod

    change = observe_stored_pod(light.workload, None, pod, rig.settings())
    assert change.pod is not None
    store.write_pods(KEY, [PodWrite("big-0", change.pod, None, light.workload.uid)], light.epoch, 0)
    # WHEN a transaction names one pod on a revision it no longer has
    stale = [
        PodWrite("big-0", change.pod, None, light.workload.uid),  # it exists now
        PodWrite("big-1", replace(change.pod, name="big-1"), None, light.workload.uid),
    ]
    with pytest.raises(Conflict):
        store.write_pods(KEY, stale, light.epoch, 1)
    # THEN nothing of it was written: not the other pod, not the count
    after = store.load_pods(KEY, ["big-0", "big-1"])
    assert after is not None and set(after.revs) == {"big-0"} and after.ready_count == 0
    with pytest.raises(ValueError):
        store.write_pods(KEY, [stale[1]] * (MAX_POD_WRITES + 1), light.epoch, 0)
