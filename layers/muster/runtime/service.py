"""The control plane as a service: load a workload, ask the core, persist, act.

Every change is a conditional write (the workload item on its `version`, each pod
item on its `rev`); a lost race re-reads and decides again. The effects of a
decision are stored with the new state (the outbox) and cleared only after they
were all carried out, so a crash between two effects is repaired by whoever next
touches the workload (a retry of the same message, or any later event).

Pods live in items of their own, so pod events of a large gang neither rewrite
nor reload the whole gang. A pod event reads the workload item and its one pod,
asks the core what the pod's change is (`observe_stored_pod`), and writes the pod
together with the change of the gang's ready count (`handle_pods` does that for
many pod events of one gang at once: one read, one write). It then reads the count back,
and only when the core says the gang may have become whole (or stopped being
whole; `gang_may_have_moved`) loads the gang and lets the core decide
(`PodsCounted`). Every writer reads after its own write, so of two concurrent
"last" pods the one written second notices. Admission passes are
`muster.runtime.admission`'s.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from muster import contract
from muster.core import (
    Admit,
    Decision,
    Effect,
    Event,
    Evict,
    LogEvent,
    NodeObserved,
    Outcome,
    Phase,
    PodObserved,
    PodsCounted,
    Publish,
    Reason,
    RecordView,
    Requeue,
    RunAdmission,
    Settings,
    SnapshotPart,
    StartTimer,
    StopTimer,
    Workload,
    WorkloadFinished,
    decide,
    gang_may_have_moved,
    observe_stored_pod,
)
from muster.core.capacity import Pace, more_room, observe_node, pace_request, superseded
from muster.core.eviction import withdrawn_when_refused
from muster.core.reconcile import complete
from muster.retry import Backoff, Refused, is_transient, retry
from muster.runtime import holding
from muster.runtime.admission import AdmissionPass
from muster.runtime.commit_writes import count_deltas, pod_writes, reborn_writes
from muster.runtime.deadlines import settle_deadlines
from muster.runtime.listing import listed_entry
from muster.runtime.messages import ReconcileSlice
from muster.runtime.pod_batch import pod_events, repairs_first
from muster.runtime.ports import (
    Bus,
    ClusterActions,
    Conflict,
    Messages,
    Metrics,
    PodWrite,
    Quarantine,
    Stored,
    Timers,
    WorkloadAnnouncer,
    WorkloadGone,
    WorkloadStore,
    workload_state,
)
from muster.runtime.reconciliation import SLICE_SECONDS, SliceQueue, apply_slice, fan_out
from muster.runtime.refusals import withdraw_refused
from muster.runtime.results import (
    AdmissionWithdrawn,
    EffectFailed,
    Quarantined,
    Stats,
    TooManyConflicts,
    WorkloadNotYetKnown,
)
from muster.runtime.view import with_view
from muster.schema import clip_utf8

log = logging.getLogger("muster.runtime")


MAX_EFFECT_TRIES = 5
"""Failed tries at a workload's outbox before it is quarantined (transient failures not counted)."""

ERROR_BYTES = 1024


