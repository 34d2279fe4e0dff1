"""One bad workload never stalls the others: isolation, quarantine, release, and
admissions committed exactly as planned."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from muster.core import (
    Admit,
    DeadlineReached,
    Evict,
    Outcome,
    Phase,
    Reason,
    TimerKind,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.kube.adapter import ClusterUnavailable
from muster.retry import is_transient
from muster.runtime import describe, status
from muster.runtime.memory import MemoryStore
from muster.runtime.ports import RecordingCluster
from muster.runtime.service import MAX_EFFECT_TRIES, EffectFailed

from .conftest import Rig


class Forbidden(Exception):
    """What the API server answers with 403 or 422: waiting does not cure it."""


@dataclass
class RefusingCluster(RecordingCluster):
    """Refuses every action on the workloads in `refused`, as a 403 would."""

    refused: set[str] = field(default_factory=set)

    def admit(self, effect: Admit) -> None:
        if effect.workload in self.refused:
            raise Forbidden(f"jobs.batch {effect.workload} is forbidden")
        super().admit(effect)

    def evict(self, effect: Evict) -> None:
        if effect.workload in self.refused:
            raise Forbidden(f"jobs.batch {effect.workload} is forbidden")
        super().evict(effect)


def _rig(**kw: object) -> Rig:
    return Rig(cluster=RefusingCluster(), **kw)  # type: ignore[arg-type]


def test_a_workload_refused_by_the_cluster_never_stops_the_others_and_is_quarantined():
    # GIVEN a workload the API server refuses for good, ahead of two others in the queue
    rig = _rig()
    cluster = rig.cluster
    assert isinstance(cluster, RefusingCluster)
    cluster.refused.add("ns/bad")
    rig.submit("ns/bad", 1, created_at=1.0)
    rig.submit("ns/good", 1, created_at=2.0)
    # WHEN passes run (each one a retry the previous one asked for)
    plane = rig.plane(inline_admission=True)
    assert plane.admission_pass() == ["ns/bad", "ns/good"]
    assert plane.failed == {"ns/bad": "Admit: Forbidden: jobs.batch ns/bad is forbidden"}
    # THEN the other workload was admitted on the cluster in the same pass
    assert ("admit", "ns/good", 1) in cluster.calls
    for _ in range(MAX_EFFECT_TRIES - 2):
        plane = rig.plane(inline_admission=True)
        plane.admission_pass()
        assert "ns/bad" in plane.failed
    assert rig.store.load("ns/bad").quarantine is None  # type: ignore[union-attr]
    last = rig.plane(inline_admission=True)
    last.admission_pass()
    # AND after a bounded number of tries it is quarantined, with the error
    snap = rig.store.load("ns/bad")
    assert snap is not None and snap.quarantine is not None
    assert snap.quarantine.tries == MAX_EFFECT_TRIES
    assert "forbidden" in snap.quarantine.error
    assert last.failed == {}  # nothing more to retry: no loop
    assert rig.metrics.total("Quarantines") == 1
    # AND a quarantined workload is no longer tried at all
    calls = len(cluster.calls)
    rig.submit("ns/later", 1, created_at=3.0)
    assert rig.admit() == ["ns/later"]
    assert len(cluster.calls) == calls + 1
    # AND status and describe say so
    info = describe(rig.store, "ns/bad")
    assert info is not None and info["quarantine"]["tries"] == MAX_EFFECT_TRIES
    assert info["pendingEffects"] == ["Admit", "StartTimer", "Publish", "RecordView"]
    view = status(rig.store)
    assert [q["workload"] for q in view["quarantined"]] == ["ns/bad"]


def test_release_carries_out_the_kept_effects_once_the_cause_is_fixed():
    rig = _rig()
    cluster = rig.cluster
    assert isinstance(cluster, RefusingCluster)
    cluster.refused.add("ns/bad")
    rig.submit("ns/bad", 1)
    for _ in range(MAX_EFFECT_TRIES):
        rig.admit()
    assert rig.store.load("ns/bad").quarantine is not None  # type: ignore[union-attr]
    # Events for it are not applied while it is quarantined (nothing is done for it).
    assert rig.plane().handle(DeadlineReached("ns/bad", 1, TimerKind.STARTUP, 1)) == [
        Outcome.IGNORED
    ]
    # WHEN the administrator fixes the cause and releases it
    cluster.refused.clear()
    assert rig.store.release("ns/bad") is True
    assert rig.store.release("ns/bad") is False
    rig.plane(inline_admission=True).admission_pass(["ns/bad"])
    # THEN its kept effects are carried out and its failures forgotten
    assert ("admit", "ns/bad", 1) in cluster.calls
    snap = rig.store.load("ns/bad")
    assert snap is not None and not snap.outbox and snap.failures == 0
    assert [k for k, _ in rig.timers.started] == ["ns/bad"]


def test_a_refused_eviction_is_retried_by_redelivery_then_quarantined():
    # GIVEN an admitted workload whose eviction the API server refuses
    rig = _rig()
    cluster = rig.cluster
    assert isinstance(cluster, RefusingCluster)
    rig.submit("ns/bad", 1)
    rig.admit()
    cluster.refused.add("ns/bad")
    rig.clock.now += 60
    event = DeadlineReached("ns/bad", 1, TimerKind.STARTUP, 1)
    # WHEN the timer message is delivered again and again
    for _ in range(MAX_EFFECT_TRIES - 1):
        with pytest.raises(EffectFailed):
            rig.plane().handle(event)
    # THEN the last allowed try quarantines it and the message is done with (no DLQ)
    assert rig.plane().handle(event) == [Outcome.IGNORED]
    snap = rig.store.load("ns/bad")
    assert snap is not None and snap.quarantine is not None
    assert snap.workload.phase is Phase.REQUEUED  # the decision was committed


def test_transient_failures_are_retried_but_never_quarantine():
    rig = Rig()
    rig.submit("ns/a", 1)
    for _ in range(MAX_EFFECT_TRIES + 2):
        rig.cluster.fail_next = ConnectionError("API server unreachable")
        plane = rig.plane(inline_admission=True)
        plane.admission_pass()
        assert "ns/a" in plane.failed
    snap = rig.store.load("ns/a")
    assert snap is not None and snap.quarantine is None and snap.failures == 0


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConnectionError("reset"), True),
        (TimeoutError("slow"), True),
        (ClusterUnavailable("5xx"), True),  # the adapter's: a port `Transient`
        (Forbidden("403"), False),
        (ValueError("cannot convert float NaN to integer"), False),
        (OverflowError("date value out of range"), False),
    ],
)
def test_which_failures_count_towards_quarantine(error: Exception, transient: bool):
    assert is_transient(error) is transient


# --------------------------------------------------------------------------- planned = committed


@dataclass
class GrowingStore(MemoryStore):
    """Between the pass's read and its admission, the workload asks for more GPUs."""

    grow: object = None

    def load(self, key):  # type: ignore[no-untyped-def]
        if self.grow is not None:
            run, self.grow = self.grow, None
            run()  # type: ignore[operator]
        return super().load(key)


