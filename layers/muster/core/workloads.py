"""A workload's lifecycle: submitted, changed, re-created, admitted, finished, reactivated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.core.copying import replace
from muster.core.eviction import outgrew_admission
from muster.core.gang import became_ready, incarnation
from muster.core.model import (
    ACTIVE_PHASES,
    AdmissionGranted,
    Admit,
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
    RunAdmission,
    StartTimer,
    StopTimer,
    Timer,
    TimerKind,
    Workload,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.pod_groups import (
    between_pods,
    ended_at,
    newer_live_pods,
    next_run_begun,
    pods_of_the_new_run,
    run_uid,
    runs_again,
)
from muster.core.predecessors import handed_over, running
from muster.core.settings import QueueSettings, Settings
from muster.core.spec import priority_of, spec_of, with_spec
from muster.core.topology import admitted_detail, pinned_node
from muster.core.topology import refusal as topology_refusal

# Kueue's reason for a workload its queue will not take (e.g. a LocalQueue missing).
INADMISSIBLE = "Inadmissible"


def inadmissible(w: Workload, settings: Settings) -> str | None:
    """Why the cluster's or the administrator's rules keep `w` from admission, or None.

    A PriorityClass that does not exist is refused whatever `queueAccess` says, as
    Kueue refuses it: the API server would refuse the workload's pods anyway. A
    queue the settings do not name is refused (`Settings.refusal`).
    """
    if w.priority_class_missing:
        return f"PriorityClass {w.priority_class} does not exist"
    if w.topology:
        refused = topology_refusal(w.topology, w.queue, settings.for_queue(w.queue).topology_levels)
        if refused is not None:
            return refused
    return settings.refusal(w.queue, w.key, w.priority, w.priority_class)


def admissible(w: Workload, now: float) -> bool:
    """May the admission pass pick this workload now?"""
    if w.phase is not Phase.PENDING:
        return False
    if w.requeue_at is not None and w.requeue_at > now:
        return False
    # A pod group is held by scheduling gates on pods that exist; after an eviction
    # deleted them it waits for its controller to create replacements.
    return not (w.kind is Kind.POD_GROUP and w.live_pods < w.gang_size)


def observe_workload(
    w: Workload | None, e: WorkloadObserved, settings: Settings, now: float = 0.0
) -> Decision:
    """The workload object as the cluster reports it: new, changed, or a new object
    under a known name."""
    if e.gang_size < 1:
        return Decision(w, outcome=Outcome.IGNORED, note=f"gang size {e.gang_size} is below 1")
    if w is not None and e.uid and w.uid and e.uid != w.uid:
        if e.seq and e.seq < w.spec_seq:
            return Decision(w, outcome=Outcome.STALE, note=f"an earlier object named {w.key}")
        return _new_incarnation(w, e, settings)
    if w is not None and runs_again(w, e):
        return _run_again(w, e, settings)
    if w is None:
        return _submitted(e, (), settings)
    if e.seq <= w.spec_seq:
        outcome = Outcome.DUPLICATE if e.seq == w.spec_seq else Outcome.STALE
        return Decision(w, outcome=outcome)
    spec = spec_of(e)
    if w.phase in ACTIVE_PHASES and outgrows(w, spec):
        base = replace(w, spec_seq=e.seq, uid=w.uid or e.uid, **priority_of(e))
        grown = outgrew_admission(base, spec, settings.for_queue(w.queue), now)
        assert grown.workload is not None
        return replace(grown, workload=_refresh_admissibility(grown.workload, settings))
    updated = _refresh_admissibility(_changed(w, e), settings)
    effects: tuple[Effect, ...] = ()
    if _admission_may_differ(w, updated):
        effects = (RunAdmission("workload changed"),)
    return Decision(updated, effects)


def outgrows(w: Workload, spec: Mapping[str, Any]) -> bool:
    """Whether `spec` asks for more than `w` holds: a larger gang or more GPUs.

    Not for a pod group: its members come and go with their controller, and what
    an admitted group may release is the pod rules' to say.
    """
    if w.kind is Kind.POD_GROUP:
        return False
    return bool(spec["gangSize"] > w.gang_size or spec["gpus"] > w.gpus)


def _changed(w: Workload, e: WorkloadObserved) -> Workload:
    """`w` with the newer spec of `e`: at once, or at the next eviction if it holds pods."""
    updated = replace(w, spec_seq=e.seq, uid=w.uid or e.uid, **priority_of(e))
    spec = spec_of(e)
    if w.phase in ACTIVE_PHASES:
        # What it asks for, and whose quota pays for it, only change while it holds
        # nothing on the cluster: the change waits for the next eviction (one that
        # asks for more evicts it at once: `outgrows`).
        return replace(updated, next_spec=None if spec == spec_of(w) else spec)
    return with_spec(updated, spec)


def _refresh_admissibility(w: Workload, settings: Settings) -> Workload:
    """Whether it may be admitted can change with its class or queue: say so."""
    if w.phase is not Phase.PENDING:
        return w
    refusal = inadmissible(w, settings)
    if refusal is not None:
        return replace(w, reason=INADMISSIBLE, message=refusal)
    if w.reason == INADMISSIBLE:
        return replace(w, reason=None, message=None)
    return w


def _admission_may_differ(before: Workload, after: Workload) -> bool:
    """Whether a pending workload's change may change what the admission pass chooses."""
    return after.phase is Phase.PENDING and (
        after.priority != before.priority
        or after.queue != before.queue
        or after.gpus != before.gpus
        or after.shape != before.shape
        or after.placement != before.placement
        or after.topology != before.topology
        or after.reason != before.reason
    )


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
        uid=run_uid(e),
        born_seq=e.seq if e.uid else 0,
        queued_at=e.created_at,
        shape=e.shape,
        placement=e.placement,
        topology=e.topology,
        **priority_of(e),
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
    old object (shells keep pods per incarnation). What the old one still holds,
    its pods running on, the new record carries apart (`predecessors.handed_over`).
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
    new = _submitted(e, tuple(ended), settings)
    assert new.workload is not None
    held = handed_over(w)
    if held:
        new = replace(new, workload=replace(new.workload, predecessors=held))
    return replace(new, reborn=True)


