"""The admission pass reads the queue once, and stays safe when the ledger forgets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def test_an_admission_another_pass_made_and_the_ledger_forgot_still_counts():
    # GIVEN a cluster quota of 5 GPUs, 4 of them for queue q1, where a workload holds 1
    rig = Rig(store=InterleavedStore())
    rig.doc = {"timeout": "60s", "gpuQuota": 5, "queues": {"q1": {"gpuQuota": 4}}}
    rig.submit("ns/holder", 1, queue="q1", gpus=1, created_at=0.0)
    assert rig.admit() == ["ns/holder"]
    # AND queued: a (1 GPU), x (4 GPUs, q1), w (2 GPUs), in that order
    rig.submit("ns/a", 1, queue="q2", gpus=1, created_at=1.0)
    rig.submit("ns/x", 1, queue="q1", gpus=4, created_at=2.0)
    rig.submit("ns/w", 1, queue="q2", gpus=2, created_at=3.0)
    store = rig.store
    assert isinstance(store, InterleavedStore)

    def meanwhile() -> None:
        # the holder is deleted, another pass admits a and x (5 GPUs: the quota),
        # and a third pass finds both on the index and lets the ledger forget them
        rig.plane().handle(WorkloadFinished("ns/holder", Reason.DELETED, 50))
        assert rig.admit() == ["ns/a", "ns/x"]
        assert rig.admit() == []
        assert store.ledger().recent == {}

    store.interleave = meanwhile
    # WHEN a pass that read the queue before all that goes on
    rig.admit()
    # THEN it did not admit w over the quota: it read its candidates again
    held = sum(w.gpus for w in store.active())
    assert held <= 5
    assert sorted(w.key for w in store.active()) == ["ns/a", "ns/x"]
