"""A pod group's runs: plain pods under a `muster.io/pod-group` name, with no object
(and so no uid) of their own.

The control plane gives each run of a group its own identity, so that a group run
again under its name after the last run ended is a new workload incarnation (its
own attempts, its own timer names), as a Job re-created under its name is: the
run's uid is the revision at which the control plane first saw it. The revision
is the cluster's, carried by the event, so every shell (the Lambdas, the
simulator, a redelivery) derives the same one.

A group's pods vanishing is not the group ending: its controller replaces them
(after an eviction, or a rollout), so only its success ends it.

An admitted group is released up to its gang size and no further
(`pods_to_release`): its pods beyond the size stay gated, and after the admission
only as many are released as its released pods that still run fall short of it
(replacements of lost members). The size is the one admitted and charged for, so
a group never runs more pods than its charge.

Events come in any order, so the end of a run may be heard of after the next run
began: after its pods (which an admitted group takes for replacements and releases)
or its active report. The end still ends that run at its own revision, and the
pods newer than it start the next run at once (`next_run_begun`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from muster.core.model import (
    ACTIVE_PHASES,
    Admit,
    Kind,
    Phase,
    Pod,
    Reason,
    Workload,
    WorkloadFinished,
    WorkloadObserved,
)


def run_uid(e: WorkloadObserved) -> str:
    """The identity of the run of a pod group that `e` is the first sight of."""
    return f"pg-{e.seq}" if e.kind is Kind.POD_GROUP and not e.uid and e.seq else e.uid


def runs_again(w: Workload, e: WorkloadObserved) -> bool:
    """Whether `e` shows a new run of a pod group whose last run ended.

    The agent reports a group as active only while it has pods that have not
    finished, so an active report newer than the end (the revision `finish`
    recorded) is of pods created since: a new run under the same name.
    """
    return (
        w.kind is Kind.POD_GROUP
        and e.kind is Kind.POD_GROUP
        and w.phase is Phase.FINISHED
        and not e.uid
        and e.seq > w.spec_seq
    )


def pods_of_the_new_run(w: Workload) -> dict[str, Pod]:
    """The pods of a new run heard of before the report that started it (events come
    in any order): live, and newer than the end of the last run."""
    return newer_live_pods(w, w.spec_seq)


def ended_at(w: Workload, e: WorkloadFinished) -> int:
    """The revision a finished workload's record keeps: for a pod group, that of its
    end, so that only a later report starts a new run (`runs_again`)."""
    return max(w.spec_seq, e.seq) if w.kind is Kind.POD_GROUP else w.spec_seq


def next_run_begun(w: Workload, e: WorkloadFinished) -> bool:
    """Whether the end `e` of a pod group's run comes after its next run began: a pod
    newer than the end is live, or the group was reported active after it (an active
    report needs a pod that has not finished, and none had at the end).

    Only an end of the run `w` holds: newer than the end of the run before it."""
    return (
        w.kind is Kind.POD_GROUP
        and w.phase is not Phase.FINISHED
        and e.reason is not Reason.DELETED
        and e.seq > w.born_seq
        and (w.spec_seq > e.seq or bool(newer_live_pods(w, e.seq)))
    )


def newer_live_pods(w: Workload, seq: int) -> dict[str, Pod]:
    """The pods of `w` that have not finished and are newer than revision `seq`."""
    return {n: p for n, p in w.pods.items() if p.live and p.seq > seq}


def between_pods(w: Workload, e: WorkloadFinished) -> bool:
    """Whether a "deleted" pod group is only between pods: one with none to release
    (say all being replaced at its admission) waits for its controller's new ones."""
    return w.kind is Kind.POD_GROUP and e.reason is Reason.DELETED


@dataclass(frozen=True, slots=True)
class ListedMember:
    """A pod of a group as the cluster lists it when the group's release is carried out."""

    name: str
    gated: bool  # it still carries Muster's scheduling gate
    # Succeeded, Failed or terminating: it no longer counts toward the gang size (a
    # terminating pod's replacement is released while the pod winds down).
    ended: bool = False
    gpus: int | None = 0  # the GPUs it asks for (None: a count no pod can have)


def gpus_each(effect: Admit) -> int:
    """The GPUs a released pod of the group may ask for: its share of the charge."""
    return -(-effect.gpus // effect.size) if effect.size else 0


def release_due(before: Workload, w: Workload) -> bool:
    """Whether an admitted group's pods changing may leave some to release: new pods
    (replacements arrive gated), or a pod lost while more pods than the gang were
    live (gated ones beyond the gang may now replace it). `pods_to_release` says
    how many, when the cluster lists them."""
    if w.kind is not Kind.POD_GROUP or w.phase not in ACTIVE_PHASES:
        return False
    return live_change_releases(before.live_pods, w.live_pods, w.gang_size)


def live_change_releases(before: int, after: int, gang_size: int) -> bool:
    """`release_due` in counts of live pods (for shells that keep the count apart)."""
    return after > before or (after < before and before > gang_size)


def pods_to_release(
    size: int, members: Iterable[ListedMember], each: int | None = None
) -> tuple[str, ...]:
    """The gated pods of an admitted group of gang size `size` to release, by name.

    As many as the released pods that have not ended fall short of `size`, the
    first gated ones by name: at the admission the gang's worth, afterwards only
    replacements of lost members; pods beyond the size stay gated, whatever is
    added to the group after it was charged. With `each`, a pod asking for more
    GPUs than that (or for a count no pod can have) stays gated too: one created
    after the group was charged never runs on the charge of a smaller one.
    """
    listed = list(members)
    running = sum(1 for m in listed if not m.gated and not m.ended)
    waiting = sorted(
        m.name
        for m in listed
        if m.gated and not m.ended and (each is None or (m.gpus is not None and m.gpus <= each))
    )
    return tuple(waiting[: max(0, size - running)])