def _run_again(w: Workload, e: WorkloadObserved, settings: Settings) -> Decision:
    """A pod group run again under its name after its last run ended: a new
    incarnation, with the pods of the new run already heard of; any other pod
    event older than the end is of the last run."""
    again = _new_incarnation(w, e, settings)
    assert again.workload is not None
    fresh = replace(again.workload, born_seq=w.spec_seq, pods=pods_of_the_new_run(w))
    return replace(again, workload=fresh)


def finish(w: Workload, e: WorkloadFinished, now: float, settings: Settings) -> Decision:
    """The workload object is gone or done: its timers stop and what it held is free."""
    if between_pods(w, e):
        return Decision(w, outcome=Outcome.IGNORED, note=f"pod group {w.key} has no pods now")
    if next_run_begun(w, e):
        return _ended_late(w, e, now, settings)
    return _ended(w, e)


def _ended(w: Workload, e: WorkloadFinished) -> Decision:
    """The end of the incarnation `w` (unless `e` is of another, or said before)."""
    later = bool(e.uid and w.uid and e.uid != w.uid)
    if later:
        if not e.seq or e.seq < w.spec_seq:
            return Decision(w, outcome=Outcome.STALE, note=f"an earlier object named {w.key}")
        if w.phase is Phase.FINISHED:
            # A later object under this name ended too: remember it, so its own late
            # events are recognised (what the earlier one holds, it carries apart).
            after = replace(w, uid=e.uid, spec_seq=max(w.spec_seq, e.seq))
            return Decision(_handed_over(after, w), reborn=True)
    elif w.phase is Phase.FINISHED:
        return Decision(w, outcome=Outcome.DUPLICATE)
    elif e.seq and e.seq < w.spec_seq:
        # A snapshot older than the workload's last change cannot say it is gone.
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
        spec_seq=ended_at(w, e),
    )
    effects.append(
        Publish(LogEvent.FINISHED, w.key, {"reason": str(e.reason), "attempt": w.attempt})
    )
    if held:
        effects.append(RunAdmission("finished"))
    if later:
        # A later object's end: `w`'s object is gone too, its pods maybe running on.
        return Decision(_handed_over(done, w), tuple(effects), reborn=True)
    return Decision(done, tuple(effects))


def _handed_over(record: Workload, w: Workload) -> Workload:
    """`record`, now a later object's, with none of `w`'s pods and what `w` held carried
    apart (`predecessors.handed_over`)."""
    return replace(record, pods={}, listed={}, predecessors=handed_over(w))


