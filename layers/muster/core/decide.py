"""The decision core: one workload's next state and the effects that carry it out.

`decide` is pure: no I/O, no clock (`now` is an argument), no global randomness
(`draw`, a number in [0, 1), scales the backoff jitter). The Lambdas, the
simulator and the local mode all call it, so its rules exist exactly once.
"""

from __future__ import annotations

import hashlib
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
from muster.core.model import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    AdmissionGranted,
    Admit,
    DeadlineReached,
    Decision,
    Effect,
    Event,
    Evict,
    Kind,
    LogEvent,
    NodeObserved,
    Outcome,
    Phase,
    Pod,
    PodChange,
    PodObserved,
    PodsCounted,
    PodsListed,
    Publish,
    Reactivate,
    Reason,
    Requeue,
    RequeueDue,
    RunAdmission,
    StartTimer,
    StopTimer,
    Timer,
    TimerKind,
    Workload,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.settings import QueueSettings, Settings, Timestamp

# Reasons and other `StrEnum` members become plain strings with `str(...)`, which is
# what `.value` gives, without `.value`'s Python-level property (this runs per event).

# Kueue's reason for a workload its queue will not take (e.g. a LocalQueue missing).
INADMISSIBLE = "Inadmissible"

# A node's health (HyperPod health monitoring's; the agent reads it from the label
# in `muster.kube.conventions`) that means it must be replaced or rebooted: its pods
# will not come back, so waiting out the recovery timeout only wastes the rest of
# the gang's GPUs.
NODE_REPLACEMENT_HEALTH = frozenset(
    {"UnschedulablePendingReplacement", "UnschedulablePendingReboot"}
)


def backoff_delay(count: int, qs: QueueSettings, draw: float = 0.0) -> float:
    """Delay of requeue `count` (from 1): min(base * 2^(count-1), max) * (1 + jitter * draw).

    The jitter is applied after the cap so that workloads at the cap still spread.
    """
    exponent = max(count - 1, 0)
    delay = min(qs.backoff_base_seconds * (2.0 ** min(exponent, 64)), qs.backoff_max_seconds)
    return delay * (1.0 + qs.backoff_jitter * draw)


def decide(
    workload: Workload | None,
    event: Event,
    settings: Settings,
    now: float,
    *,
    draw: float = 0.0,
) -> Decision:
    """Apply `event` to `workload` (None if unknown) at time `now`."""
    if workload is not None and workload.key != event.workload:
        return Decision(
            workload,
            outcome=Outcome.IGNORED,
            note=f"event for {event.workload!r} sent to {workload.key!r}",
        )
    if isinstance(event, WorkloadObserved):
        return _observe_workload(workload, event, settings)
    if workload is None:
        return Decision(
            None, outcome=Outcome.UNKNOWN_WORKLOAD, note=f"no workload {event.workload!r}"
        )
    qs = settings.for_queue(workload.queue)
    match event:
        case PodObserved():
            return _observe_pod(workload, event, settings, qs, now)
        case PodsListed():
            return _pods_listed(workload, event, qs, now)
        case PodsCounted():
            return reassess(workload, settings, now)
        case NodeObserved():
            return _observe_node(workload, event, qs, now)
        case DeadlineReached():
            if event.kind is TimerKind.FAULT:
                return _fault_deadline(workload, event, qs, now, draw)
            return _deadline(workload, event, qs, now, draw)
        case RequeueDue():
            return _requeue_due(workload, event, now)
        case AdmissionGranted():
            return _admit(workload, event, qs, now)
        case WorkloadFinished():
            return _finish(workload, event, now)
        case Reactivate():
            return _reactivate(workload, now)
    raise TypeError(f"not an event: {event!r}")  # pragma: no cover - exhaustive match


# --------------------------------------------------------------------------- workloads


