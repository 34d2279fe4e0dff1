"""Reconciliation: what a complete snapshot of the cluster says is gone.

Watches lose events (an agent gap, a lost message, a rollout), so the agent also
sends what the cluster holds: after every list of a resource, the workload keys
of that kind with their uids, or every workload's pods with theirs, stamped with
the list's revision. Here a complete snapshot becomes ordinary events: a deletion
of each known workload or pod the snapshot lacks (or holds under another uid), at
the snapshot's revision. The core's ordering rules then do the rest: anything that
changed after the snapshot was taken has a higher `seq` and stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from muster.core.model import (
    Event,
    Kind,
    Phase,
    PodsListed,
    Reason,
    Workload,
    WorkloadFinished,
)

POD_SCOPE = "Pod"
WORKLOAD_SCOPES = tuple(k.value for k in Kind if k is not Kind.POD_GROUP)
SCOPES = (*WORKLOAD_SCOPES, POD_SCOPE)


@dataclass(frozen=True, slots=True)
class SnapshotPart:
    """Part `part` of `parts` of one snapshot (`snapshot` is its id) of `scope` at `revision`.

    `scope` is a workload kind (`workloads`: key -> uid) or `Pod` (`pods`:
    workload key -> pod name -> uid). A snapshot is acted on only once every part
    of it has arrived.
    """

    snapshot: str
    part: int
    parts: int
    scope: str
    revision: int
    workloads: Mapping[str, str] = field(default_factory=dict)
    pods: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def complete(parts: Iterable[SnapshotPart]) -> SnapshotPart | None:
    """The whole snapshot if every part is there (and they agree), else None."""
    found = {p.part: p for p in parts}
    if not found:
        return None
    first = next(iter(found.values()))
    if set(found) != set(range(1, first.parts + 1)):
        return None
    if any(
        (p.snapshot, p.parts, p.scope, p.revision)
        != (first.snapshot, first.parts, first.scope, first.revision)
        for p in found.values()
    ):
        return None
    workloads: dict[str, str] = {}
    pods: dict[str, dict[str, str]] = {}
    for number in sorted(found):
        workloads.update(found[number].workloads)
        for key, members in found[number].pods.items():
            pods.setdefault(key, {}).update(members)
    return SnapshotPart(first.snapshot, 1, 1, first.scope, first.revision, workloads, pods)


def gone(w: Workload, snapshot: SnapshotPart) -> list[Event]:
    """What a complete `snapshot` tells workload `w`.

    For pods: the snapshot itself (`PodsListed`), which deletes the pods it lacks
    and makes any older event of a pod it lacks stale; also for a workload deleted
    while it held quota, whose pods may outlive it (it holds until they are gone).
    For a workload kind: the deletion of `w` if the snapshot lacks it (or holds
    another object under its name).
    """
    if w.phase is Phase.FINISHED:
        deleted = w.reason == Reason.DELETED and w.attempt > 0
        if snapshot.scope != POD_SCOPE or not deleted:
            return []
    if snapshot.scope == POD_SCOPE:
        return [PodsListed(w.key, snapshot.revision, dict(snapshot.pods.get(w.key, {})))]
    if w.kind.value != snapshot.scope or not _absent(snapshot.workloads, w.key, w.uid):
        return []
    return [WorkloadFinished(w.key, Reason.DELETED, snapshot.revision, uid=w.uid)]


def _absent(listed: Mapping[str, str], name: str, uid: str) -> bool:
    return name not in listed or bool(uid and listed[name] and listed[name] != uid)
