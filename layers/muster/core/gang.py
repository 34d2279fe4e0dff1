"""The gang's readiness: whole, no longer whole, or failing on its own.

Every event that changes a gang's pods ends here: a gang that became whole runs
(its deadline stops), one that stopped being whole waits for recovery (a recovery
deadline starts), and one whose not-ready pods all fail on their own is watched
by `workloadFaults.evictAfter`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from muster.core.copying import replace
from muster.core.diagnosis import fails_on_its_own
from muster.core.model import (
    NOT_READY_PHASES,
    Admit,
    Decision,
    Effect,
    Kind,
    LogEvent,
    Outcome,
    Phase,
    Publish,
    Reason,
    RunAdmission,
    StartTimer,
    StopTimer,
    Timer,
    TimerKind,
    Workload,
)
from muster.core.pod_groups import release_due
from muster.core.settings import QueueSettings, Settings

# Read per pod event: a member off its enum class costs a metaclass lookup each time.
_ADMITTED, _RUNNING, _RECOVERING, _PENDING = (
    Phase.ADMITTED,
    Phase.RUNNING,
    Phase.RECOVERING,
    Phase.PENDING,
)
_POD_GROUP = Kind.POD_GROUP


def incarnation(w: Workload) -> str:
    """What tells this object's timers from those of an earlier object under its key.

    A short digest of the uid (uids of one key may share a prefix), so that an
    execution name stays within Step Functions' 80 characters.
    """
    return hashlib.blake2s(w.uid.encode(), digest_size=4).hexdigest() if w.uid else ""


def reassess(workload: Workload, settings: Settings, now: float) -> Decision:
    """The transitions that follow from the gang's pods as they are now.

    For shells that store pods apart from the workload: after writing one pod they
    re-read the gang and ask again, so that of two concurrent "last" pods the one
    written second notices that the gang became whole. Outcome IGNORED when
    nothing follows.
    """
    decision = readiness(workload, workload, settings.for_queue(workload.queue), now)
    if (
        workload.phase is Phase.PENDING
        and workload.kind is Kind.POD_GROUP
        and workload.live_pods >= workload.gang_size
    ):
        # Its pods were counted live without the whole gang: the one that made it
        # whole asks for the pass (`_completed`, one pod at a time).
        return Decision(workload, (RunAdmission("replacement pods"),))
    if decision.workload == workload and not decision.effects:
        return Decision(workload, outcome=Outcome.IGNORED, note="readiness unchanged")
    return decision


def readiness(before: Workload, w: Workload, qs: QueueSettings, now: float) -> Decision:
    """Transitions that follow from the gang becoming whole or losing a pod."""
    return _watch_faults(_whole_or_not(before, w, qs, now), qs, now)


def _watch_faults(d: Decision, qs: QueueSettings, now: float) -> Decision:
    """Arm `workloadFaults.evictAfter` while every not-ready pod fails on its own.

    The timer runs from the moment the gang is in that state; any change out of it
    (a pod Ready, starting, or waiting for room) stops it, and the next time starts
    a new episode. It is armed only when it would fire before the readiness deadline.
    """
    w = d.workload
    if w is None or (qs.fault_evict_after is None and w.fault_timer is None):
        return d
    armed = w.fault_timer
    wanted = (
        qs.fault_evict_after is not None
        and w.phase in NOT_READY_PHASES
        and not w.dry_run_evicted  # reported once per attempt in dry run
        and fails_on_its_own(w)
    )
    if wanted and armed is None:
        assert qs.fault_evict_after is not None
        deadline = now + qs.fault_evict_after
        if w.timer is not None and deadline >= w.timer.deadline:
            return d
        episode = w.fault_episodes + 1
        timer = Timer(TimerKind.FAULT, w.attempt, episode, deadline, incarnation(w))
        watched = replace(w, fault_timer=timer, fault_episodes=episode)
        return replace(d, workload=watched, effects=(*d.effects, StartTimer(w.key, timer)))
    if not wanted and armed is not None:
        return replace(
            d,
            workload=replace(w, fault_timer=None),
            effects=(*d.effects, StopTimer(w.key, armed)),
        )
    return d


def _whole_or_not(before: Workload, w: Workload, qs: QueueSettings, now: float) -> Decision:
    effects: list[Effect] = []
    group, phase = w.kind is _POD_GROUP, w.phase
    if group and release_due(before, w):
        # Replacement pods of an admitted group arrive gated: the release lifts the
        # gates of as many as its gang lacks, never more (`pods_to_release`), inside
        # the group's topology domain.
        effects.append(Admit.of(w, w.attempt))
    if (phase is _ADMITTED or phase is _RECOVERING) and w.whole:
        return became_ready(w, effects, now)
    if phase is _RUNNING and not w.whole:
        lost = _lost_readiness(w, qs, now)
        return replace(lost, effects=(*effects, *lost.effects))
    if phase is _PENDING and group and _completed(before, w):
        # Only the pod that makes the group whole can let it in: one pass, not one per pod.
        return Decision(w, (RunAdmission("replacement pods"),))
    return Decision(w, tuple(effects))


def _completed(before: Workload, w: Workload) -> bool:
    """Whether a waiting pod group now has every pod it needs (`admissible`'s rule)."""
    return before.live_pods < w.gang_size <= w.live_pods


def became_ready(w: Workload, effects: list[Effect], now: float) -> Decision:
    """The gang is whole: Running, its deadline stopped (`effects` are added to)."""
    recovered = w.phase is Phase.RECOVERING
    if w.timer is not None:
        effects.append(StopTimer(w.key, w.timer))
    reason = Reason.RECOVERED if recovered else Reason.STARTED
    detail: dict[str, Any] = {"attempt": w.attempt, "reason": str(reason)}
    if not recovered and w.admitted_at is not None:
        detail["secondsSinceAdmission"] = now - w.admitted_at
    ready = replace(
        w,
        phase=Phase.RUNNING,
        timer=None,
        ready_at=now if not recovered else w.ready_at,
        first_evicted_at=None,
        ever_ready=True,
        reason=str(reason),
        message=None,
    )
    effects.append(Publish(LogEvent.PODS_READY, w.key, detail))
    effects.append(RunAdmission("pods ready"))
    return Decision(ready, tuple(effects))


def _lost_readiness(w: Workload, qs: QueueSettings, now: float) -> Decision:
    timeout = qs.effective_recovery_timeout
    episode = w.recovery_episodes + 1
    timer = (
        Timer(TimerKind.RECOVERY, w.attempt, episode, now + timeout, incarnation(w))
        if timeout > 0
        else None
    )
    missing = [p.name for p in w.not_ready_pods()]
    recovering = replace(
        w,
        phase=Phase.RECOVERING,
        timer=timer,
        recovery_episodes=episode,
        recovering_since=now,
        reason=str(Reason.WAIT_FOR_RECOVERY),
        message=f"{w.ready_pods}/{w.gang_size} pods ready",
    )
    detail: dict[str, Any] = {
        "attempt": w.attempt,
        "readyPods": w.ready_pods,
        "gangSize": w.gang_size,
        "notReady": missing[:20],
        "deadline": timer.deadline if timer else None,
    }
    effects: list[Effect] = [Publish(LogEvent.WAIT_FOR_RECOVERY, w.key, detail)]
    if timer is not None:
        effects.insert(0, StartTimer(w.key, timer))
    return Decision(recovering, tuple(effects))