def inadmissible(w: Workload, settings: Settings) -> str | None:
    """Why the cluster's or the administrator's rules keep `w` from admission, or None.

    A PriorityClass that does not exist is refused whatever `queueAccess` says, as
    Kueue refuses it: the API server would refuse the workload's pods anyway.
    """
    if w.priority_class_missing:
        return f"PriorityClass {w.priority_class} does not exist"
    return settings.access.refusal(w.queue, w.key, w.priority, w.priority_class)


def _priority_of(e: WorkloadObserved) -> dict[str, Any]:
    """The priority that orders the queue: the class's value when the pods have a
    PriorityClass, else the `muster.io/priority` annotation."""
    if e.priority_class is None:
        return {"priority": e.priority, "priority_class": None, "priority_class_missing": False}
    return {
        "priority": e.class_priority if e.class_priority is not None else e.priority,
        "priority_class": e.priority_class,
        "priority_class_missing": e.class_priority is None,
    }


def _observe_workload(w: Workload | None, e: WorkloadObserved, settings: Settings) -> Decision:
    if e.gang_size < 1:
        return Decision(w, outcome=Outcome.IGNORED, note=f"gang size {e.gang_size} is below 1")
    if w is not None and e.uid and w.uid and e.uid != w.uid:
        if e.seq and e.seq < w.spec_seq:
            return Decision(w, outcome=Outcome.STALE, note=f"an earlier object named {w.key}")
        return _new_incarnation(w, e, settings)
    if w is None:
        return _submitted(e, (), settings)
    if e.seq <= w.spec_seq:
        outcome = Outcome.DUPLICATE if e.seq == w.spec_seq else Outcome.STALE
        return Decision(w, outcome=outcome)
    updated = replace(w, spec_seq=e.seq, uid=w.uid or e.uid, **_priority_of(e))
    spec = _spec(e)
    if w.phase in ACTIVE_PHASES:
        # What it asks for, and whose quota pays for it, only change while it holds
        # nothing on the cluster: the change waits for the next eviction.
        updated = replace(updated, next_spec=None if spec == _spec(w) else spec)
    else:
        updated = _with_spec(updated, spec)
    effects: tuple[Effect, ...] = ()
    if updated.phase is Phase.PENDING:
        # Whether it may be admitted can change with its class or queue: say so.
        refusal = inadmissible(updated, settings)
        if refusal is not None:
            updated = replace(updated, reason=INADMISSIBLE, message=refusal)
        elif updated.reason == INADMISSIBLE:
            updated = replace(updated, reason=None, message=None)
    if updated.phase is Phase.PENDING and (
        updated.priority != w.priority
        or updated.queue != w.queue
        or updated.gpus != w.gpus
        or updated.shape != w.shape
        or updated.placement != w.placement
        or updated.reason != w.reason
    ):
        effects = (RunAdmission("workload changed"),)
    return Decision(updated, effects)


def _submitted(e: WorkloadObserved, before: tuple[Effect, ...], settings: Settings) -> Decision:
    new = Workload(
        key=e.workload,
        queue=e.queue,
        gang_size=e.gang_size,
        gpus=e.gpus,
        kind=e.kind,
        created_at=e.created_at,
        timeout_override=e.timeout_override,
        spec_seq=e.seq,
        uid=e.uid,
        born_seq=e.seq if e.uid else 0,
        queued_at=e.created_at,
        shape=e.shape,
        placement=e.placement,
        **_priority_of(e),
    )
    detail = {"queue": e.queue, "gangSize": e.gang_size, "gpus": e.gpus, "priority": new.priority}
    if new.priority_class is not None:
        detail["priorityClass"] = new.priority_class
    refusal = inadmissible(new, settings)
    if refusal is not None:
        # Kept and listed, never admitted while the administrator's rules say no.
        new = replace(new, reason=INADMISSIBLE, message=refusal)
        detail = {**detail, "inadmissible": refusal}
    return Decision(
        new,
        (*before, Publish(LogEvent.SUBMITTED, e.workload, detail), RunAdmission("submitted")),
    )


