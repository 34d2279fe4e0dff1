"""A finished (or replaced) incarnation's pods all expire and leave the node index,
even when the invocation that ended it stops halfway through their expiry."""

from __future__ import annotations

from typing import Any

import pytest
from muster.aws.dynamo import DynamoStore
from muster.core import (
    Kind,
    Outcome,
    Phase,
    Pod,
    Reason,
    Workload,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.harness import Crash
from muster.runtime.memory import MemoryStore
from muster.runtime.ports import PodWrite
from muster.runtime.sweeper import sweep

from tests.aws.conftest import Rig
from tests.aws.stores import dynamo_store, raw_items

KEY = "ns/train"
GANG = 250  # three chunks of 100


def _running_gang(store: MemoryStore | DynamoStore, uid: str = "job-1") -> None:
    """A Running gang of 250 pods on 25 nodes, written as the store writes them."""
    gang = Workload(key=KEY, queue="default", gang_size=GANG, kind=Kind.JOB, uid=uid)
    store.write_workload(None, gang, 0, (), 1.0)
    snap = store.load(KEY)
    assert snap is not None
    running = Workload(**{**snap.workload.__dict__, "phase": Phase.RUNNING, "attempt": 1})
    pods = [
        PodWrite(
            f"w-{i}", Pod(f"w-{i}", 10 + i, f"u-{i}", "Running", True, f"n{i % 25}"), None, uid
        )
        for i in range(GANG)
    ]
    for start in range(0, GANG, 99):
        snap = store.load(KEY)
        assert snap is not None
        store.write_workload(snap, running, snap.epoch, (), 1.0, pods=pods[start : start + 99])


class _CrashOnSecondChunk:
    """The process dies (a Lambda timeout) at the second chunk of an expiry."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.chunks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def transact_write_items(self, **kw: Any) -> Any:
        if any("if_not_exists(expiresAt" in str(op) for op in kw["TransactItems"]):
            self.chunks += 1
            if self.chunks == 2:
                raise Crash("timed out")
        return self.client.transact_write_items(**kw)


def _crash_memory_on_second_chunk(store: MemoryStore) -> None:
    real, calls = store._expire_chunk, []

    def chunk(key: str, names: Any, at: float) -> None:
        calls.append(len(names))
        if len(calls) == 2:
            raise Crash("timed out")
        real(key, names, at)

    store._expire_chunk = chunk  # type: ignore[method-assign]


def _pods_left_memory(store: MemoryStore) -> list[str]:
    return [n for n in store.pods.get(KEY, {}) if (KEY, n) not in store.expires]


def _pods_left_dynamo(store: DynamoStore) -> list[str]:
    return [
        i["sk"]["S"]
        for i in raw_items(store, KEY)
        if i["sk"]["S"].startswith("POD#") and ("expiresAt" not in i or "gsi1pk" in i)
    ]


def _on_nodes(store: MemoryStore | DynamoStore) -> list[str]:
    return [k for n in range(25) for k in store.workloads_on_node(f"n{n}")]


@pytest.fixture(params=["memory", "dynamodb"])
def crashing(request: pytest.FixtureRequest):
    """(store, a function that makes the next expiry die at its second chunk, pods left)."""
    if request.param == "memory":
        store = MemoryStore()
        yield store, lambda: _crash_memory_on_second_chunk(store), lambda: _pods_left_memory(store)
        return
    with dynamo_store("expiry") as dynamo:
        real = dynamo.client

        def arm() -> None:
            dynamo.client = _CrashOnSecondChunk(real)  # type: ignore[assignment]

        yield dynamo, arm, lambda: _pods_left_dynamo(dynamo)


def test_a_crash_halfway_through_expiry_is_finished_by_the_redelivered_event(crashing) -> None:
    store, arm, left = crashing
    rig = Rig(store=store)
    _running_gang(store)
    assert sorted(_on_nodes(store)) == [KEY] * 25
    # WHEN the workload finishes and the invocation dies at the second chunk of 100
    arm()
    with pytest.raises(Crash):
        rig.plane().handle(WorkloadFinished(KEY, Reason.SUCCEEDED, uid="job-1"))
    # THEN the finish is committed, some pods expire, the others not yet
    snap = store.load(KEY)
    assert snap is not None and snap.workload.phase is Phase.FINISHED and snap.expiring
    assert 0 < len(left()) < GANG
    assert store.expiring() == [KEY]
    # WHEN the event is redelivered (a duplicate now)
    assert rig.plane().handle(WorkloadFinished(KEY, Reason.SUCCEEDED, uid="job-1")) == [
        Outcome.DUPLICATE
    ]
    # THEN every pod item has a TTL and is off the node index, and the record is gone
    assert left() == []
    assert _on_nodes(store) == []
    snap = store.load(KEY)
    assert snap is not None and not snap.expiring and store.expiring() == []


def test_the_sweeper_finishes_an_expiry_nobody_else_comes_back_to(crashing) -> None:
    store, arm, left = crashing
    rig = Rig(store=store)
    _running_gang(store)
    arm()
    with pytest.raises(Crash):
        rig.plane().handle(WorkloadFinished(KEY, Reason.DELETED, uid="job-1"))
    assert left()
    # WHEN no event of the workload ever comes again, the sweeper runs
    report = sweep(store, rig.messages, rig.settings(), rig.clock(), rig.metrics)
    # THEN it finishes the expiry
    assert report.expiries == [KEY]
    assert left() == [] and _on_nodes(store) == [] and store.expiring() == []
    # AND the next sweep has nothing to do
    assert sweep(store, rig.messages, rig.settings(), rig.clock(), rig.metrics).expiries == []


def test_a_replaced_incarnations_pods_expire_and_the_new_ones_stay(crashing) -> None:
    store, arm, left = crashing
    rig = Rig(store=store)
    _running_gang(store)
    # WHEN a new object takes the key, and the invocation dies halfway through expiry
    arm()
    with pytest.raises(Crash):
        rig.plane().handle(WorkloadObserved(KEY, "default", GANG, seq=5_000, uid="job-2"))
    # AND a pod of the new object is written before anyone resumes it
    light = store.load_pod(KEY, "w-0")
    assert light is not None and light.workload.uid == "job-2"
    new = Pod("w-0", 6_000, "new-0", "Running", False, "n0")
    store.write_pod(KEY, PodWrite("w-0", new, light.rev, "job-2"), light.epoch, 0, 6.0)
    # WHEN the next event of the workload comes (it resumes the expiry first)
    rig.plane().handle(WorkloadObserved(KEY, "default", GANG, seq=6_001, uid="job-2"))
    # THEN the old incarnation's pods all expire, the new one's pod does not
    assert [n.removeprefix("POD#") for n in left()] == ["w-0"]
    assert _on_nodes(store) == [KEY]
    snap = store.load(KEY)
    assert snap is not None and list(snap.workload.pods) == ["w-0"] and not snap.expiring
