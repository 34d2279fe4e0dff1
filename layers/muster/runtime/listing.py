"""The pod listing kept out of the workload item: stamps on pod items, rebuilt on load.

The core remembers the last complete pod snapshot of a workload (`listed_seq`,
and `listed`: name -> uid) and asks `listed.get(pod)` only of an event of a pod
that is news (unknown, a tombstone, or another uid) and older than the snapshot.
A 4,096-pod listing does not fit in the workload item, so the stores keep only
`listed_seq` there and say the rest on the pod items: a pod item that is not
deleted stands for its own uid; only where the listing said something else (no
item: a stub item that is not a pod; a tombstone; another uid) does the item
carry a stamp, the listing's revision and uid. In the steady state a listing
stamps nothing. A stamp of an older listing is ignored; a pod write whose new
record no longer stands for what the listing said keeps the stamp on the item.

Both stores rebuild from the items a map that gives the core's rule the same
answer as the listing itself: equal to it wherever it names a pod; beyond it only
the uid of a pod stored at or after the listing (a live pod's own, or kept from
one), whose older events are refused either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from muster.core import Pod, Workload
from muster.runtime.ports import PodWrite, Stored, belongs


@dataclass(frozen=True, slots=True)
class Stamp:
    """What the listing at `rev` held under a pod's name: `uid`."""

    rev: int
    uid: str


def stands_for(pod: Pod | None, owner: str, uid: str) -> str | None:
    """The uid an item stands for without a stamp: a pod of this incarnation not deleted."""
    if pod is None or pod.deleted or not belongs(owner, uid):
        return None
    return pod.uid


def entry(
    listed_seq: int, stamp: Stamp | None, pod: Pod | None, owner: str, uid: str
) -> str | None:
    """What the current listing held under an item's name, as far as the core asks."""
    if stamp is not None and stamp.rev == listed_seq:
        return stamp.uid
    return stands_for(pod, owner, uid)


def rebuilt(
    listed_seq: int,
    items: Iterable[tuple[str, Stamp | None, Pod | None, str]],
    uid: str,
) -> dict[str, str]:
    """The listing of a workload from its items: (name, stamp, pod or None, owner) each."""
    if not listed_seq:
        return {}
    found: dict[str, str] = {}
    for name, stamp, pod, owner in items:
        value = entry(listed_seq, stamp, pod, owner, uid)
        if value is not None:
            found[name] = value
    return found


def listed_entry(w: Workload, name: str) -> tuple[int, str] | None:
    """(revision, uid) of the loaded listing for one pod: what a pod write must keep."""
    if not w.listed_seq or name not in w.listed:
        return None
    return w.listed_seq, w.listed[name]


def carried(write: PodWrite) -> Stamp | None:
    """The stamp a lone pod write puts on its item (from `PodWrite.listed`)."""
    if write.listed is None:
        return None
    rev, uid = write.listed
    if stands_for(write.pod, write.owner, write.owner) == uid:
        return None
    return Stamp(rev, uid)


@dataclass(frozen=True, slots=True)
class Stamping:
    """The stamps a workload write makes: on the pods it writes, and on other items."""

    written: Mapping[str, Stamp]
    others: Mapping[str, Stamp]


def stamping(before: Stored | None, after: Workload, writes: Sequence[PodWrite]) -> Stamping:
    """What makes the items after this write stand for `after.listed`.

    `after.listed` is the listing a decision was made on (rebuilt on load, or a new
    snapshot's). A written pod that no longer stands for it is stamped; an item not
    written is stamped only where a new listing (or a new uid) makes it stand for
    something else than before.
    """
    listed_seq = after.listed_seq
    if not listed_seq:
        return Stamping({}, {})
    written = {w.name: w for w in writes}
    old_pods = before.workload.pods if before else {}
    old_uid = before.workload.uid if before else after.uid
    relisted = before is None or before.workload.listed_seq != listed_seq
    on_written: dict[str, Stamp] = {}
    others: dict[str, Stamp] = {}
    for name, uid in after.listed.items():
        write = written.get(name)
        if write is not None:
            if stands_for(write.pod, write.owner, after.uid) != uid:
                on_written[name] = Stamp(listed_seq, uid)
            continue
        old = old_pods.get(name)
        if stands_for(old, old_uid, after.uid) == uid:
            continue
        # Stamped already unless the listing is new, or the item stood for it until now.
        if relisted or stands_for(old, old_uid, old_uid) == uid:
            others[name] = Stamp(listed_seq, uid)
    return Stamping(on_written, others)