def _new_incarnation(w: Workload, e: WorkloadObserved, settings: Settings) -> Decision:
    """A new object under a known key: the old one is gone, the new one starts afresh.

    New attempt numbering, new timer names (they carry the uid), no pods of the
    old object (shells keep pods per incarnation).
    """
    ended: list[Effect] = []
    if w.phase is not Phase.FINISHED:
        if w.timer is not None:
            ended.append(StopTimer(w.key, w.timer))
        if w.fault_timer is not None:
            ended.append(StopTimer(w.key, w.fault_timer))
        ended.append(
            Publish(
                LogEvent.FINISHED,
                w.key,
                {"reason": str(Reason.DELETED), "attempt": w.attempt, "uid": w.uid},
            )
        )
    return replace(_submitted(e, tuple(ended), settings), reborn=True)


def _spec(x: WorkloadObserved | Workload) -> dict[str, Any]:
    """What an admission is made of: as the cluster reports it, or as a workload holds it."""
    spec = {
        "queue": x.queue,
        "gangSize": x.gang_size,
        "gpus": x.gpus,
        "timeoutOverride": x.timeout_override,
    }
    return spec | _placement_spec(x.shape, x.placement)


def _placement_spec(shape: tuple[tuple[int, int], ...], placement: str) -> dict[str, Any]:
    """What the capacity check reads, only when reported (older specs compare equal)."""
    return ({"shape": [list(g) for g in shape]} if shape else {}) | (
        {"placement": placement} if placement else {}
    )


def _with_spec(w: Workload, spec: Mapping[str, Any]) -> Workload:
    return replace(
        w,
        queue=spec["queue"],
        gang_size=spec["gangSize"],
        gpus=spec["gpus"],
        timeout_override=spec["timeoutOverride"],
        shape=tuple((int(n), int(g)) for n, g in spec.get("shape") or ()),
        placement=str(spec.get("placement") or ""),
        next_spec=None,
    )


def _finish(w: Workload, e: WorkloadFinished, now: float) -> Decision:
    if e.uid and w.uid and e.uid != w.uid:
        if not e.seq or e.seq < w.spec_seq:
            return Decision(w, outcome=Outcome.STALE, note=f"an earlier object named {w.key}")
        if w.phase is Phase.FINISHED:
            # A later object under this name ended too: remember it, so its own late
            # events are recognised.
            return Decision(replace(w, uid=e.uid, spec_seq=max(w.spec_seq, e.seq)))
    elif w.phase is Phase.FINISHED:
        return Decision(w, outcome=Outcome.DUPLICATE)
    elif e.seq and e.seq < w.spec_seq:
        # A listing older than the workload's last change cannot say it is gone.
        return Decision(w, outcome=Outcome.STALE, note="older than the workload's last change")
    effects: list[Effect] = []
    if w.timer is not None:
        effects.append(StopTimer(w.key, w.timer))
    if w.fault_timer is not None:
        effects.append(StopTimer(w.key, w.fault_timer))
    held = w.phase in ACTIVE_PHASES
    done = replace(
        w,
        phase=Phase.FINISHED,
        reason=str(e.reason),
        timer=None,
        fault_timer=None,
        requeue_at=None,
        uid=e.uid or w.uid,
    )
    effects.append(
        Publish(LogEvent.FINISHED, w.key, {"reason": str(e.reason), "attempt": w.attempt})
    )
    if held:
        effects.append(RunAdmission("finished"))
    return Decision(done, tuple(effects))


def _reactivate(w: Workload, now: float) -> Decision:
    if w.phase is not Phase.DEACTIVATED:
        return Decision(w, outcome=Outcome.IGNORED, note=f"{w.key} is {w.phase}, not Deactivated")
    revived = replace(
        w,
        phase=Phase.PENDING,
        reason=str(Reason.REACTIVATED),
        requeue_count=0,
        requeue_at=None,
        first_evicted_at=None,
        fault_evictions=0,
    )
    return Decision(
        revived,
        (
            Publish(LogEvent.REACTIVATED, w.key, {"reason": "Reactivated"}),
            RunAdmission("reactivated"),
        ),
    )