def outlived_by_pods(w: Workload) -> bool:
    """Whether `w` was deleted while it held quota and pods of it still run.

    `kubectl delete --cascade=orphan` removes the object and leaves its pods running
    (a plain delete leaves them terminating for a while): their GPUs are in use
    until they are gone, so the workload holds its quota until then; a pending one
    too, as it may still be bound. Pods of an evicted attempt count as well: an
    eviction that met the object gone withdrew nothing. A workload never admitted
    was never charged.
    """
    return _deleted_once_admitted(w) and any(running(p) for p in w.pods.values())


def _deleted_once_admitted(w: Workload) -> bool:
    """Deleted after it was charged: only then can pods that outlive it hold quota."""
    return w.phase is Phase.FINISHED and w.reason == Reason.DELETED and w.attempt > 0


def ends_outliving(w: Workload, before: Pod | None, after: Pod | None) -> bool:
    """Whether a pod's new record may end the holding of a deleted workload whose pods
    outlived it (`outlived_by_pods`): the pod stopped running. A shell that stores pods
    apart then asks for an admission pass, which reads the gang and judges."""
    return (
        _deleted_once_admitted(w)
        and before is not None
        and running(before)
        and (after is None or not running(after))
    )


def starts_outliving(w: Workload, before: Pod | None, after: Pod | None) -> bool:
    """Whether a pod's new record may start the holding of a deleted workload again: a
    pod it had not heard of running (one bound after its deletion was heard, or
    whose events came late), so a shell that stores pods apart judges the gang."""
    return (
        _deleted_once_admitted(w)
        and after is not None
        and running(after)
        and (before is None or not running(before))
    )


def _ended_late(w: Workload, e: WorkloadFinished, now: float, settings: Settings) -> Decision:
    """A pod group's run ended (at `e`'s revision) after its next run began: the run
    is finished there, and the next starts now with the pods newer than the end, as
    its own incarnation that waits for its own admission. What of it the ended run
    released (taken for replacements of its pods) is withdrawn: it comes back gated."""
    newer = newer_live_pods(w, e.seq)
    ended = _ended(replace(w, spec_seq=min(w.spec_seq, e.seq)), e)
    assert ended.workload is not None
    done = ended.workload
    seq = max([w.spec_seq, *(p.seq for p in newer.values())])
    again = _run_again(done, _report(w, seq), settings)
    withdraw: list[Effect] = []
    if w.phase in ACTIVE_PHASES and newer:
        # No uid: the ended run's is not the new one's, and the fence must let it pass.
        withdraw.append(Evict(w.key, w.attempt, w.kind, Reason.SUCCEEDED, None))
    effects = (*ended.effects, *withdraw, *again.effects)
    return replace(again, effects=effects)


def _report(w: Workload, seq: int) -> WorkloadObserved:
    """The group's report at revision `seq`, as its spec stands (a pending change included)."""
    spec = w if w.next_spec is None else with_spec(w, w.next_spec)
    return WorkloadObserved(
        w.key,
        spec.queue,
        spec.gang_size,
        gpus=spec.gpus,
        priority=w.priority,
        kind=w.kind,
        created_at=w.created_at,
        timeout_override=spec.timeout_override,
        seq=seq,
        priority_class=w.priority_class,
        class_priority=None if w.priority_class_missing else w.priority,
        shape=spec.shape,
        placement=spec.placement,
        topology=spec.topology,
    )


def reactivate(w: Workload, now: float) -> Decision:
    """A deactivated workload queued again with its requeuing counts reset."""
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


def admit(w: Workload, e: AdmissionGranted, qs: QueueSettings, now: float) -> Decision:
    """The admission pass chose `w`: release its pods and start the startup deadline."""
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
        rearms=0,
        reason=None,
        message=None,
        dry_run_evicted=False,
        fault_timer=None,
        fault_episodes=0,
        domain=e.domain,
    )
    detail: dict[str, Any] = {
        "attempt": e.attempt,
        "deadline": timer.deadline,
        "timeoutSeconds": timeout,
    }
    if w.topology:
        detail |= admitted_detail(w.topology, e.domain, w.queue, qs.topology_levels)
    elif node := pinned_node(e.domain):
        detail["node"] = node  # packed onto it (`nodePacking`)
    effects: list[Effect] = [
        Admit.of(admitted, e.attempt),
        StartTimer(w.key, timer),
        Publish(LogEvent.ADMITTED, w.key, detail),
    ]
    if admitted.whole:
        # A pod group can be whole the moment its gate is lifted (e.g. pods already running).
        return became_ready(admitted, effects, now)
    return Decision(admitted, tuple(effects))
