"""Pod events of one gang applied together: one read, one write, one count for many.

A burst of a large gang's pod events, handled one at a time, is a write per event,
and every writer of the gang meets the others on its workload item. Here a run of
them reads the workload item and the named pods once (`load_pods`), lets the core
fold the events in order (`observe_stored_pods`), writes every changed pod with
the summed change of the ready count in one transaction (`write_pods`), and reads
the count back once. The core ends a run where one-by-one handling could have
moved the gang, so the gang goes through the same transitions. A lost race reads
and folds the run again. An event the light path cannot take (the core asks for
the whole gang) goes the one-event way (`ControlPlane.handle`), as does every
later one. A workload's unfinished outbox is carried out first by the one-event
way (any event repairs what a failed or crashed effect left), except a pod group's
release that has not failed: it takes seconds at scale (one ungate a pod), pod
records do not depend on it, and every batch meeting it would release the group
again; counting the gang whole loads it settled, which carries it out, and the
sweeper repairs one a crash left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from muster.core import (
    Admit,
    Effect,
    Event,
    Kind,
    Outcome,
    Phase,
    Pod,
    PodObserved,
    RunAdmission,
    Settings,
    Workload,
)
from muster.core.pod_runs import observe_stored_pods
from muster.retry import Backoff, retry
from muster.runtime.holding import OUTLIVING_ENDED, outliving_ended, outliving_starts
from muster.runtime.listing import listed_entry
from muster.runtime.ports import MAX_POD_WRITES, Conflict, PodWrite, StoredPods, WorkloadStore
from muster.runtime.results import Quarantined, Stats, TooManyConflicts, WorkloadNotYetKnown

log = logging.getLogger("muster.runtime")


class Plane(Protocol):
    """What a run needs of the control plane (`muster.runtime.service.ControlPlane`)."""

    @property
    def store(self) -> WorkloadStore: ...
    @property
    def settings(self) -> Callable[[], Settings]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def draw(self) -> Callable[[], float]: ...
    @property
    def sleep(self) -> Callable[[float], None]: ...
    @property
    def max_conflicts(self) -> int: ...
    @property
    def stats(self) -> Stats: ...

    def _handle_one(self, event: Event) -> Outcome: ...

    def _check_readiness(
        self, key: str, settings: Settings, now: float, *, faults: bool = False, grew: bool = False
    ) -> None: ...

    def carry_out(self, w: Workload, version: int | None, effects: Sequence[Effect]) -> None: ...

    def _count_outcome(
        self, outcome: Outcome, workload: str = "", event: str = "", note: str = ""
    ) -> None: ...


def pod_events(plane: Plane, key: str, events: Sequence[PodObserved]) -> list[Outcome]:
    """Every event of workload `key` applied in order; one outcome per event."""
    assert all(e.workload == key for e in events)
    outcomes: list[Outcome] = []
    rest = list(events)
    while rest:
        taken = _run_with_retries(plane, key, rest)
        if taken is None:  # the whole gang, for this event and every later one
            outcomes.extend(plane._handle_one(e) for e in rest)
            break
        if not taken:  # an outbox first: the one-event way carries it out
            taken = [plane._handle_one(rest[0])]
        outcomes.extend(taken)
        rest = rest[len(taken) :]
    return outcomes


def repairs_first(outbox: Sequence[Effect], failures: int) -> bool:
    """Whether a pod event carries out its workload's unfinished outbox before it is
    applied (see the module): always, but for a pod group's release still under way."""
    if not outbox:
        return False
    releasing = any(isinstance(e, Admit) and e.kind is Kind.POD_GROUP for e in outbox)
    return failures > 0 or not releasing


def _run_with_retries(plane: Plane, key: str, events: list[PodObserved]) -> list[Outcome] | None:
    def lost_race(_try: int, _error: BaseException) -> None:
        plane.stats.conflicts += 1
        log.info("write conflict, applying the pod events again", extra={"workload": key})

    try:
        return retry(
            partial(_run, plane, key, events),
            attempts=plane.max_conflicts,
            retry_on=Conflict,
            backoff=Backoff(0.02, 1.0, jitter=plane.draw),
            sleep=plane.sleep,
            on_retry=lost_race,
        )
    except Conflict:
        plane.stats.conflicts += 1
        raise TooManyConflicts(f"{key}: gave up after {plane.max_conflicts} conflicts") from None


def _run(plane: Plane, key: str, events: list[PodObserved]) -> list[Outcome] | None:
    """The outcomes of the events taken ([]: none), None for the whole gang."""
    names = list(dict.fromkeys(e.pod for e in events))
    light = plane.store.load_pods(key, names)
    if light is None:
        plane.stats.events += len(events)
        for _ in events:
            plane._count_outcome(Outcome.UNKNOWN_WORKLOAD, key, "PodObserved")
        raise WorkloadNotYetKnown(f"pods {', '.join(names[:3])}... of unknown workload {key}")
    if repairs_first(light.outbox, light.failures):
        return []  # the one-event way carries the outbox out first
    settings = plane.settings()
    w = light.workload
    run = observe_stored_pods(
        w,
        light.pods,
        light.ready_count,
        events,
        settings,
        limit=MAX_POD_WRITES,
        live_count=light.live_count,
    )
    if not run.taken:
        return None if run.whole_gang else []
    now = plane.clock()
    writes = [_write(light, name, pod) for name, pod in run.pods.items()]
    live_delta = run.live_delta if light.live_count is not None else 0
    if writes:
        if w.phase is Phase.FINISHED:
            outliving_starts(plane.store, w, [(light.pods.get(n), p) for n, p in run.pods.items()])
        plane.store.write_pods(
            key, writes, light.epoch, run.ready_delta, now, live_delta=live_delta
        )
        if w.phase is Phase.FINISHED:
            plane.store.expire_pods(key, list(run.pods), now)  # late pods of a finished workload
            if outliving_ended(w, [(light.pods.get(n), p) for n, p in run.pods.items()]):
                plane.carry_out(w, None, (RunAdmission(OUTLIVING_ENDED),))
    plane.stats.events += run.taken
    for change in run.changes:
        plane._count_outcome(change.outcome, key, "PodObserved", change.note)
    if run.recount:
        try:
            plane._check_readiness(
                key, settings, plane.clock(), faults=run.faults, grew=live_delta > 0
            )
        except Quarantined as exc:
            # Applied once it is released: the agent's resync sends the state again.
            plane._count_outcome(Outcome.IGNORED, key, "PodObserved", str(exc))
    return [change.outcome for change in run.changes]


def _write(light: StoredPods, name: str, pod: Pod | None) -> PodWrite:
    w = light.workload
    return PodWrite(name, pod, light.revs.get(name), w.uid, listed_entry(w, name))