# --------------------------------------------------------------------------- admission


def _admit(w: Workload, e: AdmissionGranted, qs: QueueSettings, now: float) -> Decision:
    if e.attempt <= w.attempt:
        outcome = Outcome.DUPLICATE if w.phase in ACTIVE_PHASES else Outcome.STALE
        return Decision(w, outcome=outcome)
    if not admissible(w, now) or e.attempt != w.attempt + 1:
        return Decision(w, outcome=Outcome.STALE, note=f"{w.key} is not admissible ({w.phase})")
    timeout = qs.startup_timeout(w.timeout_override)
    timer = Timer(TimerKind.STARTUP, e.attempt, 1, now + timeout, incarnation(w))
    admitted = replace(
        w,
        phase=Phase.ADMITTED,
        attempt=e.attempt,
        admitted_at=now,
        ready_at=None,
        requeue_at=None,
        timer=timer,
        recovery_episodes=0,
        reason=None,
        message=None,
        dry_run_evicted=False,
        fault_timer=None,
        fault_episodes=0,
    )
    effects: list[Effect] = [
        Admit(w.key, e.attempt, w.kind, w.uid),
        StartTimer(w.key, timer),
        Publish(
            LogEvent.ADMITTED,
            w.key,
            {"attempt": e.attempt, "deadline": timer.deadline, "timeoutSeconds": timeout},
        ),
    ]
    if admitted.whole:
        # A pod group can be whole the moment its gate is lifted (e.g. pods already running).
        return _became_ready(admitted, effects, now)
    return Decision(admitted, tuple(effects))


def incarnation(w: Workload) -> str:
    """What tells this object's timers from those of an earlier object under its key.

    A short digest of the uid (uids of one key may share a prefix), so that an
    execution name stays within Step Functions' 80 characters.
    """
    return hashlib.blake2s(w.uid.encode(), digest_size=4).hexdigest() if w.uid else ""


def admissible(w: Workload, now: float) -> bool:
    """May the admission pass pick this workload now?"""
    if w.phase is not Phase.PENDING:
        return False
    if w.requeue_at is not None and w.requeue_at > now:
        return False
    # A pod group is held by scheduling gates on pods that exist; after an eviction
    # deleted them it waits for its controller to create replacements.
    return not (w.kind is Kind.POD_GROUP and w.live_pods < w.gang_size)


# --------------------------------------------------------------------------- pods


def _observe_pod(
    w: Workload, e: PodObserved, settings: Settings, qs: QueueSettings, now: float
) -> Decision:
    outcome, pod, note = pod_update(
        w.pods.get(e.pod), e, born=w.born_seq, listed=(w.listed_seq, w.listed)
    )
    if outcome is not Outcome.APPLIED:
        return Decision(w, outcome=outcome, note=note)
    pods = dict(w.pods)
    if pod is None:
        del pods[e.pod]
    else:
        pods[e.pod] = pod
    updated = replace(w, pods=pods)
    return _readiness(w, updated, qs, now)


