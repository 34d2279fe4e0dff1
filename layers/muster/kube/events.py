"""Muster's lifecycle events as Kubernetes Events on the workload, for `kubectl describe`.

Reasons follow Kueue's (`Admitted`, `EvictedDueToPodsReadyTimeout`, `Requeued`,
`DeactivatedDueToRequeuingLimitExceeded`, ...), so "why was my job evicted" is
answered where users look, without AWS credentials. Only the events a user acts on
are shown; the full history stays in Muster's own record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from muster.core.model import LogEvent
from muster.core.printable import printable

REPORTING_COMPONENT = "muster.io/controlplane"
MAX_NOT_READY_NAMED = 5


@dataclass(frozen=True, slots=True)
class KubeEvent:
    """What one Kubernetes Event says: its type, reason and message."""

    type: str  # "Normal" or "Warning"
    reason: str
    message: str


def describe(event: LogEvent, detail: Mapping[str, Any], workload: str = "") -> KubeEvent | None:
    """The Kubernetes Event for a lifecycle event, or None for those not shown.

    `workload`: the key the CLI takes back (`ns/train@pytorchjob` is not the Job `ns/train`).
    """
    attempt = detail.get("attempt")
    match event:
        case LogEvent.ADMITTED:
            return KubeEvent(
                "Normal",
                "Admitted",
                f"Admitted by Muster (attempt {attempt}); all pods must be Ready by "
                f"{_time(detail.get('deadline'))} (timeout {_seconds(detail.get('timeoutSeconds'))})"
                + (f"; placed in {detail['domain']}" if detail.get("domain") else "")
                + (f"; packed onto node {detail['node']}" if detail.get("node") else ""),
            )
        case LogEvent.PODS_READY:
            text = f"All pods Ready ({detail.get('reason')}) in attempt {attempt}"
            if "secondsSinceAdmission" in detail:
                text += f", {_seconds(detail['secondsSinceAdmission'])} after admission"
            return KubeEvent("Normal", "PodsReady", text)
        case LogEvent.WAIT_FOR_RECOVERY:
            return KubeEvent(
                "Warning",
                "WaitForRecovery",
                f"Lost readiness in attempt {attempt}; the gang must be whole again by "
                f"{_time(detail.get('deadline'))} or it is evicted",
            )
        case LogEvent.EVICTED:
            return _evicted(detail)
        case LogEvent.REQUEUED:
            return KubeEvent(
                "Normal",
                "Requeued",
                f"Requeued (requeue count {detail.get('count')}); admissible again after "
                f"{_time(detail.get('requeueAt'))} (backoff {_seconds(detail.get('delaySeconds'))})",
            )
        case LogEvent.DEACTIVATED:
            why = (
                f"{detail['summary']}"
                if detail.get("summary")
                else f"{detail.get('reason')} after {detail.get('count')} requeues"
            )
            return KubeEvent(
                "Warning",
                f"DeactivatedDueTo{detail.get('reason')}",
                f"Deactivated: {why}; it stays held until "
                f"`muster reactivate{' ' + workload if workload else ''}` revives it",
            )
        case LogEvent.REACTIVATED:
            return KubeEvent("Normal", "Reactivated", "Reactivated: queued again, no backoff")
        case _:
            return None


def _not_about_readiness(reason: str, detail: Mapping[str, Any]) -> KubeEvent | None:
    """The Event of an eviction that is not about the gang's readiness, or None."""
    if reason == "AdmissionRefused" or detail.get("refused"):
        head = (
            f"Evicted attempt {detail.get('attempt')}: the API server refused to release it "
            f"({detail.get('error') or 'no error given'}); "
            + ("the requeuing limit is reached" if detail.get("refused") else "queued again")
        )
        return KubeEvent("Warning", f"EvictedDueTo{reason}", head)
    if reason == "OutgrewAdmission":
        admitted, asked = detail.get("admitted") or {}, detail.get("requested") or {}
        head = (
            f"Evicted attempt {detail.get('attempt')}: it asks for {asked.get('gangSize')} pods "
            f"and {asked.get('gpus')} GPUs, more than the {admitted.get('gangSize')} pods and "
            f"{admitted.get('gpus')} GPUs it was admitted with; queued again with the new size"
        )
        return KubeEvent("Warning", f"EvictedDueTo{reason}", head)
    return None


def _evicted(detail: Mapping[str, Any]) -> KubeEvent:
    reason = str(detail.get("reason"))
    other = _not_about_readiness(reason, detail)
    if other is not None:
        return other
    # The eviction that deactivates (reason Deactivated) names the timeout as `timedOut`.
    cause = detail.get("timedOut") or detail.get("cause")
    dry = bool(detail.get("dryRun"))
    early = reason == "WorkloadFault" or detail.get("evictedEarly")
    head = f"{'Would evict (dry run)' if dry else 'Evicted'} attempt {detail.get('attempt')}: " + (
        "every not-ready pod failed on its own for workloadFaults.evictAfter"
        if early
        else f"not all pods Ready before the {cause} deadline"
        if cause
        else f"node {detail.get('node')} is failing ({detail.get('health') or 'NotReady'})"
    )
    if detail.get("timedOut"):
        head += ", and the requeuing limit is reached"
    if "readyPods" in detail:
        head += f" ({detail['readyPods']}/{detail.get('gangSize')} ready)"
    summary = (detail.get("diagnosis") or {}).get("summary")
    if summary:
        head += f"; {summary}"
    not_ready = list(detail.get("notReady") or [])
    if not_ready:
        named = [_pod(p) for p in not_ready[:MAX_NOT_READY_NAMED]]
        more = len(not_ready) - len(named)
        head += "; not ready: " + ", ".join(named) + (f" and {more} more" if more > 0 else "")
    return KubeEvent("Warning", f"{'WouldEvict' if dry else 'Evicted'}DueTo{reason}", head)


def _pod(p: Any) -> str:
    if not isinstance(p, Mapping):
        return str(p)
    why = ": ".join(str(x) for x in (p.get("reason"), p.get("message")) if x)
    where = f" on {p['node']}" if p.get("node") else ""
    return f"{p.get('pod')} ({p.get('phase')}{where}{', ' + why if why else ''})"


def _time(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "unknown"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(value: Any) -> str:
    if not isinstance(value, int | float):
        return "unknown"
    return f"{round(value)}s"


def event_body(
    *,
    involved: Mapping[str, Any],
    event: KubeEvent,
    key: str,
    at: float,
) -> dict[str, Any]:
    """A core/v1 Event about `involved` (apiVersion, kind, name, namespace, uid).

    The name is derived from `key` (the lifecycle event's idempotency key), so a
    retried effect creates the same Event and the API server refuses the duplicate.
    """
    name = str(involved["name"])
    digest = hashlib.sha256(f"{key}/{name}".encode()).hexdigest()[:16]
    stamp = _time(at)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name[:200]}.{digest}", "namespace": involved["namespace"]},
        "involvedObject": {k: v for k, v in involved.items() if v},
        "type": event.type,
        "reason": event.reason,
        # Built from lifecycle details that may hold tenant text (a pod's message).
        "message": printable(event.message)[:1024],
        "source": {"component": REPORTING_COMPONENT},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": "muster",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
