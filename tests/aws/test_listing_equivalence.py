"""The stores keep a workload's pod listing on its pod items (stamps, stubs) and
rebuild it on load; pod events after listings are answered exactly as the core
answers them on a whole workload that holds the listing itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from muster.aws.dynamo import DynamoStore
from muster.core import (
    Event,
    Kind,
    Outcome,
    PodObserved,
    PodsListed,
    Workload,
    WorkloadObserved,
    decide,
    parse_settings,
)
from muster.runtime.memory import MemoryStore

from tests.aws.conftest import Rig
from tests.aws.stores import dynamo_store, raw_items

NAMES = ("p0", "p1", "p2")
SETTINGS = parse_settings({"timeout": "1h"})
_keys = itertools.count()

pod_event = st.builds(
    lambda name, seq, uid, deleted, ready: ("pod", name, seq, f"{name}-{uid}", deleted, ready),
    st.sampled_from(NAMES),
    st.integers(2, 30),
    st.integers(0, 2),
    st.booleans(),
    st.booleans(),
)
listing = st.builds(
    lambda revision, pods: ("list", revision, pods),
    st.integers(2, 30),
    st.dictionaries(st.sampled_from(NAMES), st.integers(0, 2), max_size=len(NAMES)).map(
        lambda d: {n: f"{n}-{u}" for n, u in d.items()}
    ),
)
histories = st.lists(st.one_of(pod_event, listing), min_size=1, max_size=24)


def _events(key: str, history: list[tuple]) -> list[Event]:
    events: list[Event] = []
    for step in history:
        if step[0] == "list":
            events.append(PodsListed(key, step[1], step[2]))
        else:
            _, name, seq, uid, deleted, ready = step
            phase = "Failed" if deleted else "Running"
            events.append(
                PodObserved(key, name, seq, uid=uid, phase=phase, ready=ready, deleted=deleted)
            )
    return events


def _core(submitted: WorkloadObserved, events: list[Event]) -> tuple[list[Outcome], Workload]:
    """The core on a whole workload, which holds its listing itself."""
    w = decide(None, submitted, SETTINGS, 0.0).workload
    assert w is not None
    outcomes = []
    for event in events:
        d = decide(w, event, SETTINGS, 1.0)
        outcomes.append(d.outcome)
        if d.outcome is Outcome.APPLIED and d.workload is not None:
            w = d.workload
    return outcomes, w


def _check(store: MemoryStore | DynamoStore, kind: Kind, history: list[tuple]) -> None:
    key = f"ns/w{next(_keys)}"
    submitted = WorkloadObserved(key, "default", 8, kind=kind, seq=1, uid="w-1")
    events = _events(key, history)
    expected, whole = _core(submitted, events)
    # WHEN the same events go through the control plane on the store
    rig = Rig(store=store, doc={"timeout": "1h"})  # type: ignore[arg-type]
    rig.plane().handle(submitted)
    got = [rig.plane().handle(e)[0] for e in events]
    # THEN every event is answered as the core answers it on the whole workload
    assert got == expected
    snap = store.load(key)
    assert snap is not None
    assert snap.workload.pods == whole.pods
    assert snap.workload.listed_seq == whole.listed_seq
    # AND the listing rebuilt from the items is the core's wherever the core's names a
    # pod (beyond it, only uids of pods stored at or after the listing, whose older
    # events nothing can let through)
    rebuilt = dict(snap.workload.listed)
    assert {n: rebuilt.get(n) for n in whole.listed} == dict(whole.listed)


# A listed pod deleted after the listing: its late report at its last revision is a
# duplicate, as the core says (the tombstone keeps the listing's stamp).
DELETED_AFTER_LISTING = [
    ("pod", "p0", 5, "p0-0", False, True),
    ("list", 10, {"p0": "p0-0"}),
    ("pod", "p0", 12, "p0-0", True, False),
    ("pod", "p0", 5, "p0-0", False, True),
]
# A listed pod the store never heard of: a stub says so; its late report is applied.
LISTED_UNKNOWN = [("list", 10, {"p1": "p1-2"}), ("pod", "p1", 4, "p1-2", False, True)]
# A pod replaced after the listing, then deleted: the listing's uid outlives both.
REPLACED_AFTER_LISTING = [
    ("pod", "p0", 5, "p0-0", False, False),
    ("list", 10, {"p0": "p0-0"}),
    ("pod", "p0", 14, "p0-1", True, False),
    ("pod", "p0", 7, "p0-0", False, True),
]


@pytest.mark.parametrize("kind", [Kind.JOB, Kind.POD_GROUP])
@settings(max_examples=150, deadline=None)
@example(history=DELETED_AFTER_LISTING)
@example(history=LISTED_UNKNOWN)
@example(history=REPLACED_AFTER_LISTING)
@given(history=histories)
def test_the_memory_store_answers_pod_events_after_listings_as_the_core(kind, history):
    _check(MemoryStore(), kind, history)


@pytest.fixture(scope="module")
def table() -> Iterator[DynamoStore]:
    with dynamo_store("listing") as store:
        yield store


@pytest.mark.parametrize("kind", [Kind.JOB, Kind.POD_GROUP])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(history=DELETED_AFTER_LISTING)
@example(history=LISTED_UNKNOWN)
@example(history=REPLACED_AFTER_LISTING)
@given(history=histories)
def test_the_dynamodb_store_answers_pod_events_after_listings_as_the_core(table, kind, history):
    _check(table, kind, history)


def test_the_pinned_histories_need_the_stamps(table) -> None:
    # Without the listing's stamps these would be answered otherwise: the tombstone's
    # duplicate would be stale, the unknown listed pod's report refused.
    outcomes, _ = _core(
        WorkloadObserved("ns/pin", "default", 8, seq=1, uid="w-1"),
        _events("ns/pin", DELETED_AFTER_LISTING),
    )
    assert outcomes[-1] is Outcome.DUPLICATE
    outcomes, _ = _core(
        WorkloadObserved("ns/pin", "default", 8, seq=1, uid="w-1"),
        _events("ns/pin", LISTED_UNKNOWN),
    )
    assert outcomes[-1] is Outcome.APPLIED
    # AND on DynamoDB the stub is an item that is not a pod
    rig = Rig(store=table)  # type: ignore[arg-type]
    rig.plane().handle(WorkloadObserved("ns/stub", "default", 8, seq=1, uid="w-1"))
    rig.plane().handle(PodsListed("ns/stub", 10, {"p1": "p1-2"}))
    stubs = [i for i in raw_items(table, "ns/stub") if i["sk"]["S"] == "POD#p1"]
    assert len(stubs) == 1 and "pod" not in stubs[0]
    assert stubs[0]["listedUid"]["S"] == "p1-2" and stubs[0]["listedRev"]["N"] == "10"
    snap = table.load("ns/stub")
    assert snap is not None and snap.workload.pods == {}
    assert snap.workload.listed == {"p1": "p1-2"}