def pod_update(
    known: Pod | None,
    e: PodObserved,
    *,
    born: int = 0,
    listed: tuple[int, Mapping[str, str]] = (0, {}),
) -> tuple[Outcome, Pod | None, str]:
    """The pod-level part of a pod event: (outcome, the pod's new record or None, note).

    A deletion leaves a tombstone (a pod with `deleted`), so that a late or
    redelivered event of the deleted pod is stale. Shells that store pods apart
    from the workload use this to write one pod without loading the whole gang.
    `born` is the revision the workload object was first seen at: a pod event
    older than that is of an earlier object under the same name.
    """
    if born and e.seq < born and not e.deleted:
        return Outcome.STALE, known, f"pod {e.pod} of an earlier object of this name"
    listed_seq, listed_pods = listed
    news = known is None or known.deleted or (e.uid and known.uid and e.uid != known.uid)
    if news and not e.deleted and e.seq < listed_seq and listed_pods.get(e.pod) != e.uid:
        # Older than a complete listing that did not hold it: it was gone by then.
        return Outcome.STALE, known, f"pod {e.pod} was not in the listing at {listed_seq}"
    if known is not None:
        same_incarnation = not e.uid or not known.uid or e.uid == known.uid
        if same_incarnation and e.seq <= known.seq:
            outcome = Outcome.DUPLICATE if e.seq == known.seq else Outcome.STALE
            return outcome, known, ""
        if same_incarnation and known.deleted:
            return Outcome.STALE, known, f"pod {e.pod} was deleted"
        if not same_incarnation and e.seq <= known.seq:
            # `seq` is the cluster-wide revision: the newer object of this name wins.
            return Outcome.STALE, known, f"an earlier pod named {e.pod}"
        if same_incarnation and known.retired and not e.deleted:
            # The pod belongs to an evicted attempt; only its deletion matters now.
            return Outcome.IGNORED, known, f"pod {e.pod} of an evicted attempt"
    if e.deleted:
        # A tombstone: late and redelivered events of this pod are recognised as stale.
        # It keeps the pod's last revision while it lived: a pod of the same name can
        # only be created after this one was deleted, so its events are all newer than
        # that, and an earlier object's all older (a deletion found by a listing
        # carries the listing's revision, which may be later than the new pod's).
        return (
            Outcome.APPLIED,
            Pod(
                name=e.pod,
                seq=known.seq if known is not None and not known.deleted else e.seq,
                uid=e.uid or (known.uid if known else ""),
                phase=e.phase,
                deleted=True,
            ),
            "",
        )
    # A report older than the NotReady of the node it names does not override that.
    node_down = (
        known is not None and known.node_down and known.node_seq > e.seq and known.node == e.node
    )
    pod = Pod(
        name=e.pod,
        seq=e.seq,
        uid=e.uid,
        phase=e.phase,
        ready=e.ready,
        node=e.node,
        reason="NodeNotReady" if node_down else e.reason,
        message=e.message,
        node_down=node_down,
        node_seq=known.node_seq if node_down and known else 0,
        scheduled=e.scheduled,
        waiting=e.waiting,
        restarts=e.restarts,
        terminated=e.terminated,
        exit_code=e.exit_code,
    )
    return Outcome.APPLIED, pod, ""


def observe_stored_pod(
    w: Workload, known: Pod | None, e: PodObserved, settings: Settings
) -> PodChange:
    """A pod event for a shell that stores each pod apart from its workload.

    `w` is the workload without its pods and `known` the one pod's record; the
    gang's transitions follow once the shell has written the pod and counted the
    gang again (`gang_may_have_moved`, then `decide` with `PodsCounted`).
    """
    if w.kind is Kind.POD_GROUP:
        return PodChange(Outcome.APPLIED, known, whole_gang=True)
    outcome, pod, note = pod_update(known, e, born=w.born_seq, listed=(w.listed_seq, w.listed))
    if outcome is not Outcome.APPLIED:
        # A redelivery after a crash between the pod write and the gang's transition:
        # count the gang again.
        return PodChange(outcome, pod, note, recount=outcome is Outcome.DUPLICATE)
    delta = _counts_ready(pod) - _counts_ready(known)
    faults = not delta and _fault_watch_moved(w, settings, known, pod)
    return PodChange(outcome, pod, note, delta, recount=bool(delta) or faults, faults=faults)


def gang_may_have_moved(w: Workload, ready_count: int, *, faults: bool = False) -> bool:
    """Whether a gang with `ready_count` Ready pods may have become whole, stopped
    being whole, or (with `faults`) moved its `workloadFaults` watch: only then is
    the whole gang worth loading."""
    if w.phase in NOT_READY_PHASES and (faults or ready_count >= w.gang_size):
        return True
    return w.phase is Phase.RUNNING and ready_count < w.gang_size


def _counts_ready(pod: Pod | None) -> int:
    return int(pod is not None and pod.counts_ready)


