"""A complete snapshot is reconciled in bounded slices, each workload on its own.

The slices go to a queue (here a list, as the ingest queue would hold them); a
workload that fails is sent again alone, never redoing the others; the snapshot
counts as acted on once its last slice is done; and a snapshot that changes
nothing costs no Kubernetes call and at most one write per workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from muster.core import Kind, Outcome, PodObserved, SnapshotPart, WorkloadObserved
from muster.core.reconcile import POD_SCOPE
from muster.runtime.messages import ReconcileSlice, parse_reconcile_message, reconcile_body
from muster.runtime.ports import RecordingCluster
from muster.runtime.reconciliation import MAX_SLICE_TRIES, SLICE_KEYS

from .conftest import Rig


@dataclass
class SliceList:
    """The ingest queue as far as slices go: what was sent, with its delay."""

    sent: list[tuple[ReconcileSlice, float]] = field(default_factory=list)

    def send_slice(self, s: ReconcileSlice, delay: float) -> None:
        # Through the wire format, as SQS would carry it.
        import json

        self.sent.append((parse_reconcile_message(json.loads(reconcile_body(s))), delay))

    def take(self) -> list[tuple[ReconcileSlice, float]]:
        taken, self.sent = self.sent, []
        return taken


@dataclass
class CountingCluster(RecordingCluster):
    """Counts every call, and fails `record` with a 429 for the workloads in `throttled`."""

    count: int = 0
    throttled: set[str] = field(default_factory=set)

    def record(self, workload: str, kind: Kind, view: object) -> None:  # type: ignore[override]
        self.count += 1
        if workload in self.throttled:
            raise Throttled(f"429 on {workload}")
        super().record(workload, kind, view)  # type: ignore[arg-type]

    def announce(self, *args: object, **kwargs: object) -> None:  # type: ignore[override]
        self.count += 1


class Throttled(Exception):
    transient = True


def _rig(workloads: int, pods: int = 0) -> tuple[Rig, SliceList, list[str]]:
    rig = Rig(cluster=CountingCluster())
    keys = [f"ns/job-{i:05d}" for i in range(workloads)]
    plane = rig.plane()
    for key in keys:
        plane.handle(WorkloadObserved(key, "default", max(pods, 1), seq=1, uid=f"{key}-u"))
        for p in range(pods):
            plane.handle(PodObserved(key, f"{key}-p{p}", 2 + p, uid=f"{key}-p{p}-u"))
    return rig, SliceList(), keys


def _running(rig: Rig, keys: list[str], pods: int) -> None:
    """Every workload admitted, with all its pods ready (seq after the submissions)."""
    assert sorted(rig.admit()) == keys
    plane = rig.plane()
    for key in keys:
        for p in range(pods):
            plane.handle(
                PodObserved(
                    key, f"{key}-p{p}", 50 + p, uid=f"{key}-p{p}-u", phase="Running", ready=True
                )
            )
    assert {rig.phase(k) for k in keys} == {"Running"}


def _pods_snapshot(rig: Rig, keys: list[str], revision: int, pods: int = 0) -> SnapshotPart:
    listed = {k: {f"{k}-p{p}": f"{k}-p{p}-u" for p in range(pods)} for k in keys}
    return SnapshotPart(f"pods.{revision}", 1, 1, POD_SCOPE, revision, pods=listed)


def _plane(rig: Rig, queue: SliceList):
    plane = rig.plane()
    plane.slices = queue
    return plane


def _drain(rig: Rig, queue: SliceList, rounds: int = 20) -> int:
    """Deliver slices until none is left; returns how many deliveries it took."""
    deliveries = 0
    for _ in range(rounds):
        batch = queue.take()
        if not batch:
            return deliveries
        for s, _delay in batch:
            deliveries += 1
            _plane(rig, queue).reconcile_slice(s)
    raise AssertionError("slices kept coming")


def test_a_complete_snapshot_goes_out_in_bounded_slices_and_counts_once_all_are_done() -> None:
    rig, queue, keys = _rig(3 * SLICE_KEYS + 7)
    plane = _plane(rig, queue)
    assert plane.handle(_pods_snapshot(rig, keys, 100)) == [Outcome.APPLIED]
    sent = [s for s, _ in queue.sent]
    assert [len(s.keys) for s in sent] == [SLICE_KEYS, SLICE_KEYS, SLICE_KEYS, 7]
    assert sorted(k for s in sent for k in s.keys) == keys
    # Not acted on until every slice is done.
    assert rig.store.snapshot_revision(POD_SCOPE) == 0
    first, *rest = queue.take()
    _plane(rig, queue).reconcile_slice(first[0])
    assert rig.store.snapshot_revision(POD_SCOPE) == 0
    for s, _ in rest:
        _plane(rig, queue).reconcile_slice(s)
    assert rig.store.snapshot_revision(POD_SCOPE) == 100
    assert all(rig.store.load(k).workload.listed_seq == 100 for k in keys)  # type: ignore[union-attr]
    # A redelivered slice, or the snapshot again, changes nothing more.
    writes = rig.store.writes
    _plane(rig, queue).reconcile_slice(first[0])
    assert _plane(rig, queue).handle(_pods_snapshot(rig, keys, 100)) == [Outcome.STALE]
    assert rig.store.writes == writes and queue.sent == []


def test_a_fan_out_done_again_sends_only_the_slices_not_done() -> None:
    rig, queue, keys = _rig(2 * SLICE_KEYS)
    snapshot = _pods_snapshot(rig, keys, 100)
    _plane(rig, queue).handle(snapshot)
    (done, _), _other = queue.take()
    _plane(rig, queue).reconcile_slice(done)
    # The completing part is delivered again (its first try died after sending).
    _plane(rig, queue).handle(snapshot)
    assert [s.slice for s, _ in queue.sent] == [2]


def test_one_workloads_429_neither_stops_the_others_nor_makes_them_run_again() -> None:
    rig, queue, keys = _rig(10, pods=2)
    _running(rig, keys, 2)
    cluster = rig.cluster
    assert isinstance(cluster, CountingCluster)
    bad = keys[3]
    # A pod of every running workload is gone: each one's view changes (and is recorded).
    listed = {k: {f"{k}-p0": f"{k}-p0-u"} for k in keys}
    snapshot = SnapshotPart("pods.100", 1, 1, POD_SCOPE, 100, pods=listed)
    _plane(rig, queue).handle(snapshot)
    cluster.throttled.add(bad)
    [(s, _)] = queue.take()
    _plane(rig, queue).reconcile_slice(s)
    # Every other workload took the snapshot in this one delivery.
    for key in keys:
        if key != bad:
            assert rig.store.load(key).workload.listed_seq == 100  # type: ignore[union-attr]
    # The failed one is sent again on its own, after a backoff; the snapshot waits for it.
    [(again, delay)] = queue.take()
    assert again.keys == (bad,) and again.tries == 1 and delay > 0
    assert rig.store.snapshot_revision(POD_SCOPE) == 0
    cluster.throttled.clear()
    writes = rig.store.writes
    _plane(rig, queue).reconcile_slice(again)
    assert rig.store.writes - writes <= 2  # the left-over effect of that one workload only
    assert cluster.views[bad]["phase"] == "Recovering"
    assert rig.store.snapshot_revision(POD_SCOPE) == 100
    assert queue.sent == []


def test_a_workload_that_keeps_failing_is_given_up_and_the_snapshot_still_completes() -> None:
    rig, queue, keys = _rig(3, pods=1)
    _running(rig, keys, 1)
    cluster = rig.cluster
    assert isinstance(cluster, CountingCluster)
    cluster.throttled.add(keys[0])
    _plane(rig, queue).handle(SnapshotPart("pods.900", 1, 1, POD_SCOPE, 900, pods={}))
    deliveries = _drain(rig, queue)
    assert deliveries == MAX_SLICE_TRIES
    assert rig.store.snapshot_revision(POD_SCOPE) == 900


def test_a_slice_past_its_time_budget_sends_the_rest_on_at_once() -> None:
    rig, queue, keys = _rig(SLICE_KEYS)
    _plane(rig, queue).handle(_pods_snapshot(rig, keys, 100))
    [(s, _)] = queue.take()
    plane = _plane(rig, queue)
    ticks = iter(range(0, 10_000))
    plane.clock = lambda: float(next(ticks))  # a second per read of the clock
    plane.reconcile_slice(s)
    [(rest, delay)] = queue.take()
    assert 0 < len(rest.keys) < SLICE_KEYS and delay == 0 and rest.tries == 0
    assert rest.keys == s.keys[-len(rest.keys) :]
    _plane(rig, queue).reconcile_slice(rest)
    assert rig.store.snapshot_revision(POD_SCOPE) == 100


def test_an_older_snapshots_slices_stand_down_once_a_newer_one_was_acted_on() -> None:
    rig, queue, keys = _rig(5)
    _plane(rig, queue).handle(_pods_snapshot(rig, keys, 100))
    old = queue.take()
    _plane(rig, queue).handle(_pods_snapshot(rig, keys, 200))
    _drain(rig, queue)
    versions = [rig.store.load(k).version for k in keys]  # type: ignore[union-attr]
    assert [_plane(rig, queue).reconcile_slice(s) for s, _ in old] == [[Outcome.STALE]]
    assert [rig.store.load(k).version for k in keys] == versions  # type: ignore[union-attr]
    assert rig.store.snapshot_revision(POD_SCOPE) == 200


def test_deleted_jobs_found_by_a_snapshot_of_jobs_are_the_only_ones_sliced() -> None:
    rig, queue, keys = _rig(120)
    listed = {k: f"{k}-u" for k in keys[2:]}
    _plane(rig, queue).handle(SnapshotPart("jobs.50", 1, 1, "Job", 50, workloads=listed))
    [(s, _)] = queue.take()
    assert s.keys == tuple(keys[:2])
    _plane(rig, queue).reconcile_slice(s)
    assert [rig.phase(k) for k in keys[:3]] == ["Finished", "Finished", "Pending"]
    assert rig.store.snapshot_revision("Job") == 50


@pytest.mark.parametrize("pods", [0, 2])
def test_a_snapshot_of_2000_workloads_that_changes_nothing_costs_no_kubernetes_call(
    pods: int,
) -> None:
    rig, queue, keys = _rig(2_000, pods=pods)
    cluster = rig.cluster
    assert isinstance(cluster, CountingCluster)
    _plane(rig, queue).handle(_pods_snapshot(rig, keys, 10_000, pods))
    _drain(rig, queue)
    assert rig.store.snapshot_revision(POD_SCOPE) == 10_000
    calls, writes = cluster.count, rig.store.writes
    # The next resync: the same pods, a later revision.
    _plane(rig, queue).handle(_pods_snapshot(rig, keys, 20_000, pods))
    deliveries = _drain(rig, queue)
    assert rig.store.snapshot_revision(POD_SCOPE) == 20_000
    assert cluster.count == calls  # not one Kubernetes call
    slices = -(-len(keys) // SLICE_KEYS)
    assert deliveries == slices
    # At most the snapshot's revision on each workload (older pod events than it stay
    # stale), plus opening and closing the slices.
    assert rig.store.writes - writes <= len(keys) + 1 + slices


def test_an_ingest_batch_of_slices_stops_short_of_its_invocations_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a hundred open slices of one snapshot (an ingest batch's worth)
    rig, queue, keys = _rig(100 * 2)
    monkeypatch.setattr("muster.runtime.reconciliation.SLICE_KEYS", 2)
    _plane(rig, queue).handle(_pods_snapshot(rig, keys, 100))
    slices = queue.take()
    assert len(slices) == 100
    # WHEN they are applied with a clock that moves a second per read and an
    # invocation that must be done 20 s from now
    plane = _plane(rig, queue)
    ticks = iter(range(0, 100_000))
    plane.clock = lambda: float(next(ticks))
    until = 20.0
    for s, _ in slices:
        plane.reconcile_slice(s, until=until)
    # THEN the slices past that point did nothing but send themselves on, whole
    sent = queue.take()
    assert sent and all(delay == 0 and rest.tries == 0 for rest, delay in sent)
    untouched = [rest for rest, _ in sent if rest.keys in {s.keys for s, _ in slices}]
    assert len(untouched) >= 90
    # AND applied later, they complete the snapshot
    later = _plane(rig, queue)
    for rest, _ in sent:
        later.reconcile_slice(rest)
    _drain(rig, queue)
    assert rig.store.snapshot_revision(POD_SCOPE) == 100
