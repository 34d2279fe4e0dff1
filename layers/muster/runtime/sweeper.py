"""The sweeper: nothing waits forever on a message that was lost.

Every message that moves a workload on can be lost (a requeue or an admission
request that reached its DLQ, a timer execution that never started, a crash
between two effects). Run on a schedule, the sweeper reads the phase index (not
the whole table) and sends again whatever should already have arrived:

- a Requeued workload whose `requeueAt` passed: its requeue message;
- an Admitted or Recovering workload whose deadline (or `workloadFaults.evictAfter`)
  passed: its timer's signal;
- an Admitted or Recovering workload without a readiness timer whose settings now
  want one (`dryRun` turned off, `recoveryTimeout` positive again): the signal of
  the deadline it is owed (`muster.runtime.deadlines`), at once, so a lost
  "settings changed" request is healed within a sweep;
- Pending workloads of which the admission planner would admit one now: a pass
  (judged on quota first, which reads nothing more; with `capacityCheck`, the fit
  on the nodes, which reads every quota holder's pods, at most every
  `FIT_CHECK_SECONDS` of a warm sweeper);
- a workload with effects left over from an interrupted decision: a pass that
  names it, which carries them out first;
- a finished (or replaced) incarnation whose pods were not all set to expire
  (the invocation that ended it stopped halfway): the rest of that expiry, done
  here, at most `MAX_EXPIRIES` workloads a sweep.

Everything it sends is idempotent (the core answers a duplicate with STALE), so
a sweep that races the real message changes nothing. Quarantined workloads are
left alone and counted (`QuarantinedWorkloads`, which an alarm watches). A queued
workload the planner cannot judge is logged and counted (`PlanningFailures`) and
the others are judged without it; should judging fail altogether, the rest of the
sweep still runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from muster import contract
from muster.core import AdmissionPlan, Phase, Settings, Workload
from muster.runtime.deadlines import owed_signals
from muster.runtime.planning import HoldingsReader, admission_inputs, quota_holders
from muster.runtime.ports import Messages, Metrics, WorkloadStore

log = logging.getLogger("muster.runtime")

GRACE_SECONDS = 60.0
"""How late a message must be before the sweeper sends it again."""

FIT_CHECK_SECONDS = 300.0
"""With `capacityCheck`: how often a sweeper judges whether a queued gang fits the
nodes (a read of every quota holder's pods); a lost admission request then waits
at most this long, and a cluster whose queue waits for room is not read every minute."""

MAX_EXPIRIES = 20
"""Workloads whose leftover pod expiry one sweep finishes (the rest: the next sweeps)."""

# Phases whose leftover effects the sweeper looks for: every one but Finished, which
# is final (what it may leave is a lifecycle event and a timer stop; the quota it
# held is free, and a pass comes by the admissible rule above). Running is read
# too: a Running workload whose admission was committed but not yet carried out
# gets no event of its own that would repair it.
SWEPT_PHASES = (
    Phase.PENDING,
    Phase.ADMITTED,
    Phase.RUNNING,
    Phase.RECOVERING,
    Phase.REQUEUED,
    Phase.DEACTIVATED,
)


@dataclass(slots=True)
class SweepReport:
    requeues: list[str] = field(default_factory=list)
    deadlines: list[str] = field(default_factory=list)
    owed: list[str] = field(default_factory=list)  # signals of deadlines settings brought back
    repairs: list[str] = field(default_factory=list)
    admission_requested: bool = False
    quarantined: list[str] = field(default_factory=list)
    fit_judged: bool = False  # whether it read the quota holders' pods to judge the fit
    expiries: list[str] = field(default_factory=list)  # leftover pod expiries carried on

    @property
    def sent(self) -> int:
        return (
            len(self.requeues)
            + len(self.deadlines)
            + len(self.owed)
            + len(self.repairs)
            + self.admission_requested
        )


def sweep(
    store: WorkloadStore,
    messages: Messages,
    settings: Settings,
    now: float,
    metrics: Metrics,
    *,
    grace: float = GRACE_SECONDS,
    fit_check: bool = True,
) -> SweepReport:
    """Send again what should have moved a workload by now (see the module docstring).

    `fit_check`: whether to judge, with `capacityCheck`, if a queued gang fits the nodes
    (else, a gang that fits its quota waits for the next sweep that does).
    """
    report = SweepReport()
    quarantined = {key for key, _ in store.quarantined()}
    report.quarantined = sorted(quarantined)
    for w in store.by_phase(Phase.REQUEUED.value):
        if w.key not in quarantined and w.requeue_at is not None and w.requeue_at + grace <= now:
            messages.requeue(w.key, w.requeue_count, 0.0)
            report.requeues.append(w.key)
    holders = quota_holders(store)
    for w in holders:
        if w.key in quarantined or w.phase is Phase.RUNNING:
            continue
        for timer in (w.timer, w.fault_timer):
            if timer is not None and timer.deadline + grace <= now:
                messages.deadline_later(w.key, timer, 0.0)
                report.deadlines.append(w.key)
                break
    report.owed = _send_owed(holders, messages, settings, now, quarantined)
    for phase in SWEPT_PHASES:
        for key in store.unsettled(phase.value):
            if key not in quarantined:
                messages.request_admission("sweeper: unfinished effects", key)
                report.repairs.append(key)
    if not report.repairs and _judged_admissible(
        store, settings, now, quarantined, holders, fit_check, report, metrics
    ):
        messages.request_admission("sweeper: admissible, no pass seen", None)
        report.admission_requested = True
    report.expiries = _expire_leftovers(store)
    metrics.count(contract.METRIC_QUARANTINED, len(quarantined))
    metrics.count(contract.METRIC_SWEEPER_RESENT, report.sent)
    if report.sent or quarantined or report.expiries:
        log.warning(
            "sweeper sent again what should have arrived",
            extra={
                "requeues": report.requeues,
                "deadlines": report.deadlines,
                "owed": report.owed,
                "repairs": report.repairs,
                "admissionRequested": report.admission_requested,
                "quarantined": report.quarantined,
                "expiries": report.expiries,
            },
        )
    return report


def _judged_admissible(
    store: WorkloadStore,
    settings: Settings,
    now: float,
    quarantined: set[str],
    holders: Sequence[Workload],
    fit_check: bool,
    report: SweepReport,
    metrics: Metrics,
) -> bool:
    """`_admissible`, whose failure costs only this judgement, not the sweep."""
    try:
        return _admissible(store, settings, now, quarantined, holders, fit_check, report, metrics)
    except Exception:
        metrics.count(contract.METRIC_PLANNING_FAILURES)
        log.exception("sweeper could not judge whether a queued workload is admissible")
        return False


def _admissible(
    store: WorkloadStore,
    settings: Settings,
    now: float,
    quarantined: set[str],
    holders: Sequence[Workload],
    fit_check: bool,
    report: SweepReport,
    metrics: Metrics,
) -> bool:
    """Would a pass admit someone now? Quota first; then, with `capacityCheck`, the fit.

    Admissible means fitting too: without it a gang waiting for room would ask for
    a pass at every sweep.
    """
    by_quota = replace(settings, capacity_check=False)
    inputs = admission_inputs(store, by_quota, leave_out=quarantined, holders=holders)
    if not _reported(inputs.plan(by_quota, now), metrics).admit:
        return False
    if not settings.capacity_check:
        return True
    if not fit_check:
        return False
    report.fit_judged = True
    fitting = HoldingsReader(store).inputs(settings, inputs.queued, holders)
    return bool(_reported(fitting.plan(settings, now), metrics).admit)


def _reported(plan: AdmissionPlan, metrics: Metrics) -> AdmissionPlan:
    """The plan, after logging and counting each workload the planner could not judge."""
    for key, error in plan.failed:
        metrics.count(contract.METRIC_PLANNING_FAILURES)
        log.error(
            "the admission planner could not judge a workload; passed over",
            extra={"workload": key, "error": error},
        )
    return plan


def _send_owed(
    holders: Sequence[Workload],
    messages: Messages,
    settings: Settings,
    now: float,
    quarantined: set[str],
) -> list[str]:
    """The signal of every deadline the settings brought back and no timer carries."""
    owed = owed_signals(holders, settings, leave_out=quarantined)
    for key, signal in owed:
        messages.deadline_later(key, replace(signal, deadline=now), 0.0)
    return [key for key, _ in owed]


def _expire_leftovers(store: WorkloadStore) -> list[str]:
    """Finish pod expiries an ended incarnation's invocation left halfway."""
    keys = store.expiring()[:MAX_EXPIRIES]
    for key in keys:
        store.expire_leftover_pods(key)
    return keys


@dataclass(slots=True)
class Sweeper:
    """What the sweeper function needs: the store, the queues, settings and metrics."""

    store: WorkloadStore
    messages: Messages
    settings: Callable[[], Settings]
    metrics: Metrics
    grace: float = GRACE_SECONDS
    fit_checked_at: float | None = None  # the last sweep that judged the fit on the nodes

    def run(self, now: float) -> SweepReport:
        settings = self.settings()
        last = self.fit_checked_at
        fit_check = last is None or now - last >= FIT_CHECK_SECONDS or now < last
        report = sweep(
            self.store,
            self.messages,
            settings,
            now,
            self.metrics,
            grace=self.grace,
            fit_check=fit_check,
        )
        if report.fit_judged:
            self.fit_checked_at = now
        return report
