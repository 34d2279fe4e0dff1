"""The decision core: one workload's next state and the effects that carry it out.

`decide` is pure: no I/O, no clock (`now` is an argument), no global randomness
(`draw`, a number in [0, 1), scales the backoff jitter). The Lambdas, the
simulator and the local mode all call it, so its rules exist exactly once.

It sends each event to the rules of its concern, from the top down:

    decide        this module: which rules an event is for
    workloads     submitted, changed, re-created, admitted, finished, reactivated
    nodes         a node NotReady, Ready again, or being replaced
    pods          one pod's new record; the stored-pod path (`observe_stored_pod`)
    eviction      deadlines (also those a settings change brought back), evictions,
                  requeues with backoff, deactivation, a refused admission withdrawn
    gang          whole or not: the attempt's timers start, stop, move
    spec          what an admission is made of

Reasons and other `StrEnum` members become plain strings with `str(...)` in the
records, which is what `.value` gives, without `.value`'s Python-level property
(this runs per event).
"""

from __future__ import annotations

from muster.core.eviction import (
    admission_refused,
    fault_deadline,
    readiness_deadline,
    requeue_due,
)
from muster.core.gang import reassess
from muster.core.model import (
    AdmissionGranted,
    AdmissionRefused,
    DeadlineReached,
    Decision,
    Event,
    NodeObserved,
    Outcome,
    PodObserved,
    PodsCounted,
    PodsListed,
    Reactivate,
    RequeueDue,
    TimerKind,
    Workload,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.nodes import observe_node
from muster.core.pods import observe_pod, pods_listed
from muster.core.settings import Settings
from muster.core.workloads import (
    INADMISSIBLE,
    admissible,
    admit,
    finish,
    inadmissible,
    observe_workload,
    reactivate,
)

# What callers import from here: the admission pass asks whether a workload may be
# admitted, and the commands show why it may not.
__all__ = ["INADMISSIBLE", "admissible", "decide", "inadmissible"]


def decide(
    workload: Workload | None,
    event: Event,
    settings: Settings,
    now: float,
    *,
    draw: float = 0.0,
    details: bool = True,
) -> Decision:
    """Apply `event` to `workload` (None if unknown) at time `now`.

    With `details` off, an eviction leaves out what only a reader of its details
    wants: its diagnosis and not-ready pods (in what is published, and in the
    `Evict`); the decision, the state and every other effect are the same."""
    if workload is not None and workload.key != event.workload:
        return Decision(
            workload,
            outcome=Outcome.IGNORED,
            note=f"event for {event.workload!r} sent to {workload.key!r}",
        )
    if isinstance(event, WorkloadObserved):
        return observe_workload(workload, event, settings, now)
    if workload is None:
        return Decision(
            None, outcome=Outcome.UNKNOWN_WORKLOAD, note=f"no workload {event.workload!r}"
        )
    qs = settings.for_queue(workload.queue)
    match event:  # the event types are disjoint: most frequent first
        case PodObserved():
            return observe_pod(workload, event, settings, qs, now)
        case AdmissionGranted():
            return admit(workload, event, qs, now)
        case DeadlineReached():
            if event.kind is TimerKind.FAULT:
                return fault_deadline(workload, event, qs, now, draw, details=details)
            return readiness_deadline(workload, event, qs, now, draw, details=details)
        case RequeueDue():
            return requeue_due(workload, event, now)
        case WorkloadFinished():
            return finish(workload, event, now, settings)
        case NodeObserved():
            return observe_node(workload, event, qs, now)
        case PodsListed():
            return pods_listed(workload, event, qs, now)
        case PodsCounted():
            return reassess(workload, settings, now)
        case AdmissionRefused():
            return admission_refused(workload, event, qs, now, draw)
        case Reactivate():
            return reactivate(workload, now)
    raise TypeError(f"not an event: {event!r}")  # pragma: no cover - exhaustive match