@dataclass(slots=True)
class ControlPlane:
    """Feeds events to the core and carries out its effects through the ports."""

    store: WorkloadStore
    timers: Timers
    messages: Messages
    bus: Bus
    metrics: Metrics
    cluster: ClusterActions
    settings: Callable[[], Settings]
    clock: Callable[[], float] = time.time
    draw: Callable[[], float] = random.random
    sleep: Callable[[float], None] = time.sleep  # between retries of a lost race
    inline_admission: bool = False  # the admission function runs passes itself
    max_conflicts: int = 25
    max_effect_tries: int = MAX_EFFECT_TRIES
    stats: Stats = field(default_factory=Stats)
    admission_wanted: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # of the last pass: workload -> error
    _admission_requested: bool = False
    _node_pace: Pace | None = None  # the admission requests sent for node reports
    slices: SliceQueue | None = None  # where reconciliation slices go (None: run at once)
    snapshot_cache: dict[tuple[str, str], SnapshotPart] = field(default_factory=dict)

    # ------------------------------------------------------------------ events

    def handle(self, event: Event | SnapshotPart) -> list[Outcome]:
        """Apply one event; a node event goes to every workload with pods on that node."""
        if isinstance(event, SnapshotPart):
            return self.reconcile(event)
        if isinstance(event, NodeObserved) and not event.workload:
            if self._node_capacity(event):
                return [Outcome.STALE]
            keys = self.store.workloads_on_node(event.node)
            if not keys:
                self._count_outcome(Outcome.IGNORED)
            return [self._handle_one(replace(event, workload=key)) for key in keys]
        return [self._handle_one(event)]

    def handle_pods(self, key: str, events: Sequence[PodObserved]) -> list[Outcome]:
        """Pod events of one workload, in order, applied together: one read, one write
        and one count for many (`muster.runtime.pod_batch`), as `handle` would one by one."""
        return pod_events(self, key, events)

    def _node_capacity(self, event: NodeObserved) -> bool:
        """Keep the node's capacity report (the newest by `seq`); with `capacityCheck`,
        a node with more room than before may let a queued gang in, so ask for a pass
        (less room lets nobody in: a busy cluster's churn asks for no passes), paced
        so that many reports share a few passes (`core.capacity.pace_request`).

        True when the node's kept report is newer than this one: its conditions are
        then stale for the node's pods too (a late NotReady must not mark them down).
        """
        entry = observe_node(None, event)
        if entry is None:
            return False
        kept, before = self.store.put_node(entry, self.clock())
        if not kept:
            self._count_outcome(Outcome.STALE, "", "NodeObserved", f"capacity of {event.node}")
            return superseded(before, entry)
        if self.settings().capacity_check and more_room(before, entry):
            if self.inline_admission:
                self._admission_requested = True
                return False
            delay, self._node_pace = pace_request(self._node_pace, self.clock())
            if delay is not None:
                self.messages.request_admission("node capacity changed", None, delay=delay)
        return False

    def _handle_one(self, event: Event) -> Outcome:
        self.stats.events += 1

        def lost_race(_try: int, _error: BaseException) -> None:
            self.stats.conflicts += 1
            log.info("write conflict, deciding again", extra={"workload": event.workload})

        try:
            return retry(
                partial(self._attempt, event),
                attempts=self.max_conflicts,
                retry_on=Conflict,
                # Concurrent writers of one gang back off with jitter instead of colliding again.
                backoff=Backoff(0.02, 1.0, jitter=self.draw),
                sleep=self.sleep,
                on_retry=lost_race,
            )
        except Quarantined as exc:
            # Applied once it is released: the agent's resync sends the state again.
            self._count_outcome(Outcome.IGNORED, event.workload, type(event).__name__, str(exc))
            return Outcome.IGNORED
        except Conflict:
            self.stats.conflicts += 1
            raise TooManyConflicts(
                f"{event.workload}: gave up after {self.max_conflicts} conflicts"
            ) from None

    def _attempt(self, event: Event) -> Outcome:
        if isinstance(event, PodObserved):
            outcome = self._pod_event(event)
            if outcome is not None:
                return outcome
        key = event.workload
        snap = self.settled(key)
        settings = self.settings()
        now = self.clock()
        before = snap.workload if snap else None
        decision = decide(before, event, settings, now, draw=self.draw())
        if decision.outcome is not Outcome.APPLIED:
            self._count_outcome(decision.outcome, key, type(event).__name__, decision.note)
            if decision.outcome is Outcome.UNKNOWN_WORKLOAD and isinstance(event, PodObserved):
                raise WorkloadNotYetKnown(f"pod {event.pod} of unknown workload {key}")
            return decision.outcome
        self._count_outcome(Outcome.APPLIED)
        self._commit(snap, decision, settings, now)
        return Outcome.APPLIED

    def _commit(
        self, snap: Stored | None, decision: Decision, settings: Settings, now: float
    ) -> None:
        """Write what the core decided (only what changed), then carry out its effects."""
        before = snap.workload if snap else None
        after = decision.workload
        assert after is not None
        # A new object under the key: its pods are its own (the store keeps pods per
        # incarnation), and the old incarnation's pods expire. An eviction retires the
        # attempt's pods by the epoch instead of rewriting each.
        reborn = decision.reborn
        epoch = (snap.epoch + 1 if decision.new_epoch else snap.epoch) if snap else 0
        writes = (
            reborn_writes(snap, after) if reborn else pod_writes(snap, after, decision.withdrawn)
        )
        ready_delta, live_delta = count_deltas(snap, after, writes, decision.new_epoch)
        effects = holding.announce_release(snap, after, _with_view(before, decision))
        changed = workload_state(before) != workload_state(after)
        if not (snap is None or writes or changed or _needs_outbox(effects)):
            self.carry_out(after, None, effects)
            return
        ended = before is not None and before.phase is not Phase.FINISHED
        # Everything a finished incarnation owns expires with it: recorded in the
        # write that ends it, carried out in chunks, resumed by whoever comes next
        # should this invocation end halfway.
        expiring = snap is not None and (reborn or (ended and after.phase is Phase.FINISHED))
        holding.holding_starts(self.store, snap, after, effects)
        version = self.store.write_workload(
            snap,
            after,
            epoch,
            effects,
            now,
            pods=writes,
            ready_delta=ready_delta,
            live_delta=live_delta,
            expiring=expiring,
        )
        if expiring:
            self.store.expire_leftover_pods(after.key)
        self.carry_out(after, version, effects)
        if writes or (before is not None and before.phase is not after.phase):
            self._check_readiness(after.key, settings, now)

    def _pod_event(self, event: PodObserved) -> Outcome | None:
        """A pod event without loading the gang: one pod written, the counts moved.

        Returns None when the full path is needed (the core asks for the whole gang, or
        the outbox is to be carried out first: `muster.runtime.pod_batch.repairs_first`).
        """
        key = event.workload
        light = self.store.load_pod(key, event.pod)
        if light is None:
            self._count_outcome(Outcome.UNKNOWN_WORKLOAD, key, "PodObserved")
            raise WorkloadNotYetKnown(f"pod {event.pod} of unknown workload {key}")
        if repairs_first(light.outbox, light.failures):
            return None  # the full path carries the outbox out first
        w = light.workload
        settings = self.settings()
        counts_live = light.live_count is not None
        change = observe_stored_pod(
            w, light.pod, event, settings, counts_live=counts_live, live_count=light.live_count or 0
        )
        if change.whole_gang:
            return None
        if change.outcome is not Outcome.APPLIED:
            self._count_outcome(change.outcome, key, "PodObserved", change.note)
            if change.recount:
                self._check_readiness(key, settings, self.clock())
            return change.outcome
        now = self.clock()
        write = PodWrite(event.pod, change.pod, light.rev, w.uid, listed_entry(w, event.pod))
        live_delta = change.live_delta if counts_live else 0
        if w.phase is Phase.FINISHED:
            holding.outliving_starts(self.store, w, [(light.pod, change.pod)])
        self.store.write_pod(
            key, write, light.epoch, change.ready_delta, now, live_delta=live_delta
        )
        if w.phase is Phase.FINISHED:
            self.store.expire_pods(key, [event.pod], now)  # a late pod of a finished workload
            if holding.outliving_ended(w, [(light.pod, change.pod)]):
                self.carry_out(w, None, (RunAdmission(holding.OUTLIVING_ENDED),))
        self._count_outcome(Outcome.APPLIED)
        if change.recount:
            self._check_readiness(
                key, settings, self.clock(), faults=change.faults, grew=live_delta > 0
            )
        return Outcome.APPLIED

    def _check_readiness(
        self, key: str, settings: Settings, now: float, *, faults: bool = False, grew: bool = False
    ) -> None:
        """After a write, read the counts back; load the gang only if it may have changed state.

        Every writer reads after its own write, so of two concurrent "last" pods
        the one written second sees the gang whole. `grew`: the write added live pods.
        """
        light = self.store.load_pod(key, None)
        if light is None:
            return
        live = light.live_count if grew else None
        if gang_may_have_moved(light.workload, light.ready_count, faults=faults, live_count=live):
            snap = self.settled(key)
            if snap is not None:
                self._rederive(snap, settings, now)

    def _rederive(self, snap: Stored, settings: Settings, now: float) -> None:
        current: Stored | None = snap
        for _ in range(self.max_conflicts):
            if current is None:
                return
            key = current.workload.key
            decision = decide(current.workload, PodsCounted(key), settings, now)
            if decision.outcome is not Outcome.APPLIED or decision.workload is None:
                return
            effects = with_view(current.workload, decision.workload, decision.effects)
            try:
                version = self.store.write_workload(
                    current, decision.workload, current.epoch, effects, now
                )
            except Conflict:
                self.stats.conflicts += 1
                current = self.settled(current.workload.key)
                continue
            log.info(
                "readiness re-derived after a pod write",
                extra={"workload": current.workload.key, "phase": decision.workload.phase.value},
            )
            self.carry_out(decision.workload, version, effects)
            # A pod written meanwhile does not move the workload's version: read the
            # count back after this write too, as every other writer does.
            self._check_readiness(current.workload.key, settings, now)
            return
        raise TooManyConflicts(f"{snap.workload.key}: gave up re-deriving readiness")

    def settled(self, key: str) -> Stored | None:
        """The workload with no effects left over from an interrupted decision.

        Raises `Quarantined` for a quarantined workload, and `EffectFailed` when
        the left-over effects fail again.
        """
        snap = self.store.load(key)
        if snap is not None and snap.expiring:
            # An incarnation's end was committed, its pods' expiry not finished.
            self.store.expire_leftover_pods(key)
        if snap is not None and snap.quarantine is not None:
            raise Quarantined(key, snap.quarantine.error)
        if snap is not None and snap.outbox:
            log.warning(
                "carrying out effects left by an interrupted decision",
                extra={"workload": key, "effects": [type(e).__name__ for e in snap.outbox]},
            )
            self.carry_out(snap.workload, snap.version, snap.outbox)
            snap = self.store.load(key)
        return snap

    # ------------------------------------------------------------------ reconciliation

    def reconcile(self, part: SnapshotPart) -> list[Outcome]:
        """Keep a part of a cluster snapshot; once the snapshot is complete, act on it.

        What a complete snapshot lacks is gone: each known workload (of the listed
        kind) or pod it does not show becomes a deletion at the snapshot's revision,
        applied like any other event, so whatever changed after the snapshot stays.
        The work goes out in bounded slices (`muster.runtime.reconciliation`). A
        partial snapshot, or one not newer than the last acted on, changes nothing.
        """
        parts = self.store.put_snapshot_part(part, self.clock())
        snapshot = complete(parts or ())
        if snapshot is None:
            return [Outcome.IGNORED]
        if snapshot.revision <= self.store.snapshot_revision(snapshot.scope):
            self._count_outcome(Outcome.STALE, "", "SnapshotPart", "an older snapshot")
            return [Outcome.STALE]
        return fan_out(self, snapshot)

    def reconcile_slice(self, s: ReconcileSlice, *, until: float | None = None) -> list[Outcome]:
        """One slice of a snapshot's reconciliation (a message of the ingest queue);
        what it cannot finish by `until` (or within its own budget) it sends on."""
        budget = SLICE_SECONDS if until is None else min(SLICE_SECONDS, until - self.clock())
        outcomes = apply_slice(self, s, budget=max(0.0, budget))
        if outcomes == [Outcome.STALE]:
            self._count_outcome(
                Outcome.STALE, "", "ReconcileSlice", "a newer snapshot was acted on"
            )
        return outcomes

    # ------------------------------------------------------------------ admission

    def admission_pass(self, hints: Iterable[str] = (), *, until: float | None = None) -> list[str]:
        """Admit what may be admitted now (`muster.runtime.admission.AdmissionPass`).

        `hints` are workloads that just changed; `failed` names those the pass
        set aside, so the caller can ask for another pass with a backoff; `until`:
        when to stop admitting and ask for another pass.
        """
        return AdmissionPass(self, hints, until).run()

    def take_admission_request(self) -> tuple[bool, set[str]]:
        """(was a pass asked for, the workloads named) since the last call."""
        wanted, hints = self._admission_requested, set(self.admission_wanted)
        self._admission_requested = False
        self.admission_wanted.clear()
        return wanted, hints

    # ------------------------------------------------------------------ effects

    def carry_out(self, w: Workload, version: int | None, effects: Sequence[Effect]) -> None:
        """The effects in order; a failure stops them, is counted on the outbox, and raises
        `EffectFailed` (or `Quarantined` at the last allowed try).

        Muster's view goes onto the workload only when a decision changed it (its
        `RecordView` effect, see `muster.runtime.view`), so a pod event that moves
        nothing visible costs no Kubernetes call, whatever the gang's size.
        """
        gone = False
        for index, effect in enumerate(effects):
            if gone and isinstance(effect, RecordView):
                continue  # nothing left to annotate
            try:
                self._do(w, version or 0, index, effect)
            except WorkloadGone:
                # Withdrawn by nobody: its pods may run on (orphaned, or terminating),
                # so the holding ends once they are heard gone, as a deleted workload's.
                gone = True
                continue
            except Exception as exc:
                if version is None:
                    raise
                admit = effect if isinstance(effect, Admit) and _releases(w, effect) else None
                self._effect_failed(w.key, version, type(effect).__name__, exc, admit=admit)
            if isinstance(effect, Evict) and version is not None:
                holding.withdrawal_done(self.store, w, effect)
        if version is not None and effects:
            # On a conflict a later decision was committed; its writer carries on.
            with contextlib.suppress(Conflict):
                self.store.clear_outbox(w.key, version)
        if gone and w.phase is not Phase.FINISHED:
            log.info("workload deleted from the cluster", extra={"workload": w.key})
            # This incarnation is gone; should a newer one be known by now, it stays.
            self._handle_one(WorkloadFinished(w.key, Reason.DELETED, uid=w.uid))

    def _effect_failed(
        self, key: str, version: int, effect: str, exc: Exception, *, admit: Admit | None = None
    ) -> None:
        error = clip_utf8(f"{effect}: {type(exc).__name__}: {exc}", ERROR_BYTES)
        self.metrics.count(contract.METRIC_EFFECT_FAILURES, effect=effect)
        if is_transient(exc):
            log.warning("effect failed; will retry", extra={"workload": key, "error": error})
            raise EffectFailed(key, error) from exc
        try:
            tries = self.store.record_failure(key, version, error)
        except Conflict:
            # A later decision was committed meanwhile; its writer carries on.
            raise EffectFailed(key, error) from exc
        log.warning("effect failed", extra={"workload": key, "error": error, "tries": tries})
        if tries < self.max_effect_tries:
            raise EffectFailed(key, error) from exc
        if admit is not None and isinstance(exc, Refused):
            if not withdraw_refused(self, key, version, admit, error):
                raise EffectFailed(key, error) from exc  # a later decision carries on
            raise AdmissionWithdrawn(key, error) from exc
        quarantine = Quarantine(error, effect, tries, self.clock())
        with contextlib.suppress(Conflict):
            self.store.quarantine(key, version, quarantine)
        self.metrics.count(contract.METRIC_QUARANTINES, effect=effect)
        log.error(
            "workload quarantined: its effects keep failing; release it once the cause is fixed",
            extra={"workload": key, "error": error, "tries": tries},
        )
        raise Quarantined(key, error) from exc

    def settle_deadlines(self) -> list[str]:
        """Act on the deadlines the settings now in force brought back (`settle_deadlines`)."""
        return settle_deadlines(self)

    def _do(self, w: Workload, version: int, index: int, effect: Effect) -> None:
        match effect:
            case Admit():
                self.cluster.admit(effect)
            case Evict():
                self.cluster.evict(effect)
            case StartTimer():
                self.timers.start(effect.workload, effect.timer)
            case StopTimer():
                self.timers.stop(effect.workload, effect.timer)
            case Requeue():
                self.messages.requeue(effect.workload, effect.count, effect.delay)
            case Publish():
                self._publish(effect, version, index)
                self._announce(w, effect, version, index)
            case RecordView():
                holding.record_view(self.cluster, self.metrics, w)
            case RunAdmission():
                if self.inline_admission:
                    self._admission_requested = True
                    self.admission_wanted.add(w.key)
                else:
                    self.messages.request_admission(effect.reason, w.key)

    def _publish(self, effect: Publish, version: int, index: int) -> None:
        now = self.clock()
        detail = dict(effect.detail)
        self.store.append_history(effect.workload, version, index, effect.event, detail, now)
        self.bus.publish(
            effect.event, effect.workload, detail, f"{effect.workload}/{version}/{index}", now
        )
        log.info(
            f"workload {effect.event.value}",
            extra={"workload": effect.workload, "event": effect.event.value, "detail": detail},
        )
        match effect.event:
            case LogEvent.ADMITTED:
                self.metrics.count(contract.METRIC_ADMISSIONS)
            case LogEvent.EVICTED if not detail.get("dryRun"):
                self.metrics.count(
                    contract.METRIC_EVICTIONS,
                    reason=str(detail.get("reason")),
                    cause=str(detail.get("cause") or "None"),
                )
            case LogEvent.REQUEUED:
                self.metrics.count(contract.METRIC_REQUEUES)
            case LogEvent.DEACTIVATED:
                self.metrics.count(contract.METRIC_DEACTIVATIONS)
            case LogEvent.PODS_READY:
                self.metrics.count(contract.METRIC_PODS_READY)
                if "secondsSinceAdmission" in detail:
                    self.metrics.seconds(
                        contract.METRIC_ADMITTED_TO_READY, detail["secondsSinceAdmission"]
                    )

    def _announce(self, w: Workload, effect: Publish, version: int, index: int) -> None:
        """The lifecycle event on the workload in the cluster too; never blocks the decision."""
        if not isinstance(self.cluster, WorkloadAnnouncer):
            return
        try:
            self.cluster.announce(
                effect.workload,
                w.kind,
                effect.event,
                effect.detail,
                key=f"{effect.workload}/{version}/{index}",
                at=self.clock(),
            )
        except Exception as exc:  # best effort: the record and the bus have it already
            self.metrics.count(contract.METRIC_ANNOUNCE_FAILURES)
            log.warning(
                "could not record a Kubernetes Event",
                extra={"workload": effect.workload, "event": effect.event.value, "error": str(exc)},
            )

    def _count_outcome(
        self, outcome: Outcome, workload: str = "", event: str = "", note: str = ""
    ) -> None:
        self.stats.outcomes[outcome.value] = self.stats.outcomes.get(outcome.value, 0) + 1
        if outcome is not Outcome.APPLIED:
            self.metrics.count(contract.METRIC_IGNORED_EVENTS, outcome=outcome.value)
            log.info(
                f"event {outcome.value}",
                extra={"workload": workload, "eventType": event, "note": note},
            )


def _with_view(before: Workload | None, decision: Decision) -> tuple[Effect, ...]:
    """The decision's effects with its view, if changed (a new object carries none yet)."""
    assert decision.workload is not None
    return with_view(None if decision.reborn else before, decision.workload, decision.effects)


def _releases(w: Workload, effect: Admit) -> bool:
    """Whether `effect` is a release the core withdraws the attempt for when refused."""
    return withdrawn_when_refused(w, effect.attempt)


def _needs_outbox(effects: Sequence[Effect]) -> bool:
    return any(not isinstance(e, RunAdmission) for e in effects)
