"""What a commit writes beside the workload item: its pods, and the counts' changes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from muster.core import Workload
from muster.runtime.ports import PodWrite, Stored


def reborn_writes(snap: Stored | None, after: Workload) -> list[PodWrite]:
    """The pods a new incarnation starts with (a pod group run again may have been
    heard of pod first), written as its own; the rest of the old one's expire."""
    revs = snap.pod_revs if snap else {}
    return [PodWrite(name, pod, revs.get(name), after.uid) for name, pod in after.pods.items()]


def pod_writes(snap: Stored | None, after: Workload, evicted: bool) -> list[PodWrite]:
    """The pod items to put or delete; an eviction retires pods by the epoch instead."""
    before = snap.workload.pods if snap else {}
    revs = snap.pod_revs if snap else {}
    writes: list[PodWrite] = []
    for name, pod in after.pods.items():
        old = before.get(name)
        if old == pod:
            continue
        if evicted and old is not None and pod == replace(old, retired=True, ready=False):
            continue
        writes.append(PodWrite(name, pod, revs.get(name), after.uid))
    for name in before:
        if name not in after.pods:
            writes.append(PodWrite(name, None, revs.get(name), after.uid))
    return writes


def count_deltas(
    snap: Stored | None, after: Workload, writes: Sequence[PodWrite], new_epoch: bool
) -> tuple[int, int]:
    """How a commit moves the stored counts of pods counting ready and alive.

    A new workload or epoch resets them to what the pods written with it count (the
    rest are the evicted attempt's, or the earlier incarnation's).
    """
    if snap is None or new_epoch:
        pods = [w.pod for w in writes if w.pod is not None]
        return sum(p.counts_ready for p in pods), sum(p.live for p in pods)
    before = snap.workload
    return after.ready_pods - before.ready_pods, after.live_pods - before.live_pods
