"""Deadlines, evictions, requeues with backoff, deactivation.

A gang that is not whole by its deadline (or whose pods all fail on their own
for `workloadFaults.evictAfter`) is evicted and requeued after a backoff, or
deactivated once it reaches its requeuing limit, as Kueue's `waitForPodsReady`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.core.copying import replace
from muster.core.diagnosis import (
    Diagnosis,
    PodDiagnosis,
    classify,
    diagnose,
    fails_on_its_own,
)
from muster.core.gang import incarnation
from muster.core.model import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    AdmissionRefused,
    DeadlineReached,
    Decision,
    Effect,
    Evict,
    Kind,
    LogEvent,
    Outcome,
    Phase,
    Pod,
    Publish,
    Reason,
    Requeue,
    RequeueDue,
    RunAdmission,
    StartTimer,
    StopTimer,
    Timer,
    TimerKind,
    Workload,
)
from muster.core.settings import QueueSettings, Timestamp
from muster.core.spec import with_spec


def backoff_delay(count: int, qs: QueueSettings, draw: float = 0.0) -> float:
    """Delay of requeue `count` (from 1): min(base * 2^(count-1), max) * (1 + jitter * draw).

    The jitter is applied after the cap so that workloads at the cap still spread.
    """
    exponent = max(count - 1, 0)
    delay = min(qs.backoff_base_seconds * (2.0 ** min(exponent, 64)), qs.backoff_max_seconds)
    return delay * (1.0 + qs.backoff_jitter * draw)


def readiness_deadline(
    w: Workload,
    e: DeadlineReached,
    qs: QueueSettings,
    now: float,
    draw: float,
    *,
    details: bool = True,
) -> Decision:
    """The readiness deadline ran out: evict the gang if it is still not whole.

    With `details` off the eviction's log detail leaves out its diagnosis and
    not-ready pods (for a shell that reads neither); what is decided is the same.
    """
    timer = w.timer
    if timer is None and _owed_signal(w, e, qs):
        return owed_deadline(w, qs, now, draw, details=details)
    if timer is None or (timer.attempt, timer.kind, timer.episode) != (
        e.attempt,
        e.kind,
        e.episode,
    ):
        return Decision(w, outcome=Outcome.STALE, note="timer no longer armed")
    if e.incarnation and e.incarnation != timer.incarnation:
        return Decision(w, outcome=Outcome.STALE, note="timer of an earlier object of this name")
    cause = Reason.WAIT_FOR_START if e.kind is TimerKind.STARTUP else Reason.WAIT_FOR_RECOVERY
    found = diagnose(w) if details else None
    return _evict_not_ready(w, qs, now, draw, Reason.PODS_READY_TIMEOUT, cause, found)


def owed_timer(w: Workload, qs: QueueSettings) -> Timer | None:
    """The readiness deadline `w` is owed under `qs` but has no timer for, or None.

    A gang left without one by settings that wanted none (a `dryRun` eviction
    reported, `recoveryTimeout: 0s`) is owed it again once they want one: it runs
    from when the gang was admitted (or lost readiness) under the timeout now in
    force. The timer takes a new episode, so its name is never one used before.
    """
    if w.timer is not None or qs.dry_run or w.phase not in NOT_READY_PHASES:
        return None
    inc = incarnation(w)
    if w.phase is Phase.ADMITTED:
        if w.admitted_at is None:
            return None
        deadline = w.admitted_at + qs.startup_timeout(w.timeout_override)
        return Timer(TimerKind.STARTUP, w.attempt, w.rearms + 2, deadline, inc)
    timeout = qs.effective_recovery_timeout
    if timeout <= 0:
        return None
    since = w.recovering_since if w.recovering_since is not None else w.ready_at
    deadline = (since if since is not None else 0.0) + timeout
    return Timer(TimerKind.RECOVERY, w.attempt, w.recovery_episodes + 1, deadline, inc)


def _owed_signal(w: Workload, e: DeadlineReached, qs: QueueSettings) -> bool:
    """Whether `e` is a deadline signal of this attempt for a gang owed a deadline.

    Any episode: the shells send episode 0 (which no timer has) to say "the
    deadline this attempt is owed now"; a late signal of a timer dropped earlier
    says the same. What follows depends on the state and settings, not the signal.
    """
    kind = TimerKind.STARTUP if w.phase is Phase.ADMITTED else TimerKind.RECOVERY
    if e.attempt != w.attempt or e.kind is not kind:
        return False
    if e.incarnation and e.incarnation != incarnation(w):
        return False
    return owed_timer(w, qs) is not None


def owed_deadline(
    w: Workload, qs: QueueSettings, now: float, draw: float, *, details: bool = True
) -> Decision:
    """Act on the deadline a settings change brought back: evict now if it passed,
    else arm its timer for the time that remains. IGNORED when none is owed."""
    timer = owed_timer(w, qs)
    if timer is None:
        return Decision(w, outcome=Outcome.IGNORED, note="no deadline owed")
    # The settings now enforce deadlines: a later dry run reports afresh.
    owed = replace(w, dry_run_evicted=False)
    if timer.deadline <= now:
        cause = Reason.WAIT_FOR_START if w.phase is Phase.ADMITTED else Reason.WAIT_FOR_RECOVERY
        found = diagnose(w) if details else None
        return _evict_not_ready(owed, qs, now, draw, Reason.PODS_READY_TIMEOUT, cause, found)
    episodes = timer.episode if timer.kind is TimerKind.RECOVERY else w.recovery_episodes
    armed = replace(owed, timer=timer, rearms=w.rearms + 1, recovery_episodes=episodes)
    return Decision(armed, (StartTimer(w.key, timer),))


def withdrawn_when_refused(w: Workload, attempt: int) -> bool:
    """Whether the cluster refusing for good to release `attempt` withdraws it: the
    release an Admitted workload waits for, or a pod group's replacement pods at any
    time of its admission (its gang cannot be whole again until they are released).
    A Job that ran was released; a refusal told late of it changes nothing."""
    if attempt != w.attempt:
        return False
    return w.phase is Phase.ADMITTED or (w.kind is Kind.POD_GROUP and w.phase in ACTIVE_PHASES)


def admission_refused(
    w: Workload, e: AdmissionRefused, qs: QueueSettings, now: float, draw: float
) -> Decision:
    """The cluster will not release this attempt: withdraw it, so that it holds
    neither quota nor the `blockAdmission` lock.

    Back to the queue after a backoff, counted towards the requeuing limits like an
    eviction (deactivated once they are reached, so a workload the cluster always
    refuses does not loop); an `Evict` makes sure nothing of it runs. Not a
    readiness eviction, so `dryRun` does not hold it back.
    """
    if not withdrawn_when_refused(w, e.attempt):
        return Decision(w, outcome=Outcome.STALE, note="not waiting for this admission")
    reason = Reason.ADMISSION_REFUSED
    detail: dict[str, Any] = {"attempt": w.attempt, "reason": str(reason), "error": e.error}
    effects: list[Effect] = [StopTimer(w.key, t) for t in (w.timer, w.fault_timer) if t]
    limited = _limit_reached(w, qs, now)
    evict_reason, cause = reason, None
    if limited:
        evict_reason, cause = Reason.DEACTIVATED, Reason.REQUEUING_LIMIT_EXCEEDED
        detail.update(reason=str(evict_reason), cause=str(cause), refused=str(reason))
    effects.append(Evict(w.key, w.attempt, w.kind, evict_reason, cause, w.not_ready_pods(), w.uid))
    effects.append(Publish(LogEvent.EVICTED, w.key, detail))
    evicted = withdrawn(w, now, qs, reason=evict_reason, cause=cause)
    if limited:
        gone = {"reason": str(Reason.REQUEUING_LIMIT_EXCEEDED), "count": w.requeue_count}
        effects += [Publish(LogEvent.DEACTIVATED, w.key, gone), RunAdmission("admission refused")]
        deactivated = replace(
            evicted,
            phase=Phase.DEACTIVATED,
            reason=str(Reason.REQUEUING_LIMIT_EXCEEDED),
            message=f"admission refused: {e.error}",
            requeue_count=0,
            requeue_at=None,
            first_evicted_at=None,
        )
        return Decision(deactivated, tuple(effects), withdrawn=had_live_pods(w))
    count = w.requeue_count + 1
    delay = backoff_delay(count, qs, draw)
    requeued = replace(
        evicted,
        phase=Phase.REQUEUED,
        message=f"admission refused: {e.error}",
        requeue_count=count,
        requeue_at=now + delay,
        first_evicted_at=w.first_evicted_at if w.first_evicted_at is not None else now,
    )
    effects.append(Requeue(w.key, count, delay, now + delay))
    requeued_detail = {"count": count, "requeueAt": now + delay, "delaySeconds": delay}
    effects.append(Publish(LogEvent.REQUEUED, w.key, requeued_detail))
    effects.append(RunAdmission("admission refused"))
    return Decision(requeued, tuple(effects), withdrawn=had_live_pods(w))


def outgrew_admission(
    w: Workload, spec: Mapping[str, Any], qs: QueueSettings, now: float
) -> Decision:
    """An admitted workload now asks for more pods or GPUs than it was admitted with
    (say `parallelism` raised on a running Job): withdraw it and queue it again with
    the new spec, as Kueue stops a job that no longer matches its admission.

    Kept admitted, it would run the larger gang on the smaller charge. It goes back
    to Pending at once: it did nothing wrong by the readiness rules, so no backoff
    and nothing counted towards the requeuing limits, and not held back by `dryRun`
    (which reports readiness evictions; this one keeps the quota true).
    """
    reason = Reason.OUTGREW_ADMISSION
    detail: dict[str, Any] = {
        "attempt": w.attempt,
        "reason": str(reason),
        "admitted": {"gangSize": w.gang_size, "gpus": w.gpus},
        "requested": {"gangSize": spec["gangSize"], "gpus": spec["gpus"]},
    }
    effects: list[Effect] = [StopTimer(w.key, t) for t in (w.timer, w.fault_timer) if t]
    effects.append(Evict(w.key, w.attempt, w.kind, reason, None, w.not_ready_pods(), w.uid))
    effects.append(Publish(LogEvent.EVICTED, w.key, detail))
    effects.append(RunAdmission("outgrew its admission"))
    evicted = withdrawn(replace(w, next_spec=spec), now, qs, reason=reason, cause=None)
    message = (
        f"asks for {spec['gangSize']} pods and {spec['gpus']} GPUs, "
        f"admitted with {w.gang_size} pods and {w.gpus} GPUs"
    )
    pending = replace(evicted, phase=Phase.PENDING, requeue_at=None, message=message)
    return Decision(pending, tuple(effects), withdrawn=had_live_pods(w))


def fault_deadline(
    w: Workload,
    e: DeadlineReached,
    qs: QueueSettings,
    now: float,
    draw: float,
    *,
    details: bool = True,
) -> Decision:
    """`workloadFaults.evictAfter` ran out: evict early if every not-ready pod still fails
    on its own (the timer's stop may not have arrived; correctness never depends on it)."""
    timer = w.fault_timer
    if timer is None or (timer.attempt, timer.episode) != (e.attempt, e.episode):
        return Decision(w, outcome=Outcome.STALE, note="fault timer no longer armed")
    if e.incarnation and e.incarnation != timer.incarnation:
        return Decision(w, outcome=Outcome.STALE, note="timer of an earlier object of this name")
    found = diagnose(w)
    if w.phase not in NOT_READY_PHASES or qs.fault_evict_after is None or not found.workload_fault:
        return Decision(
            replace(w, fault_timer=None),
            outcome=Outcome.IGNORED,
            note="the gang's pods no longer all fail on their own",
        )
    cause = Reason.WAIT_FOR_START if w.phase is Phase.ADMITTED else Reason.WAIT_FOR_RECOVERY
    return _evict_not_ready(
        w, qs, now, draw, Reason.WORKLOAD_FAULT, cause, found if details else None
    )


def _evict_not_ready(
    w: Workload,
    qs: QueueSettings,
    now: float,
    draw: float,
    reason: Reason,
    cause: Reason,
    found: Diagnosis | None,
) -> Decision:
    """Evict a gang that is not whole: requeue it with backoff, or deactivate it.

    `reason` is `PodsReadyTimeout` (a readiness deadline) or `WorkloadFault` (early,
    `workloadFaults.evictAfter`); both count the same towards the requeuing limits.
    Every such eviction records the diagnosis of the gang's not-ready pods; one in
    which they all failed on their own extends a streak, any other ends it, and
    the streak beyond `workloadFaults.limitCount` deactivates (`WorkloadFaults`).
    `found` None: no details wanted, only the diagnosis's verdict is worked out (and
    the `Evict` names no not-ready pods).
    """
    not_ready, detail = _eviction_detail(w, reason, cause, found)
    fault = found.workload_fault if found is not None else fails_on_its_own(w)
    streak = w.fault_evictions + 1 if fault else 0
    fault_limited = qs.fault_limit_count is not None and streak > qs.fault_limit_count
    limited = fault_limited or _limit_reached(w, qs, now)
    limit_reason = Reason.WORKLOAD_FAULTS if fault_limited else Reason.REQUEUING_LIMIT_EXCEEDED
    if fault_limited:
        _retries_stopped(detail, found, streak, qs)
    count = w.requeue_count + 1
    delay = backoff_delay(count, qs, draw)
    if qs.dry_run:
        fired = (
            replace(w, fault_timer=None)
            if reason is Reason.WORKLOAD_FAULT
            else replace(w, timer=None)
        )
        detail.update({"dryRun": True, "wouldDeactivate": limited})
        if limited:
            detail["wouldDeactivateReason"] = str(limit_reason)
        else:
            detail["wouldRequeueAfterSeconds"] = delay
        return Decision(
            replace(fired, dry_run_evicted=True),
            (Publish(LogEvent.EVICTED, w.key, detail),),
        )
    effects: list[Effect] = []
    # The other deadline of this attempt is moot now.
    if reason is Reason.WORKLOAD_FAULT and w.timer is not None:
        effects.append(StopTimer(w.key, w.timer))
    if reason is not Reason.WORKLOAD_FAULT and w.fault_timer is not None:
        effects.append(StopTimer(w.key, w.fault_timer))
    if limited:
        # Kueue does not record another PodsReadyTimeout here: it evicts the workload
        # as deactivated (`DeactivatedDueToRequeuingLimitExceeded`), and the count
        # does not grow. The timeout that led to it is kept as `timedOut`.
        detail.update(reason=str(Reason.DEACTIVATED), cause=str(limit_reason), timedOut=str(cause))
        if reason is Reason.WORKLOAD_FAULT:
            detail["evictedEarly"] = str(reason)
        evict_reason, evict_cause = Reason.DEACTIVATED, limit_reason
    else:
        evict_reason, evict_cause = reason, cause
    effects.append(Evict(w.key, w.attempt, w.kind, evict_reason, evict_cause, not_ready, w.uid))
    effects.append(Publish(LogEvent.EVICTED, w.key, detail))
    if limited:
        evicted = withdrawn(w, now, qs, reason=evict_reason, cause=evict_cause)
        deactivated = replace(
            evicted,
            fault_evictions=streak,
            phase=Phase.DEACTIVATED,
            reason=str(limit_reason),
            message=str(cause),
            requeue_count=0,
            requeue_at=None,
            first_evicted_at=None,
        )
        gone: dict[str, Any] = {"reason": str(limit_reason), "count": w.requeue_count}
        if fault_limited:
            gone["faultEvictions"] = streak
            gone.update(_summary_of(detail))
        effects.append(Publish(LogEvent.DEACTIVATED, w.key, gone))
        effects.append(RunAdmission("evicted"))
        return Decision(deactivated, tuple(effects), withdrawn=had_live_pods(w))
    # One copy for the eviction and the requeue (a requeue changes no field `withdrawn` sets).
    requeued = withdrawn(
        w,
        now,
        qs,
        reason=evict_reason,
        cause=evict_cause,
        fault_evictions=streak,
        phase=Phase.REQUEUED,
        requeue_count=count,
        requeue_at=now + delay,
        first_evicted_at=w.first_evicted_at if w.first_evicted_at is not None else now,
    )
    effects.append(Requeue(w.key, count, delay, now + delay))
    effects.append(
        Publish(
            LogEvent.REQUEUED,
            w.key,
            {"count": count, "requeueAt": now + delay, "delaySeconds": delay},
        )
    )
    effects.append(RunAdmission("evicted"))
    return Decision(requeued, tuple(effects), withdrawn=had_live_pods(w))


def _eviction_detail(
    w: Workload, reason: Reason, cause: Reason, found: Diagnosis | None
) -> tuple[tuple[Pod, ...], dict[str, Any]]:
    """The gang's not-ready pods and the eviction's log detail (without `found`: no
    pods, and neither their details nor the diagnosis in it)."""
    detail: dict[str, Any] = {
        "attempt": w.attempt,
        "reason": str(reason),
        "cause": str(cause),
        "readyPods": w.ready_pods,
        "gangSize": w.gang_size,
    }
    if found is None:
        return (), detail
    not_ready = w.not_ready_pods()
    classes = {d.pod: d for d in found.pods}
    detail["notReady"] = [_pod_detail(p, classes.get(p.name)) for p in not_ready[:20]]
    detail["diagnosis"] = found.to_dict()
    return not_ready, detail


def _retries_stopped(
    detail: dict[str, Any], found: Diagnosis | None, streak: int, qs: QueueSettings
) -> None:
    """The diagnosis's summary says the fault streak stopped the retries (when there is one)."""
    if found is not None:
        detail["diagnosis"]["summary"] = (
            f"{found.sentence()}; retries stopped: {streak} evictions in a row failed this "
            f"way (workloadFaults.limitCount {qs.fault_limit_count})"
        )


def _summary_of(detail: Mapping[str, Any]) -> dict[str, Any]:
    """The diagnosis's summary for the Deactivated event, if the eviction has one."""
    found = detail.get("diagnosis")
    return {"summary": found["summary"]} if found is not None else {}


def _limit_reached(w: Workload, qs: QueueSettings, now: float) -> bool:
    """Kueue's rule: deactivate when count + 1 > backoffLimitCount; or the time limit."""
    if qs.backoff_limit_count is not None and w.requeue_count + 1 > qs.backoff_limit_count:
        return True
    return (
        qs.backoff_limit_timeout is not None
        and w.first_evicted_at is not None
        and now - w.first_evicted_at >= qs.backoff_limit_timeout
    )


def had_live_pods(w: Workload) -> bool:
    """Whether an eviction of `w` retires pods (the `Decision.withdrawn` of it)."""
    return any(not p.retired for p in w.pods.values())


def withdrawn(
    w: Workload,
    now: float,
    qs: QueueSettings,
    *,
    reason: Reason,
    cause: Reason | None,
    **more: Any,
) -> Workload:
    """The common part of every eviction: pods retired, timer gone, stats counted;
    `more`: other fields of the same copy, none of those this sets."""
    label = f"{reason}/{cause}" if cause else str(reason)
    evictions = dict(w.evictions)
    evictions[label] = evictions.get(label, 0) + 1
    pods = {name: replace(p, retired=True, ready=False) for name, p in w.pods.items()}
    queued_at = now if qs.timestamp is Timestamp.EVICTION else w.created_at
    if w.next_spec is not None:
        w = with_spec(w, w.next_spec)  # holding nothing now: a spec change takes effect
    return replace(
        w,
        timer=None,
        fault_timer=None,
        pods=pods,
        evictions=evictions,
        queued_at=queued_at,
        reason=str(reason),
        message=str(cause) if cause else None,
        **more,
    )


def requeue_due(w: Workload, e: RequeueDue, now: float) -> Decision:
    """A requeued workload's backoff ran out: it is pending again."""
    if w.phase is not Phase.REQUEUED or e.count != w.requeue_count:
        return Decision(w, outcome=Outcome.STALE, note="not waiting for this requeue")
    assert w.requeue_at is not None
    if w.requeue_at > now:
        # Early: SQS caps a delay at 15 minutes, so long backoffs arrive in legs.
        remaining = w.requeue_at - now
        return Decision(w, (Requeue(w.key, w.requeue_count, remaining, w.requeue_at),))
    pending = replace(w, phase=Phase.PENDING, requeue_at=None, reason=str(Reason.BACKOFF_FINISHED))
    return Decision(
        pending,
        (
            Publish(LogEvent.BACKOFF_FINISHED, w.key, {"count": w.requeue_count}),
            RunAdmission("backoff finished"),
        ),
    )


def _pod_detail(p: Pod, found: PodDiagnosis | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "pod": p.name,
        "phase": p.phase,
        "node": p.node,
        "reason": p.reason,
        "message": p.message,
    }
    if found is None:
        found = classify(p)
    detail["class"] = str(found.cls)
    if p.restarts:
        detail["restarts"] = p.restarts
    if p.exit_code is not None:
        detail["exitCode"] = p.exit_code
    if p.terminated is not None:
        detail["terminated"] = p.terminated
    return detail
