"""Reconciliation in bounded slices: a complete snapshot fans out to its workloads.

Acting on a snapshot touches every workload it concerns (every non-finished one
and every quota holder, for a snapshot of pods), more than one invocation can do. Once complete, the
snapshot's work is cut into slices of at most `SLICE_KEYS` workloads, opened
once in the store (so a retried fan-out resends only the slices not done), and
each goes to the ingest queue as its own message. A slice applies the core's
`gone` events to each of its workloads apart: one workload's failure (a 429, a
lost race too often) neither stops the others nor makes them run again, and the
slice is sent again holding only the failed ones, after a backoff; a slice that
runs out of its time budget sends the rest on at once. The snapshot's revision
is recorded when its last slice closes; until then a newer snapshot may overtake
it (the core orders the events by revision), and older slices then stand down.

Without a slice queue (the in-memory shells) the slices run in the same call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Protocol

from muster.core import Event, Outcome, Phase, SnapshotPart
from muster.core.reconcile import POD_SCOPE, complete, gone
from muster.runtime.messages import ReconcileSlice, retry_delay
from muster.runtime.ports import WorkloadStore

log = logging.getLogger("muster.runtime")

SLICE_KEYS = 50
"""Workloads per slice: a few reads, a write and at most a few cluster calls each."""
SLICE_SECONDS = 1.5
"""A slice's own time budget; an ingest batch also stops its slices short of its end."""
MAX_SLICE_TRIES = 8
"""Tries of a workload that keeps failing; after that the next snapshot heals it."""


class SliceQueue(Protocol):
    """The ingest queue, for what the control plane sends itself there: the slices of a
    reconciliation, and agent events that came before their workload (`EARLY_DELAYS`),
    `delay` seconds later."""

    def send_slice(self, s: ReconcileSlice, delay: float) -> None: ...

    def send_early(self, body: str, delay: float) -> None: ...


class Plane(Protocol):
    """What reconciliation needs of the control plane (`ControlPlane`)."""

    @property
    def store(self) -> WorkloadStore: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def slices(self) -> SliceQueue | None: ...
    @property
    def snapshot_cache(self) -> dict[tuple[str, str], SnapshotPart]: ...

    def handle(self, event: Event) -> list[Outcome]: ...


def fan_out(plane: Plane, snapshot: SnapshotPart) -> list[Outcome]:
    """Open the complete snapshot's slices (once) and send those not done yet."""
    store = plane.store
    keys = list(_concerned(store, snapshot))
    cut = [tuple(keys[i : i + SLICE_KEYS]) for i in range(0, len(keys), SLICE_KEYS)]
    still_open = store.open_slices(snapshot.scope, snapshot.snapshot, len(cut), plane.clock())
    work = []
    for number in still_open:
        s = ReconcileSlice(snapshot.scope, snapshot.snapshot, snapshot.revision, number, ())
        # A fan-out done again lists the store again: a slice it no longer fills is done.
        work.append(replace(s, keys=cut[number - 1]) if number <= len(cut) else s)
    if not work:
        store.set_snapshot_revision(snapshot.scope, snapshot.revision)
        return [Outcome.APPLIED]
    log.info(
        "reconciling a snapshot in slices",
        extra={"scope": snapshot.scope, "workloads": len(keys), "slices": len(work)},
    )
    if plane.slices is None:
        plane.snapshot_cache[snapshot.scope, snapshot.snapshot] = snapshot
        outcomes: list[Outcome] = []
        for s in work:
            outcomes.extend(apply_slice(plane, s, budget=None))
        return outcomes or [Outcome.APPLIED]
    for s in work:
        plane.slices.send_slice(s, 0.0)
    return [Outcome.APPLIED]


def _concerned(store: WorkloadStore, snapshot: SnapshotPart) -> Iterator[str]:
    """The known workloads the snapshot may tell something (in key order, so a fan-out
    done again cuts the same slices)."""
    keys: set[str] = set()
    for phase in Phase:
        if phase is Phase.FINISHED:
            continue
        for w in store.by_phase(phase.value):
            if snapshot.scope == POD_SCOPE or gone(w, snapshot):
                keys.add(w.key)
    if snapshot.scope == POD_SCOPE:
        # and the quota holders, among them workloads deleted while their pods ran:
        # what a snapshot no longer holds of those pods ends their holding
        keys.update(store.ledger().recent)
    yield from sorted(keys)


def apply_slice(
    plane: Plane, s: ReconcileSlice, *, budget: float | None = SLICE_SECONDS
) -> list[Outcome]:
    """Bring the slice's workloads in line with the snapshot, each on its own."""
    store = plane.store
    if s.revision <= store.snapshot_revision(s.scope):
        store.close_slice(s.scope, s.snapshot, s.slice)  # a newer snapshot was acted on
        return [Outcome.STALE]
    snapshot = _snapshot(plane, s)
    if snapshot is None:  # its parts expired: the agent's next snapshot heals
        _close(plane, s)
        return [Outcome.IGNORED]
    outcomes: list[Outcome] = []
    failed: list[str] = []
    first: Exception | None = None
    start = plane.clock()
    left: tuple[str, ...] = ()
    for index, key in enumerate(s.keys):
        if budget is not None and plane.clock() - start >= budget:
            left = s.keys[index:]
            break
        try:
            outcomes.extend(_reconcile_one(plane, key, snapshot))
        except Exception as exc:
            log.warning(
                "could not reconcile a workload; it is tried again on its own",
                extra={"workload": key, "error": f"{type(exc).__name__}: {exc}"},
            )
            failed.append(key)
            first = first or exc
    if failed and s.tries + 1 >= MAX_SLICE_TRIES:
        log.error("gave up reconciling workloads", extra={"workloads": failed, "tries": s.tries})
        failed = []
    rest = (*failed, *left)
    if rest:
        if plane.slices is None:
            assert first is not None  # without a budget only failures are left
            raise first  # the slice stays open: the snapshot's redelivery redoes it
        tries = s.tries + 1 if failed else s.tries
        plane.slices.send_slice(
            replace(s, keys=rest, tries=tries), retry_delay(tries) if failed else 0.0
        )
        return outcomes or [Outcome.APPLIED]
    _close(plane, s)
    return outcomes or [Outcome.APPLIED]


def _reconcile_one(plane: Plane, key: str, snapshot: SnapshotPart) -> list[Outcome]:
    light = plane.store.load_pod(key, None)
    if light is None:
        return []
    outcomes: list[Outcome] = []
    for event in gone(light.workload, snapshot):
        log.info(
            "from the cluster's snapshot", extra={"workload": key, "event": type(event).__name__}
        )
        outcomes.extend(plane.handle(event))
    return outcomes


def _snapshot(plane: Plane, s: ReconcileSlice) -> SnapshotPart | None:
    """The whole snapshot, read once per container for all its slices."""
    cache = plane.snapshot_cache
    found = cache.get((s.scope, s.snapshot))
    if found is None:
        found = complete(plane.store.snapshot_parts(s.scope, s.snapshot))
        if found is None:
            return None
        cache.clear()  # one snapshot at a time is enough
        cache[s.scope, s.snapshot] = found
    return found


def _close(plane: Plane, s: ReconcileSlice) -> None:
    """The slice is done; the last one records the snapshot as acted on."""
    if plane.store.close_slice(s.scope, s.snapshot, s.slice) == 0:
        plane.store.set_snapshot_revision(s.scope, s.revision)