def _fault_watch_moved(
    w: Workload, settings: Settings, before: Pod | None, after: Pod | None
) -> bool:
    """Whether one pod's new record may start or stop the gang's `evictAfter` timer."""
    if w.phase not in NOT_READY_PHASES:
        return False
    if settings.for_queue(w.queue).fault_evict_after is None and w.fault_timer is None:
        return False
    if before is None or after is None or before.retired or before.deleted or after.deleted:
        return True
    return classify(before).cls is not classify(after).cls


def _pods_listed(w: Workload, e: PodsListed, qs: QueueSettings, now: float) -> Decision:
    """A complete listing of pods: those it lacks (and older than it) are deleted."""
    if e.revision <= w.listed_seq:
        return Decision(w, outcome=Outcome.STALE, note="an older listing")
    pods = dict(w.pods)
    for p in w.pods.values():
        listed = e.pods.get(p.name)
        gone = listed is None or bool(p.uid and listed and listed != p.uid)
        if not p.deleted and gone and p.seq < e.revision:
            pods[p.name] = Pod(name=p.name, seq=p.seq, uid=p.uid, phase=p.phase, deleted=True)
    listing = replace(w, pods=pods, listed_seq=e.revision, listed=dict(e.pods))
    if w.phase is Phase.FINISHED:
        return Decision(listing)
    return _readiness(w, listing, qs, now)


def reassess(workload: Workload, settings: Settings, now: float) -> Decision:
    """The transitions that follow from the gang's pods as they are now.

    For shells that store pods apart from the workload: after writing one pod they
    re-read the gang and ask again, so that of two concurrent "last" pods the one
    written second notices that the gang became whole. Outcome IGNORED when
    nothing follows.
    """
    decision = _readiness(workload, workload, settings.for_queue(workload.queue), now)
    if decision.workload == workload and not decision.effects:
        return Decision(workload, outcome=Outcome.IGNORED, note="readiness unchanged")
    return decision


def _readiness(before: Workload, w: Workload, qs: QueueSettings, now: float) -> Decision:
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
    if w.kind is Kind.POD_GROUP and w.phase in ACTIVE_PHASES and w.live_pods > before.live_pods:
        # Replacement pods of an admitted group arrive gated: release them too.
        effects.append(Admit(w.key, w.attempt, w.kind, w.uid))
    if w.phase is Phase.ADMITTED and w.whole:
        return _became_ready(w, effects, now)
    if w.phase is Phase.RECOVERING and w.whole:
        return _became_ready(w, effects, now)
    if w.phase is Phase.RUNNING and not w.whole:
        lost = _lost_readiness(w, qs, now)
        return replace(lost, effects=(*effects, *lost.effects))
    if w.phase is Phase.PENDING and w.kind is Kind.POD_GROUP and before.live_pods != w.live_pods:
        return Decision(w, (RunAdmission("replacement pods"),))
    return Decision(w, tuple(effects))


def _became_ready(w: Workload, effects: list[Effect], now: float) -> Decision:
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


# --------------------------------------------------------------------------- nodes


def _observe_node(w: Workload, e: NodeObserved, qs: QueueSettings, now: float) -> Decision:
    on_node = [p for p in w.pods.values() if p.node == e.node and not p.retired and not p.deleted]
    if not on_node or w.phase not in ACTIVE_PHASES:
        return Decision(w, outcome=Outcome.IGNORED)
    if e.seq:
        # A node condition never overrides a pod report (or node report) newer than it.
        on_node = [p for p in on_node if p.seq < e.seq and p.node_seq < e.seq]
        if not on_node:
            return Decision(w, outcome=Outcome.STALE, note=f"node {e.node}: older than its pods")
    if e.health in NODE_REPLACEMENT_HEALTH and qs.node_replacement_eviction:
        return _evict_for_node(w, e, qs, now)
    pods = dict(w.pods)
    if not e.ready:
        # The node's pods can no longer be Ready, whatever the kubelet last reported.
        for p in on_node:
            pods[p.name] = replace(
                p,
                node_down=True,
                node_seq=e.seq,
                reason="NodeNotReady",
                message=f"node {e.node} is not Ready",
            )
        return _readiness(w, replace(w, pods=pods), qs, now)
    down = [p for p in on_node if p.node_down]
    if not e.seq or not down:
        return Decision(w, outcome=Outcome.IGNORED)
    # Ready again, and newer than the NotReady that overrode these pods' reports.
    for p in down:
        pods[p.name] = replace(
            p,
            node_down=False,
            node_seq=e.seq,
            reason=None if p.ready else p.reason,
            message=None if p.ready else p.message,
        )
    return _readiness(w, replace(w, pods=pods), qs, now)


