"""The Lambdas' admission pass, and the pass that follows a batch of the admission queue.

A pass plans on what the store shows (`muster.runtime.planning`, the core's
planner) and admits one workload per conditional transaction, then plans again.

The admission function applies the batch's requeues first (each may end a
backoff), then runs at most one pass for the whole batch: when a message asked
for one, or when applying the batch made someone admissible. A workload whose
effects fail is set aside by the pass, which goes on with the others. Should the
pass fail, or set a workload aside, another pass is queued with a backoff (5 s,
doubling, up to 15 minutes; `muster.runtime.messages.retry_delay`), never at
once: the requeues already applied are not left waiting for an unrelated
trigger, and a lasting failure does not turn into a hot loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from muster.core import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    AdmissionGranted,
    AdmissionPlan,
    Effect,
    Kind,
    Outcome,
    Phase,
    Settings,
    Workload,
    decide,
)
from muster.runtime.messages import AdmissionRequest
from muster.runtime.planning import AdmissionInputs, HoldingsReader, quota_holders, stored
from muster.runtime.ports import (
    Conflict,
    Ledger,
    Messages,
    Stored,
    WorkloadStore,
    workload_state,
)
from muster.runtime.results import EffectFailed, Quarantined, Stats, TooManyConflicts
from muster.runtime.view import with_view

log = logging.getLogger("muster.runtime")


class Plane(Protocol):
    """What a pass needs of the control plane (`muster.runtime.service.ControlPlane`)."""

    failed: dict[str, str]  # of the last pass: workload -> error

    @property
    def store(self) -> WorkloadStore: ...
    @property
    def messages(self) -> Messages: ...
    @property
    def settings(self) -> Callable[[], Settings]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def draw(self) -> Callable[[], float]: ...
    @property
    def max_conflicts(self) -> int: ...
    @property
    def stats(self) -> Stats: ...

    def settled(self, key: str) -> Stored | None: ...

    def carry_out(self, w: Workload, version: int | None, effects: Sequence[Effect]) -> None: ...

    def admission_pass(self, hints: Iterable[str] = ()) -> list[str]: ...

    def take_admission_request(self) -> tuple[bool, set[str]]: ...


@dataclass
class AdmissionRequests:
    """What the admission requests of one batch asked for, together."""

    requested: bool = False
    hints: set[str] = field(default_factory=set)  # workloads that may have become admissible
    retry: int = 0  # the most passes that failed before any of these was sent

    def add(self, request: AdmissionRequest) -> None:
        self.requested = True
        self.retry = max(self.retry, request.retry)
        if request.workload:
            self.hints.add(request.workload)


def admit_after_batch(plane: Plane, requests: AdmissionRequests) -> None:
    """One admission pass if the batch or its effects asked for one; a backoff retry if it fails."""
    wanted, named = plane.take_admission_request()
    if not (requests.requested or wanted):
        return
    retry = requests.retry + 1
    try:
        admitted = plane.admission_pass(requests.hints | named)
    except Exception:
        log.exception("admission pass failed; asking for another after a backoff")
        plane.messages.request_admission("retry after a failed pass", None, retry=retry)
    else:
        log.info("admission pass done", extra={"admitted": admitted})
        if plane.failed:
            log.warning(
                "admission pass set workloads aside; asking for another after a backoff",
                extra={"failed": plane.failed, "retry": retry},
            )
            plane.messages.request_admission("retry workloads set aside", None, retry=retry)
    plane.take_admission_request()  # the pass itself ran until nothing more fitted


class AdmissionPass:
    """Admit what may be admitted now, one workload per conditional transaction.

    Quota holders come from the phase index, with the ledger's recent
    admissions, the not-ready ones and `hints` (workloads that just changed)
    re-read consistently; candidates are the queue index plus `hints`, each
    re-read consistently. A workload is admitted only as planned: on the
    ledger's version (so two racing passes can never both admit, nor both take
    the `blockAdmission` lock) and on the version it was planned on (a
    workload that changed meanwhile is planned again).

    A workload whose effects fail is set aside for this pass (and quarantined
    after `max_effect_tries`); it never stops the others. The plane's `failed`
    names those of this pass, so the caller can ask for another pass with a backoff.
    """

    def __init__(self, plane: Plane, hints: Iterable[str] = ()) -> None:
        self.plane = plane
        self.store = plane.store
        self.admitted: list[str] = []
        self.excluded: set[str] = set()  # set aside, or not admissible after all
        self.repaired: set[str] = set()
        self.conflicts = 0
        # The index is read once per pass: admissions since are in the ledger's recent
        # entries, read consistently every round, and a workload the index still shows
        # as holding quota it has freed only makes the pass more careful.
        # So is the queue: a workload queued during the pass asks for a pass of its own.
        self.indexed = {w.key: w for w in quota_holders(self.store)}
        self.queued_keys = {w.key for w in self.store.pending()} | set(hints)
        self.holdings = HoldingsReader(self.store)

    def run(self) -> list[str]:
        plane = self.plane
        plane.failed = {}
        while self.conflicts <= plane.max_conflicts:
            settings = plane.settings()
            now = plane.clock()
            ledger = self.store.ledger()
            found = self._read(ledger)
            if found is None:
                continue  # finished what an earlier pass or event left halfway: read again
            read, held_back = found
            inputs = self._inputs(settings, read, held_back)
            plan = inputs.plan(settings, now)
            if not plan.admit:
                self._done(plan, ledger, read)
                return self.admitted
            for key, why in plan.unchecked:
                if key == plan.admit[0]:
                    log.info("admitted on quota alone", extra={"workload": key, "why": why})
            planned = next(w for w in inputs.queued if w.key == plan.admit[0])
            self._admit(planned, ledger, settings, now)
        raise TooManyConflicts("admission pass did not settle")

    def _read(self, ledger: Ledger) -> tuple[dict[str, Workload], set[str]] | None:
        """The candidates and holders to re-check, read consistently, and those held back
        this round (unfinished or quarantined); None if some had to be repaired first."""
        recheck = set(ledger.recent) | {
            k for k, w in self.indexed.items() if w.phase in NOT_READY_PHASES
        }
        unsettled: set[str] = set()
        quarantined: set[str] = set()
        keys = sorted(recheck | self.queued_keys)
        read = {w.key: w for w in self.store.get_workloads(keys, unsettled, quarantined)}
        broken = unsettled - self.repaired - quarantined - self.excluded
        if broken:
            # An earlier pass or event stopped halfway (e.g. its timer was not
            # started): finish it before planning on its state.
            for key in sorted(broken):
                self._repair(key)
            self.repaired |= unsettled
            return None
        return read, self.excluded | unsettled | quarantined

    def _inputs(
        self, settings: Settings, read: Mapping[str, Workload], held_back: set[str]
    ) -> AdmissionInputs:
        current = {**self.indexed, **read}
        active = [w for w in current.values() if w.phase in ACTIVE_PHASES]
        queued = [
            stored(self.store, w) if w.kind is Kind.POD_GROUP else w
            for k, w in read.items()
            if k in self.queued_keys and w.phase is Phase.PENDING and k not in held_back
        ]
        return self.holdings.inputs(settings, queued, active)

    def _admit(self, planned: Workload, ledger: Ledger, settings: Settings, now: float) -> None:
        """Admit `planned` if it is still as planned; else plan again (a conflict) or skip it."""
        plane, key = self.plane, planned.key
        try:
            snap = plane.settled(key)
        except (EffectFailed, Quarantined) as exc:
            self._set_aside(key, exc)
            self.excluded.add(key)
            return
        if snap is None:
            self.excluded.add(key)
            return
        if workload_state(snap.workload) != workload_state(planned):
            # It changed after it was planned (e.g. it asks for more GPUs now):
            # plan again on what is committed, never admit what was not planned.
            self.conflicts += 1
            return
        grant = AdmissionGranted(key, snap.workload.attempt + 1)
        decision = decide(snap.workload, grant, settings, now, draw=plane.draw())
        if decision.outcome is not Outcome.APPLIED or decision.workload is None:
            self.excluded.add(key)
            return
        effects = with_view(snap.workload, decision.workload, decision.effects)
        try:
            version = self.store.admit(snap, decision.workload, effects, ledger, now)
        except Conflict:
            plane.stats.conflicts += 1
            self.conflicts += 1
            return
        self.admitted.append(key)
        plane.stats.admitted.append(key)
        try:
            plane.carry_out(decision.workload, version, effects)
        except (EffectFailed, Quarantined) as exc:
            self._set_aside(key, exc)
            self.excluded.add(key)  # admitted; its effects are tried again by a later pass

    def _done(self, plan: AdmissionPlan, ledger: Ledger, read: Mapping[str, Workload]) -> None:
        """Nothing more to admit: say why, and let the ledger forget what the index shows."""
        if plan.blocked_by or plan.skipped:
            log.info(
                "admission pass admitted nothing more",
                extra={"blockedBy": plan.blocked_by, "skipped": plan.skipped},
            )
        seen = _indexed_recent(ledger, self.indexed, read)
        if seen:
            self.store.forget_recent(seen)

    def _repair(self, key: str) -> None:
        try:
            self.plane.settled(key)
        except (EffectFailed, Quarantined) as exc:
            self._set_aside(key, exc)

    def _set_aside(self, key: str, exc: EffectFailed | Quarantined) -> None:
        """One workload's failure stays its own: the pass goes on without it."""
        if isinstance(exc, EffectFailed):
            self.plane.failed[key] = exc.error
        log.warning(
            "workload set aside by the admission pass",
            extra={
                "workload": key,
                "error": exc.error,
                "quarantined": isinstance(exc, Quarantined),
            },
        )


def _indexed_recent(
    ledger: Ledger, indexed: Mapping[str, Workload], read: Mapping[str, Workload]
) -> dict[str, int]:
    """Recent admissions the phase index shows now (or that left): the ledger can forget them."""
    seen: dict[str, int] = {}
    for key, attempt in ledger.recent.items():
        shown = indexed.get(key)
        fresh = read.get(key)
        if (
            (shown is not None and shown.attempt >= attempt)
            or (
                fresh is not None and (fresh.phase not in ACTIVE_PHASES or fresh.attempt != attempt)
            )
            or (fresh is None and key not in indexed)
        ):
            seen[key] = attempt
    return seen