def test_a_workload_that_grew_after_it_was_planned_is_planned_again_not_admitted_over_quota():
    # GIVEN a quota of 16 GPUs and a workload asking for 8
    store = GrowingStore()
    rig = Rig(store=store, doc={"timeout": "60s", "gpuQuota": 16})
    rig.submit("ns/a", 1, gpus=8)
    # WHEN, after the pass planned it, its GPU request grows to 72
    store.grow = lambda: rig.plane().handle(WorkloadObserved("ns/a", "default", 1, gpus=72, seq=2))
    admitted = rig.admit()
    # THEN it is not admitted: quota holds
    assert admitted == []
    assert rig.phase("ns/a") == "Pending"
    assert rig.cluster.calls == []


@dataclass
class LaggingIndexStore(MemoryStore):
    """A phase index that lags: it shows workloads as they were when `freeze` was called."""

    frozen: dict[str, list] | None = None

    def freeze(self) -> None:
        self.frozen = {}
        for item in self.items.values():
            self.frozen.setdefault(item.workload.phase.value, []).append(item.workload)

    def by_phase(self, phase: str):  # type: ignore[no-untyped-def]
        if self.frozen is None:
            return super().by_phase(phase)
        return list(self.frozen.get(phase, []))


def test_quota_holds_while_the_phase_index_lags_behind_an_admission():
    # GIVEN a quota of 16 and two 16-GPU workloads, with an index that lags
    store = LaggingIndexStore()
    rig = Rig(store=store, doc={"timeout": "60s", "gpuQuota": 16})
    rig.submit("ns/a", 1, gpus=16, created_at=1.0)
    rig.submit("ns/b", 1, gpus=16, created_at=2.0)
    store.freeze()  # the index shows both Pending, and will not see a's admission
    # WHEN two passes run one after the other
    assert rig.admit() == ["ns/a"]
    assert rig.admit() == []
    # THEN the second saw a's admission through the ledger's entries
    assert store.ledger_state.recent == {"ns/a": 1}
    # AND the ledger names it for as long as it holds quota, whatever the index shows
    store.frozen = None
    assert rig.admit() == []
    assert store.ledger_state.recent == {"ns/a": 1}
    # AND the write that ends its holding takes it off the ledger
    rig.plane().handle(WorkloadFinished("ns/a", Reason.DELETED, 50))
    assert store.ledger_state.recent == {}
    assert rig.admit() == ["ns/b"]
