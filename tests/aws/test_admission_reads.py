"""The admission pass reads the queue once, and learns of other passes' admissions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from muster.core import Reason, WorkloadFinished
from muster.runtime.memory import MemoryStore

from tests.aws.conftest import Rig


@dataclass
class CountingStore(MemoryStore):
    """Counts the workload items a pass reads consistently, one by one or in batches."""

    batch_reads: int = 0
    loads: int = 0

    def get_workloads(self, keys, unsettled=None, quarantined=None):
        keys = list(keys)
        self.batch_reads += len(keys)
        return super().get_workloads(keys, unsettled, quarantined)

    def load(self, key):
        self.loads += 1
        return super().load(key)


def test_admitting_n_of_q_queued_workloads_reads_each_candidate_once():
    # GIVEN 120 queued workloads of one GPU each, and room for 30
    rig = Rig(store=CountingStore())
    rig.doc = {"timeout": "60s", "gpuQuota": 30}
    for i in range(120):
        rig.submit(f"ns/w{i:03d}", 1, gpus=1, created_at=float(i))
    store = rig.store
    assert isinstance(store, CountingStore)
    store.batch_reads = store.loads = 0
    # WHEN one pass admits what fits
    admitted = rig.admit()
    # THEN it admitted the first 30 in queue order
    assert admitted == [f"ns/w{i:03d}" for i in range(30)]
    # AND read each candidate once, not once per admission (30 x 120 = 3,600 before)
    assert store.batch_reads == 120
    # AND loaded each admitted workload once, to admit it as planned
    assert store.loads <= 30 + 5


@dataclass
class InterleavedStore(MemoryStore):
    """Runs `interleave` inside the first admission, before it commits."""

    interleave: Any = None

    def admit(self, before, after, outbox, ledger, now):
        if self.interleave is not None:
            run, self.interleave = self.interleave, None
            run()
        return super().admit(before, after, outbox, ledger, now)


def test_admissions_another_pass_made_meanwhile_count_for_the_next_round():
    # GIVEN a cluster quota of 5 GPUs, 4 of them for queue q1, where a workload holds 1
    rig = Rig(store=InterleavedStore())
    rig.doc = {"timeout": "60s", "gpuQuota": 5, "queues": {"q1": {"gpuQuota": 4}, "q2": {}}}
    rig.submit("ns/holder", 1, queue="q1", gpus=1, created_at=0.0)
    assert rig.admit() == ["ns/holder"]
    # AND queued: a (1 GPU), x (4 GPUs, q1), w (2 GPUs), in that order
    rig.submit("ns/a", 1, queue="q2", gpus=1, created_at=1.0)
    rig.submit("ns/x", 1, queue="q1", gpus=4, created_at=2.0)
    rig.submit("ns/w", 1, queue="q2", gpus=2, created_at=3.0)
    store = rig.store
    assert isinstance(store, InterleavedStore)

    def meanwhile() -> None:
        # the holder is deleted (which takes it off the ledger), another pass admits
        # a and x (5 GPUs: the quota), and a third pass admits nothing more
        rig.plane().handle(WorkloadFinished("ns/holder", Reason.DELETED, 50))
        assert rig.admit() == ["ns/a", "ns/x"]
        assert rig.admit() == []
        # the ledger names every holder, however long ago it was admitted
        assert store.ledger().recent == {"ns/a": 1, "ns/x": 1}

    store.interleave = meanwhile
    # WHEN a pass that read the queue before all that goes on
    rig.admit()
    # THEN it did not admit w over the quota: the ledger told it of a and x
    held = sum(w.gpus for w in store.active())
    assert held <= 5
    assert sorted(w.key for w in store.active()) == ["ns/a", "ns/x"]


class HidingIndexStore(MemoryStore):
    """An index that, read one phase at a time, misses holders changing phase meanwhile."""

    hide: bool = False

    def by_phase(self, phase: str):
        if self.hide and phase in ("Admitted", "Running", "Recovering"):
            return []
        return super().by_phase(phase)


@pytest.mark.parametrize("kind", ["memory", "dynamodb"])
def test_a_holder_the_index_misses_still_holds_its_quota(kind: str):
    from contextlib import nullcontext

    from tests.aws.stores import dynamo_store

    context = dynamo_store("holders") if kind == "dynamodb" else nullcontext(HidingIndexStore())
    with context as store:
        # GIVEN a quota of 8 held by a running gang, admitted long ago (passes since
        # have seen it on the index)
        rig = Rig(store=store, doc={"timeout": "60s", "gpuQuota": 8})  # type: ignore[arg-type]
        rig.submit("ns/a", 1, gpus=8, created_at=1.0)
        assert rig.admit() == ["ns/a"]
        rig.pod("ns/a", "a-0", 5, ready=True)
        assert rig.phase("ns/a") == "Running"
        assert rig.admit() == []
        rig.submit("ns/b", 1, gpus=8, created_at=2.0)
        # WHEN the index misses it (it turned Recovering between the pass's queries
        # of the Recovering and the Running partitions)
        if isinstance(store, HidingIndexStore):
            store.hide = True
        else:
            store.by_phase = lambda phase, _real=store.by_phase: (  # type: ignore[method-assign]
                [] if phase in ("Admitted", "Running", "Recovering") else _real(phase)
            )
        # THEN a pass still counts it, through the ledger, and admits nothing over quota
        assert rig.admit() == []
        assert rig.phase("ns/b") == "Pending"
        # AND once it finishes, its write takes it off the ledger and b gets the quota
        rig.plane().handle(WorkloadFinished("ns/a", Reason.SUCCEEDED, 60))
        assert store.ledger().recent == {}
        assert rig.admit() == ["ns/b"]


class TwoPhaseIndexStore(MemoryStore):
    """An index that still shows a workload under the phase it just left."""

    stale: dict[str, list] = {}

    def by_phase(self, phase: str):
        return [*super().by_phase(phase), *self.stale.get(phase, [])]


def test_status_shows_each_workload_once_as_its_item_holds_it():
    from dataclasses import replace

    from muster.runtime.views import status

    # GIVEN a workload Requeued, which the lagging index still also shows Admitted
    store = TwoPhaseIndexStore()
    rig = Rig(store=store, doc={"timeout": "60s"})
    rig.submit("ns/broken", 1, created_at=1.0)
    assert rig.admit() == ["ns/broken"]
    admitted = store.load("ns/broken").workload  # type: ignore[union-attr]
    rig.clock.now += 61
    from muster.core import DeadlineReached, TimerKind

    rig.plane().handle(DeadlineReached("ns/broken", 1, TimerKind.STARTUP, 1))
    assert rig.phase("ns/broken") == "Requeued"
    store.stale = {"Admitted": [replace(admitted, pods={})]}
    # WHEN the status is read
    view = status(store)
    # THEN it lists the workload once, Requeued, and nothing holds quota
    listed = [w["workload"] for items in view["phases"].values() for w in items]
    assert listed == ["ns/broken"]
    assert [w["workload"] for w in view["phases"]["Requeued"]] == ["ns/broken"]
    assert view["admitted"] == []
