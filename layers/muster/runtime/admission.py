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

from muster import contract
from muster.core import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    AdmissionGranted,
    AdmissionPlan,
    AdmissionQueue,
    Effect,
    Kind,
    Outcome,
    Phase,
    Settings,
    Workload,
    decide,
)
from muster.runtime.messages import SETTINGS_CHANGED, AdmissionRequest
from muster.runtime.planning import HoldingsReader, indexed_holders, still_holding, stored
from muster.runtime.ports import (
    Conflict,
    Ledger,
    Messages,
    Metrics,
    Stored,
    WorkloadStore,
    workload_state,
)
from muster.runtime.results import (
    AdmissionWithdrawn,
    EffectFailed,
    Quarantined,
    Stats,
    TooManyConflicts,
)
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
    def metrics(self) -> Metrics: ...
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

    def admission_pass(
        self, hints: Iterable[str] = (), *, until: float | None = None
    ) -> list[str]: ...

    def take_admission_request(self) -> tuple[bool, set[str]]: ...

    def settle_deadlines(self) -> list[str]: ...


@dataclass
class AdmissionRequests:
    """What the admission requests of one batch asked for, together."""

    requested: bool = False
    hints: set[str] = field(default_factory=set)  # workloads that may have become admissible
    retry: int = 0  # the most passes that failed before any of these was sent
    settings_changed: bool = False  # an administrator changed the settings

    def add(self, request: AdmissionRequest) -> None:
        self.requested = True
        self.settings_changed = self.settings_changed or request.reason == SETTINGS_CHANGED
        self.retry = max(self.retry, request.retry)
        if request.workload:
            self.hints.add(request.workload)