def _evict_for_node(w: Workload, e: NodeObserved, qs: QueueSettings, now: float) -> Decision:
    """The node is being replaced: evict now and requeue at once, without counting it.

    The eviction is not the workload's fault, so it neither waits out a backoff nor
    moves towards its requeuing limit.
    """
    detail = {
        "attempt": w.attempt,
        "reason": str(Reason.NODE_FAILURES),
        "node": e.node,
        "health": e.health,
        "notReady": [p.name for p in w.not_ready_pods()][:20],
        "diagnosis": diagnose(w).to_dict(),
    }
    if qs.dry_run:
        if w.dry_run_evicted:
            return Decision(w, outcome=Outcome.IGNORED)
        return Decision(
            replace(w, dry_run_evicted=True),
            (Publish(LogEvent.EVICTED, w.key, {**detail, "dryRun": True}),),
        )
    effects: list[Effect] = []
    if w.timer is not None:
        effects.append(StopTimer(w.key, w.timer))
    if w.fault_timer is not None:
        effects.append(StopTimer(w.key, w.fault_timer))
    effects.append(
        Evict(w.key, w.attempt, w.kind, Reason.NODE_FAILURES, None, w.not_ready_pods(), w.uid)
    )
    evicted = _withdrawn(w, now, qs, reason=Reason.NODE_FAILURES, cause=None)
    # Not the workload's fault: it also ends a streak of workload-fault evictions.
    evicted = replace(evicted, phase=Phase.PENDING, requeue_at=None, fault_evictions=0)
    effects.append(Publish(LogEvent.EVICTED, w.key, detail))
    effects.append(
        Publish(
            LogEvent.REQUEUED,
            w.key,
            {"count": w.requeue_count, "requeueAt": now, "delaySeconds": 0},
        )
    )
    effects.append(RunAdmission("evicted"))
    return Decision(evicted, tuple(effects), withdrawn=_had_live_pods(w))


# --------------------------------------------------------------------------- deadlines


def _deadline(
    w: Workload, e: DeadlineReached, qs: QueueSettings, now: float, draw: float
) -> Decision:
    timer = w.timer
    if timer is None or (timer.attempt, timer.kind, timer.episode) != (
        e.attempt,
        e.kind,
        e.episode,
    ):
        return Decision(w, outcome=Outcome.STALE, note="timer no longer armed")
    if e.incarnation and e.incarnation != timer.incarnation:
        return Decision(w, outcome=Outcome.STALE, note="timer of an earlier object of this name")
    cause = Reason.WAIT_FOR_START if e.kind is TimerKind.STARTUP else Reason.WAIT_FOR_RECOVERY
    return _evict_not_ready(w, qs, now, draw, Reason.PODS_READY_TIMEOUT, cause, diagnose(w))


