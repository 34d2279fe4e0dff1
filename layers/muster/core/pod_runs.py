"""A run of pod events of one gang, decided at once for a shell that stores pods apart.

Each event is `observe_stored_pod`'s, applied in order to the pod records the
events before it left (several events of one pod fold; duplicates and stale
events are what they would be one by one). The run stops where handling the
events one at a time could have moved the gang: after an event whose count says
the gang may have become whole, or stopped being whole (`gang_may_have_moved`),
so that the shell writes that much, counts the gang again and lets the core
decide before the next event is looked at, exactly as one-by-one handling would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from muster.core.model import Outcome, Pod, PodChange, PodObserved, Workload
from muster.core.pods import gang_may_have_moved, observe_stored_pod
from muster.core.settings import Settings


@dataclass(frozen=True, slots=True)
class PodRun:
    """What the first `taken` events of a run do to the gang's stored pods.

    `pods`: the new record of each pod that changed (written once each, with
    `ready_delta` and `live_delta`, the sums of the events' deltas); `recount`: the shell reads the
    count back after the write (with `faults`, the `workloadFaults` watch may have
    moved); `whole_gang`: the event after the taken ones needs the whole gang.
    """

    changes: tuple[PodChange, ...] = ()
    pods: Mapping[str, Pod | None] = field(default_factory=dict)
    ready_delta: int = 0
    recount: bool = False
    faults: bool = False
    whole_gang: bool = False
    live_delta: int = 0

    @property
    def taken(self) -> int:
        return len(self.changes)


def observe_stored_pods(
    w: Workload,
    known: Mapping[str, Pod | None],
    ready_count: int,
    events: Sequence[PodObserved],
    settings: Settings,
    *,
    limit: int,
    live_count: int | None = 0,
) -> PodRun:
    """The longest prefix of `events` that one write of at most `limit` pods can carry.

    `w` is the workload without its pods, `known` the stored records of the pods
    the events name, `ready_count` and `live_count` the gang's stored counts (None:
    the store does not count live pods yet).
    """
    current = dict(known)
    changed: dict[str, Pod | None] = {}
    changes: list[PodChange] = []
    delta = live = 0
    recount = faults = False
    whole_gang = False
    for e in events:
        if e.pod not in changed and len(changed) >= limit:
            break
        change = observe_stored_pod(
            w,
            current.get(e.pod),
            e,
            settings,
            counts_live=live_count is not None,
            live_count=(live_count or 0) + live,
        )
        if change.whole_gang:
            whole_gang = True
            break
        changes.append(change)
        if change.outcome is Outcome.APPLIED:
            current[e.pod] = changed[e.pod] = change.pod
            delta += change.ready_delta
            live += change.live_delta
        recount = recount or change.recount
        faults = faults or change.faults
        lives = (live_count or 0) + live if change.live_delta > 0 else None
        if change.recount and gang_may_have_moved(
            w, ready_count + delta, faults=change.faults, live_count=lives
        ):
            break  # the gang may move here: write this much and count it first
    return PodRun(tuple(changes), changed, delta, recount, faults, whole_gang, live)