def admit_after_batch(
    plane: Plane, requests: AdmissionRequests, *, until: float | None = None
) -> None:
    """One admission pass if the batch or its effects asked for one; a backoff retry if it
    fails. `until`: when the pass must stop admitting (it asks for another pass then)."""
    wanted, named = plane.take_admission_request()
    if not (requests.requested or wanted):
        return
    retry = requests.retry + 1
    if requests.settings_changed:
        # Deadlines the change brought back (`dryRun` off): acted on now; whatever
        # this misses, the sweeper sends again (`muster.runtime.deadlines`).
        try:
            plane.settle_deadlines()
        except Exception:
            log.exception("could not act on the deadlines of the new settings; the sweeper will")
    try:
        admitted = plane.admission_pass(requests.hints | named, until=until)
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

    The pass reads the queue and the quota holders once (the indexes, then every
    candidate, recent admission and not-ready holder consistently) and keeps that
    view up to date itself: what it admits it knows, and each later round reads
    only the ledger and the admissions other passes made meanwhile. So admitting
    `n` of `q` queued workloads reads O(q + n) items, not O(q * n). The queue is
    the core's `AdmissionQueue`, kept across rounds.

    A workload is admitted only as planned: on the ledger's version (so two
    racing passes can never both admit, nor both take the `blockAdmission` lock)
    and on the version it was planned on: the chosen one is read consistently
    before it is admitted, and one that changed meanwhile is planned again on
    what is committed. A workload the view still shows holding quota it has
    freed only makes the pass more careful.

    A workload whose effects fail is set aside for this pass (and quarantined
    after `max_effect_tries`); it never stops the others. The plane's `failed`
    names those of this pass, so the caller can ask for another pass with a backoff.

    A pass given `until` (its invocation's end, less a reserve) admits nothing
    after it and asks for another pass for the rest: a pass that could admit
    hundreds ends inside its function's timeout instead of being stopped halfway
    through an admission's effects.
    """

    def __init__(self, plane: Plane, hints: Iterable[str] = (), until: float | None = None) -> None:
        self.plane = plane
        self.until = until
        self.store = plane.store
        self.admitted: list[str] = []
        self.excluded: set[str] = set()  # set aside, or not admissible after all
        self.repaired: set[str] = set()
        self.conflicts = 0
        # The indexes are read once per pass: admissions since are in the ledger's
        # recent entries, and a workload queued during the pass asks for a pass of its own.
        self.indexed = {w.key: w for w in indexed_holders(self.store)}
        self.queued_keys = {w.key for w in self.store.pending()} | set(hints)
        self.holdings = HoldingsReader(self.store)
        self.fresh: dict[str, Workload] = {}  # read consistently (or written) by this pass
        # Out of the admitted phases but holding quota still (`core.admission.holds_quota`).
        self.held: dict[str, Workload] = {}
        self.recent: dict[str, int] = {}  # ledger entries already reflected in `fresh`
        self.unread = self._first_read()
        self.gone: set[str] = set()  # read consistently and not found
        self.ledger: Ledger | None = None  # as last read, with this pass's own admissions
        self.queue: AdmissionQueue | None = None
        self.settings: Settings | None = None

    def run(self) -> list[str]:
        plane = self.plane
        plane.failed = {}
        while self.conflicts <= plane.max_conflicts:
            settings = plane.settings()
            now = plane.clock()
            ledger = self._ledger()
            if not self._catch_up(ledger):
                continue  # finished what an earlier pass or event left halfway: read again
            queue = self._queue(settings)
            inputs = self.holdings.inputs(settings, (), [*self._active(), *self.held.values()])
            plan = inputs.plan_queue(queue, settings, now)
            if plan.failed:
                self._unplannable(plan)
                continue
            if not plan.admit:
                self._done(inputs.plan_queue(queue, settings, now, explain=True), ledger)
                return self.admitted
            if self.until is not None and now >= self.until:
                log.warning(
                    "admission pass out of time; asking for another",
                    extra={"admitted": len(self.admitted)},
                )
                plane.messages.request_admission("admission pass out of time", None)
                return self.admitted
            for key, why in plan.unchecked:
                if key == plan.admit[0]:
                    log.info("admitted on quota alone", extra={"workload": key, "why": why})
            first = plan.admit[0]
            self._admit(self.fresh[first], ledger, settings, now, plan.domain_of(first))
        raise TooManyConflicts("admission pass did not settle")

    def _catch_up(self, ledger: Ledger) -> bool:
        """Read what the view lacks or may have missed: at first every candidate and
        holder to re-check, then only the admissions other passes made meanwhile (and
        what was repaired). False if some had to be repaired first."""
        keys = self.unread | {
            k for k, attempt in ledger.recent.items() if self.recent.get(k) != attempt
        }
        self.unread = set()
        if not keys:
            return True
        unsettled: set[str] = set()
        quarantined: set[str] = set()
        read = {w.key: w for w in self.store.get_workloads(sorted(keys), unsettled, quarantined)}
        for key in keys:
            self._learn(key, read.get(key))
            if key in ledger.recent:
                self.recent[key] = ledger.recent[key]
        self._still_held(ledger, [read[k] for k in sorted(keys) if k in read])
        for key in quarantined | (unsettled & self.repaired):
            self._exclude(key)  # held back: quarantined, or still unfinished once repaired
        broken = unsettled - self.repaired - quarantined - self.excluded
        if not broken:
            return True
        # An earlier pass or event stopped halfway (e.g. its timer was not started):
        # finish it, then read it again before planning on its state.
        for key in sorted(broken):
            self._repair(key)
            self.recent.pop(key, None)
        self.repaired |= broken
        self.unread = broken
        return False

    def _still_held(self, ledger: Ledger, read: list[Workload]) -> None:
        """Of workloads just read, those the ledger names that left the admitted phases
        and hold quota all the same (an eviction not carried out, pods outliving a
        deletion): read whole once, and charged for the rest of the pass."""
        for w in read:
            self.held.pop(w.key, None)
        left = [w for w in read if w.phase not in ACTIVE_PHASES]
        for w in still_holding(self.store, ledger.recent, left):
            self.held[w.key] = w

    def _unplannable(self, plan: AdmissionPlan) -> None:
        """Candidates the planner could not judge: set aside for this pass, each with its
        error, so that every other is planned as if it were not queued."""
        for key, error in plan.failed:
            self.plane.metrics.count(contract.METRIC_PLANNING_FAILURES)
            log.error(
                "the admission planner could not judge a workload; passed over",
                extra={"workload": key, "error": error},
            )
            self._exclude(key)

    def _ledger(self) -> Ledger:
        """The ledger: its entries read again only when someone else moved its version
        (every admission does), so a pass's rounds cost one small read each."""
        known = self.ledger
        if known is None or self.store.ledger_version() != known.version:
            self.ledger = self.store.ledger()
        assert self.ledger is not None
        return self.ledger

    def _first_read(self) -> set[str]:
        """Every candidate, and the holders whose quota may have been freed."""
        return self.queued_keys | {
            k for k, w in self.indexed.items() if w.phase in NOT_READY_PHASES
        }

    def _learn(self, key: str, w: Workload | None) -> None:
        """The view of `key` is now `w` (None: it is gone)."""
        if w is None:
            self.fresh.pop(key, None)
            self.gone.add(key)
        else:
            self.fresh[key] = w
        if self.queue is not None:
            self._requeue(key)

    def _requeue(self, key: str) -> None:
        assert self.queue is not None
        w = self.fresh.get(key)
        if w is None or key in self.excluded or key not in self.queued_keys:
            self.queue.discard(key)
        elif w.phase is Phase.PENDING:
            self.queue.add(stored(self.store, w) if w.kind is Kind.POD_GROUP else w)
        else:
            self.queue.discard(key)

    def _queue(self, settings: Settings) -> AdmissionQueue:
        """The queue of candidates, built once and re-ordered if the settings change."""
        if self.queue is None:
            self.queue = AdmissionQueue(settings)
            self.settings = settings
            for key in sorted(self.queued_keys):
                self._requeue(key)
        elif settings != self.settings:
            self.settings = settings
            self.queue.reorder(settings)
        return self.queue

    def _active(self) -> list[Workload]:
        current = {**self.indexed, **self.fresh}
        return [w for w in current.values() if w.phase in ACTIVE_PHASES]

    def _exclude(self, key: str) -> None:
        self.excluded.add(key)
        if self.queue is not None:
            self.queue.discard(key)

    def _admit(
        self, planned: Workload, ledger: Ledger, settings: Settings, now: float, domain: str = ""
    ) -> None:
        """Admit `planned` if it is still as planned; else plan again (a conflict) or skip it."""
        plane, key = self.plane, planned.key
        try:
            snap = plane.settled(key)
        except (EffectFailed, Quarantined) as exc:
            self._set_aside(key, exc)
            self._exclude(key)
            return
        if snap is None:
            self._learn(key, None)
            self._exclude(key)
            return
        if workload_state(snap.workload) != workload_state(planned):
            # It changed after it was planned (e.g. it asks for more GPUs now):
            # plan again on what is committed, never admit what was not planned.
            self.conflicts += 1
            self._learn(key, workload_state(snap.workload))
            return
        grant = AdmissionGranted(key, snap.workload.attempt + 1, domain)
        decision = decide(snap.workload, grant, settings, now, draw=plane.draw())
        if decision.outcome is not Outcome.APPLIED or decision.workload is None:
            self._exclude(key)
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
        self.recent[key] = decision.workload.attempt
        self.ledger = Ledger(ledger.version + 1, {**ledger.recent, key: decision.workload.attempt})
        self._learn(key, workload_state(decision.workload))
        try:
            plane.carry_out(decision.workload, version, effects)
        except AdmissionWithdrawn as exc:
            # Refused by the cluster for good and withdrawn: it holds nothing now, and
            # waits out its own backoff. Read it again before planning the rest.
            self._set_aside(key, exc)
            self._exclude(key)
            self.unread.add(key)
        except (EffectFailed, Quarantined) as exc:
            self._set_aside(key, exc)
            self.excluded.add(key)  # admitted; its effects are tried again by a later pass

    def _done(self, plan: AdmissionPlan, ledger: Ledger) -> None:
        """Nothing more to admit: say why, and drop entries of workloads read as no
        longer holding quota (left by a write that did not remove its entry)."""
        if plan.blocked_by or plan.skipped:
            log.info(
                "admission pass admitted nothing more",
                extra={"blockedBy": plan.blocked_by, "skipped": plan.skipped},
            )
        stale = _stale_entries(ledger, self.fresh, self.gone, self.held)
        if stale:
            self.store.forget_recent(stale)

    def _repair(self, key: str) -> None:
        try:
            self.plane.settled(key)
        except (EffectFailed, Quarantined) as exc:
            self._set_aside(key, exc)

    def _set_aside(self, key: str, exc: EffectFailed | Quarantined) -> None:
        """One workload's failure stays its own: the pass goes on without it."""
        if isinstance(exc, EffectFailed) and not isinstance(exc, AdmissionWithdrawn):
            self.plane.failed[key] = exc.error
        log.warning(
            "workload set aside by the admission pass",
            extra={
                "workload": key,
                "error": exc.error,
                "quarantined": isinstance(exc, Quarantined),
            },
        )


def _stale_entries(
    ledger: Ledger, fresh: Mapping[str, Workload], gone: set[str], held: Mapping[str, Workload]
) -> dict[str, int]:
    """Entries whose workloads, read consistently, no longer hold that attempt."""
    stale: dict[str, int] = {}
    for key, attempt in ledger.recent.items():
        if key in held:
            continue  # out of the admitted phases, holding all the same
        w = fresh.get(key)
        if key in gone or (
            w is not None and (w.phase not in ACTIVE_PHASES or w.attempt != attempt)
        ):
            stale[key] = attempt
    return stale