def _fault_deadline(
    w: Workload, e: DeadlineReached, qs: QueueSettings, now: float, draw: float
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
    return _evict_not_ready(w, qs, now, draw, Reason.WORKLOAD_FAULT, cause, found)


def _evict_not_ready(
    w: Workload,
    qs: QueueSettings,
    now: float,
    draw: float,
    reason: Reason,
    cause: Reason,
    found: Diagnosis,
) -> Decision:
    """Evict a gang that is not whole: requeue it with backoff, or deactivate it.

    `reason` is `PodsReadyTimeout` (a readiness deadline) or `WorkloadFault` (early,
    `workloadFaults.evictAfter`); both count the same towards the requeuing limits.
    Every such eviction records the diagnosis of the gang's not-ready pods; one in
    which they all failed on their own extends a streak, any other ends it, and
    the streak beyond `workloadFaults.limitCount` deactivates (`WorkloadFaults`).
    """
    not_ready = w.not_ready_pods()
    classes = {d.pod: d for d in found.pods}
    detail: dict[str, Any] = {
        "attempt": w.attempt,
        "reason": str(reason),
        "cause": str(cause),
        "readyPods": w.ready_pods,
        "gangSize": w.gang_size,
        "notReady": [_pod_detail(p, classes.get(p.name)) for p in not_ready[:20]],
        "diagnosis": found.to_dict(),
    }
    streak = w.fault_evictions + 1 if found.workload_fault else 0
    fault_limited = qs.fault_limit_count is not None and streak > qs.fault_limit_count
    limited = fault_limited or _limit_reached(w, qs, now)
    limit_reason = Reason.WORKLOAD_FAULTS if fault_limited else Reason.REQUEUING_LIMIT_EXCEEDED
    if fault_limited:
        detail["diagnosis"]["summary"] = (
            f"{found.sentence()}; retries stopped: {streak} evictions in a row failed this "
            f"way (workloadFaults.limitCount {qs.fault_limit_count})"
        )
    count = w.requeue_count + 1
    delay = backoff_delay(count, qs, draw)
    fired = (
        replace(w, fault_timer=None) if reason is Reason.WORKLOAD_FAULT else replace(w, timer=None)
    )
    if qs.dry_run:
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
    evicted = replace(
        _withdrawn(w, now, qs, reason=evict_reason, cause=evict_cause), fault_evictions=streak
    )
    effects.append(Publish(LogEvent.EVICTED, w.key, detail))
    if limited:
        deactivated = replace(
            evicted,
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
            gone["summary"] = detail["diagnosis"]["summary"]
        effects.append(Publish(LogEvent.DEACTIVATED, w.key, gone))
        effects.append(RunAdmission("evicted"))
        return Decision(deactivated, tuple(effects), withdrawn=_had_live_pods(w))
    requeued = replace(
        evicted,
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
    return Decision(requeued, tuple(effects), withdrawn=_had_live_pods(w))


def _limit_reached(w: Workload, qs: QueueSettings, now: float) -> bool:
    """Kueue's rule: deactivate when count + 1 > backoffLimitCount; or the time limit."""
    if qs.backoff_limit_count is not None and w.requeue_count + 1 > qs.backoff_limit_count:
        return True
    return (
        qs.backoff_limit_timeout is not None
        and w.first_evicted_at is not None
        and now - w.first_evicted_at >= qs.backoff_limit_timeout
    )


def _had_live_pods(w: Workload) -> bool:
    """Whether an eviction of `w` retires pods (the `Decision.withdrawn` of it)."""
    return any(not p.retired for p in w.pods.values())


def _withdrawn(
    w: Workload, now: float, qs: QueueSettings, *, reason: Reason, cause: Reason | None
) -> Workload:
    """The common part of every eviction: pods retired, timer gone, stats counted."""
    label = f"{reason}/{cause}" if cause else str(reason)
    evictions = dict(w.evictions)
    evictions[label] = evictions.get(label, 0) + 1
    pods = {name: replace(p, retired=True, ready=False) for name, p in w.pods.items()}
    queued_at = now if qs.timestamp is Timestamp.EVICTION else w.created_at
    if w.next_spec is not None:
        w = _with_spec(w, w.next_spec)  # holding nothing now: a spec change takes effect
    return replace(
        w,
        timer=None,
        fault_timer=None,
        pods=pods,
        evictions=evictions,
        queued_at=queued_at,
        reason=str(reason),
        message=str(cause) if cause else None,
    )


def _requeue_due(w: Workload, e: RequeueDue, now: float) -> Decision:
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
