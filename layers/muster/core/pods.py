"""Pod events: one pod's new record, and for shells that store pods apart, whether
the gang is worth counting again.

A pod event is applied only if it is newer than what is known of the pod (its
revision, its incarnation, its deletion, a complete snapshot); what follows for
the gang is `muster.core.gang`'s.
"""

from __future__ import annotations

from collections.abc import Mapping

from muster.core.copying import replace
from muster.core.diagnosis import classify
from muster.core.gang import readiness
from muster.core.model import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    Decision,
    Kind,
    Outcome,
    Phase,
    Pod,
    PodChange,
    PodObserved,
    PodsListed,
    RunAdmission,
    Workload,
)
from muster.core.pod_groups import live_change_releases
from muster.core.predecessors import (
    PREDECESSOR_ENDED,
    compact,
    predecessor_of,
    predecessors_listed,
    runs,
    with_holding,
)
from muster.core.settings import QueueSettings, Settings

# Read per pod event: a member off its enum class costs a metaclass lookup each time.
_APPLIED = Outcome.APPLIED


def observe_pod(
    w: Workload, e: PodObserved, settings: Settings, qs: QueueSettings, now: float
) -> Decision:
    """A pod event for a workload that holds its pods: the pod, then the gang (or the
    holding of the earlier object under its key that owns the pod)."""
    if w.predecessors:
        i = predecessor_of(w, e)
        if i is not None:
            return _predecessor_pod(w, i, e)
    outcome, pod, note = _pod_record(w, w.pods.get(e.pod), e)
    if outcome is not _APPLIED:
        return Decision(w, outcome=outcome, note=note)
    pods = dict(w.pods)
    if pod is None:
        del pods[e.pod]
    else:
        pods[e.pod] = pod
    updated = replace(w, pods=pods)
    return readiness(w, updated, qs, now)


def _predecessor_pod(w: Workload, i: int, e: PodObserved) -> Decision:
    """A pod event of the earlier object whose holding `w` carries at `i`: the pod's
    record there, and an admission pass when the holding's last running pod ended."""
    h = w.predecessors[i]
    outcome, pod, note = pod_update(h.pods.get(e.pod), e)
    if outcome is not Outcome.APPLIED or pod is None:
        return Decision(w, outcome=outcome, note=note)
    held = replace(h, pods={**h.pods, e.pod: compact(pod)}, presumed=False)
    updated = replace(w, predecessors=with_holding(w.predecessors, i, held))
    if runs(h) and not runs(held):
        return Decision(updated, (RunAdmission(PREDECESSOR_ENDED),))
    return Decision(updated)


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
    refused = _older_than_the_workload(known, e, born, listed)
    if refused is None and known is not None:
        refused = _not_newer(known, e)
    if refused is not None:
        outcome, note = refused
        return outcome, known, note
    if e.deleted:
        return _APPLIED, _tombstone(known, e), ""
    return _APPLIED, _reported(known, e), ""


_ANOTHER_OBJECT = "pod {} of another object of this name"


def owned_by(w: Workload, e: PodObserved) -> bool:
    """Whether the pod of `e` may be the workload object's: not when its owner is known
    and is another object (a terminating pod of a deleted object outlives the object's
    re-creation under its name, with revisions newer than the new object's)."""
    return not (e.owner and w.uid and e.owner != w.uid)


def _older_than_the_workload(
    known: Pod | None, e: PodObserved, born: int, listed: tuple[int, Mapping[str, str]]
) -> tuple[Outcome, str] | None:
    """Why a pod event predates what the workload knows: its object, or a snapshot."""
    if born and e.seq < born and not e.deleted:
        return Outcome.STALE, f"pod {e.pod} of an earlier object of this name"
    listed_seq, listed_pods = listed
    news = known is None or known.deleted or (e.uid and known.uid and e.uid != known.uid)
    if news and not e.deleted and e.seq < listed_seq and listed_pods.get(e.pod) != e.uid:
        # Older than a complete snapshot that did not hold it: it was gone by then.
        return Outcome.STALE, f"pod {e.pod} was not in the snapshot at {listed_seq}"
    return None


def _not_newer(known: Pod, e: PodObserved) -> tuple[Outcome, str] | None:
    """Why a pod event does not supersede the pod's record, or None if it does."""
    same_incarnation = not e.uid or not known.uid or e.uid == known.uid
    if same_incarnation and e.seq <= known.seq:
        outcome = Outcome.DUPLICATE if e.seq == known.seq else Outcome.STALE
        return outcome, ""
    if same_incarnation and known.deleted:
        return Outcome.STALE, f"pod {e.pod} was deleted"
    if not same_incarnation and e.seq <= known.seq:
        # `seq` is the cluster-wide revision: the newer object of this name wins.
        return Outcome.STALE, f"an earlier pod named {e.pod}"
    if same_incarnation and known.retired and not e.deleted:
        # The pod belongs to an evicted attempt; only its deletion matters now.
        return Outcome.IGNORED, f"pod {e.pod} of an evicted attempt"
    return None


def _tombstone(known: Pod | None, e: PodObserved) -> Pod:
    """A deleted pod's record: late and redelivered events of it are recognised as stale.

    It keeps the pod's last revision while it lived: a pod of the same name can
    only be created after this one was deleted, so its events are all newer than
    that, and an earlier object's all older (a deletion found by a snapshot
    carries the snapshot's revision, which may be later than the new pod's).
    """
    return Pod(
        name=e.pod,
        seq=known.seq if known is not None and not known.deleted else e.seq,
        uid=e.uid or (known.uid if known else ""),
        phase=e.phase,
        deleted=True,
    )


def _reported(known: Pod | None, e: PodObserved) -> Pod:
    """A live pod's record as the event reports it."""
    # A report older than the NotReady of the node it names does not override that.
    node_down = (
        known is not None and known.node_down and known.node_seq > e.seq and known.node == e.node
    )
    return Pod(
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


def observe_stored_pod(
    w: Workload,
    known: Pod | None,
    e: PodObserved,
    settings: Settings,
    *,
    counts_live: bool = True,
    live_count: int = 0,
) -> PodChange:
    """A pod event for a shell that stores each pod apart from its workload.

    `w` is the workload without its pods and `known` the one pod's record; the
    gang's transitions follow once the shell has written the pod and counted the
    gang again (`gang_may_have_moved`, then `decide` with `PodsCounted`).
    `counts_live`: the store keeps the gang's count of live pods, `live_count`
    (before this event).
    """
    if w.predecessors and predecessor_of(w, e) is not None:
        return PodChange(Outcome.APPLIED, known, whole_gang=True)  # the holding is on `w`
    if w.kind is Kind.POD_GROUP and (not counts_live or w.phase is Phase.FINISHED):
        # A finished group's pods may be a new run's (`pod_groups.runs_again`).
        return PodChange(Outcome.APPLIED, known, whole_gang=True)
    outcome, pod, note = _pod_record(w, known, e)
    if outcome is not Outcome.APPLIED:
        # A redelivery after a crash between the pod write and the gang's transition:
        # count the gang again.
        return PodChange(outcome, pod, note, recount=outcome is Outcome.DUPLICATE)
    delta = _counts_ready(pod) - _counts_ready(known)
    live = _live(pod) - _live(known)
    releases = live_change_releases(live_count, live_count + live, w.gang_size)
    if w.kind is Kind.POD_GROUP and w.phase in ACTIVE_PHASES and releases:
        # An admitted group's new pod arrives gated, and a lost one may be replaced by
        # a gated pod beyond its gang: releasing them is the whole gang's.
        return PodChange(Outcome.APPLIED, known, whole_gang=True)
    grew = live > 0 and _waits_for_pods(w)
    faults = not delta and _fault_watch_moved(w, settings, known, pod)
    return PodChange(
        outcome,
        pod,
        note,
        delta,
        recount=bool(delta) or faults or grew,
        faults=faults,
        live_delta=live,
    )


def _pod_record(w: Workload, known: Pod | None, e: PodObserved) -> tuple[Outcome, Pod | None, str]:
    """One pod's new record for `w`, whichever way the shell keeps pods: only for the
    incarnation that owns it, newer than what is known, and of the current attempt."""
    if not owned_by(w, e):
        return Outcome.STALE, known, _ANOTHER_OBJECT.format(e.pod)
    outcome, pod, note = pod_update(known, e, born=w.born_seq, listed=(w.listed_seq, w.listed))
    if outcome is not _APPLIED:
        return outcome, pod, note
    return outcome, of_the_attempt(w, pod), note


def of_the_attempt(w: Workload, pod: Pod | None) -> Pod | None:
    """A live pod first heard of after its workload was evicted is one of the evicted
    attempt's (its event came late, say redelivered after a failed batch): it is
    retired, so it never counts for a later attempt.

    After an eviction a Job's pods are being removed (it is suspended) and a pod
    group's were deleted; a pod group's replacements are gated, so only a bound one
    is left over. Before the first admission nothing was evicted, and a workload's
    pods are its own.
    """
    if pod is None or w.attempt == 0 or w.phase in ACTIVE_PHASES or not pod.live:
        return pod
    if w.phase is Phase.FINISHED or (w.kind is Kind.POD_GROUP and pod.node is None):
        return pod
    return replace(pod, retired=True, ready=False)


def gang_may_have_moved(
    w: Workload, ready_count: int, *, faults: bool = False, live_count: int | None = None
) -> bool:
    """Whether a gang with `ready_count` Ready pods may have become whole, stopped
    being whole, or (with `faults`) moved its `workloadFaults` watch: only then is
    the whole gang worth loading. `live_count`, after a write that added live pods:
    a waiting pod group with that many may now be admitted."""
    if w.phase in NOT_READY_PHASES and (faults or ready_count >= w.gang_size):
        return True
    if live_count is not None and _waits_for_pods(w) and live_count >= w.gang_size:
        return True
    return w.phase is Phase.RUNNING and ready_count < w.gang_size


def _waits_for_pods(w: Workload) -> bool:
    return w.kind is Kind.POD_GROUP and w.phase is Phase.PENDING


def _counts_ready(pod: Pod | None) -> int:
    return int(pod is not None and pod.counts_ready)


def _live(pod: Pod | None) -> int:
    return int(pod is not None and pod.live)


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


def pods_listed(w: Workload, e: PodsListed, qs: QueueSettings, now: float) -> Decision:
    """A complete snapshot of pods: those it lacks (and older than it) are deleted."""
    if e.revision <= w.listed_seq:
        return Decision(w, outcome=Outcome.STALE, note="an older snapshot")
    pods = dict(w.pods)
    for p in w.pods.values():
        listed = e.pods.get(p.name)
        gone = listed is None or bool(p.uid and listed and listed != p.uid)
        if not p.deleted and gone and p.seq < e.revision:
            pods[p.name] = Pod(name=p.name, seq=p.seq, uid=p.uid, phase=p.phase, deleted=True)
    snapshot, ended = predecessors_listed(
        replace(w, pods=pods, listed_seq=e.revision, listed=dict(e.pods)), e
    )
    finished = w.phase is Phase.FINISHED
    decision = Decision(snapshot) if finished else readiness(w, snapshot, qs, now)
    if ended:
        return replace(decision, effects=(*decision.effects, RunAdmission(PREDECESSOR_ENDED)))
    return decision
