"""The control plane's own SQS messages: timer signals, requeues, admission requests,
and the slices of a snapshot's reconciliation (on the ingest queue).

Built and parsed in one module so that the sender and the consumer cannot drift.
A malformed message raises `InvalidEvent` naming every wrong field (a retry
cannot mend it), read with `muster.core.fields` as the agent's events are.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from muster.core import DeadlineReached, RequeueDue, Timer, TimerKind
from muster.core.fields import checked, collecting, problem, text, whole_number
from muster.schema import InvalidEvent, parse_time

REQUEUE = "requeue"
ADMISSION = "admission"
RECONCILE = "reconcileSlice"
EARLY = "earlyEvent"
EARLY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
"""How much later an agent event of a workload not yet known (a pod's before its
workload's, applied on another instance) is applied again, try by try. It is sent
back to the ingest queue rather than failed, so it does not wait out the queue's
visibility timeout; after the last try it fails as any other record (and in the
end reaches the dead-letter queue)."""
SQS_MAX_DELAY_SECONDS = 900
SETTINGS_CHANGED = "settings changed"
"""The reason of the admission request an administrator's settings change sends: the
admission function then also acts on the deadlines the change brought back."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """Run an admission pass; `workload` names the one that may have become admissible."""

    reason: str
    workload: str | None = None
    retry: int = 0  # passes that failed before this one was asked for


@dataclass(frozen=True, slots=True)
class ReconcileSlice:
    """Slice `slice` of the reconciliation of snapshot `snapshot` (of `scope`, at `revision`):
    the workloads it still has to bring in line with the snapshot; `tries` counts the
    times some of them failed."""

    scope: str
    snapshot: str
    revision: int
    slice: int
    keys: tuple[str, ...]
    tries: int = 0


def reconcile_body(s: ReconcileSlice) -> str:
    return json.dumps(
        {
            "type": RECONCILE,
            "scope": s.scope,
            "snapshot": s.snapshot,
            "revision": s.revision,
            "slice": s.slice,
            "keys": list(s.keys),
            "tries": s.tries,
        }
    )


def parse_reconcile_message(doc: dict[str, Any]) -> ReconcileSlice:
    """A slice message's fields (`doc` is its JSON object, with `type` == RECONCILE)."""
    with collecting(InvalidEvent):
        keys = doc.get("keys")
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            problem("keys: expected a list of workload keys")
            keys = []
        message = ReconcileSlice(
            scope=checked("", text, doc, "scope"),
            snapshot=checked("", text, doc, "snapshot"),
            revision=whole_number(doc, "revision", 0, minimum=0, required=True),
            slice=whole_number(doc, "slice", 0, minimum=1, required=True),
            keys=tuple(keys),
            tries=whole_number(doc, "tries", 0, minimum=0),
        )
    return message


def control_plane_message(body: str) -> dict[str, Any] | None:
    """The body as one of the control plane's own messages on a shared queue, else None."""
    try:
        doc = json.loads(body)
    except (TypeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and doc.get("type") in (RECONCILE, EARLY) else None


def early_body(body: str, tries: int) -> str:
    """An agent event's body sent back for try `tries` (see `EARLY_DELAYS`)."""
    return json.dumps({"type": EARLY, "tries": tries, "body": body})


def early_event(body: str) -> tuple[str, int]:
    """The agent event a message carries and the tries it was sent back for (0: none)."""
    doc = control_plane_message(body)
    if doc is None or doc.get("type") != EARLY:
        return body, 0
    inner, tries = doc.get("body"), doc.get("tries")
    if not isinstance(inner, str) or not isinstance(tries, int) or isinstance(tries, bool):
        return body, 0  # rejected as what it is: not an agent event
    return inner, max(tries, 0)


def rfc3339(epoch: float) -> str:
    text = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def timer_input(workload: str, timer: Timer) -> dict[str, Any]:
    """The timer state machine's input; it comes back unchanged as the timer message.

    The deadline is rounded up to the whole second: a Wait state has one-second
    precision, and a timer must never fire before its deadline.
    """
    doc: dict[str, Any] = {
        "workload": workload,
        "attempt": timer.attempt,
        "kind": timer.kind.value,
        "episode": timer.episode,
        "deadline": rfc3339(math.ceil(timer.deadline)).replace(".000Z", "Z"),
    }
    if timer.incarnation:
        doc["incarnation"] = timer.incarnation
    return doc


def parse_timer_message(body: str) -> tuple[DeadlineReached, float]:
    """The event, and the deadline it was armed for (epoch seconds)."""
    doc = _object(body)
    with collecting(InvalidEvent):
        kind = doc.get("kind")
        timer_kind = TimerKind.STARTUP
        try:
            timer_kind = TimerKind(str(kind))
        except ValueError:
            problem(f"kind: expected 'startup', 'recovery' or 'fault', got {kind!r}")
        deadline = 0.0
        if not isinstance(doc.get("deadline"), str):
            problem("deadline: required RFC 3339 timestamp")
        else:
            deadline = checked(0.0, parse_time, doc["deadline"], "deadline")
        event = DeadlineReached(
            workload=checked("", text, doc, "workload"),
            attempt=whole_number(doc, "attempt", 0, minimum=0, required=True),
            kind=timer_kind,
            episode=whole_number(doc, "episode", 0, minimum=0, required=True),
            incarnation=str(doc.get("incarnation") or ""),
        )
    return event, deadline


def requeue_body(workload: str, count: int) -> str:
    return json.dumps({"type": REQUEUE, "workload": workload, "count": count})


def admission_body(reason: str, workload: str | None, retry: int = 0) -> str:
    doc: dict[str, Any] = {"type": ADMISSION, "reason": reason, "workload": workload}
    if retry:
        doc["retry"] = retry
    return json.dumps(doc)


RETRY_BASE_SECONDS = 5.0


def retry_delay(retry: int) -> float:
    """Backoff of a failed admission pass: 5 s, 10 s, 20 s, ... up to SQS's 15 minutes."""
    if retry <= 0:
        return 0.0
    return min(RETRY_BASE_SECONDS * 2.0 ** min(retry - 1, 16), float(SQS_MAX_DELAY_SECONDS))


def sqs_delay(delay: float) -> int:
    """SQS delays are whole seconds up to 15 minutes; longer backoffs arrive in legs."""
    return max(0, min(SQS_MAX_DELAY_SECONDS, int(delay + 0.999)))


def parse_requeue_message(body: str) -> RequeueDue | AdmissionRequest:
    doc = _object(body)
    kind = doc.get("type")
    with collecting(InvalidEvent):
        if kind == REQUEUE:
            message: RequeueDue | AdmissionRequest = RequeueDue(
                checked("", text, doc, "workload"),
                whole_number(doc, "count", 0, minimum=0, required=True),
            )
        elif kind == ADMISSION:
            workload = checked(None, text, doc, "workload", required=False)
            retry = whole_number(doc, "retry", 0, minimum=0)
            message = AdmissionRequest(str(doc.get("reason") or "requested"), workload, retry)
        else:
            raise InvalidEvent(f"type: expected {REQUEUE!r} or {ADMISSION!r}, got {kind!r}")
    return message


def _object(body: str) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"body: not JSON ({exc})") from None
    except RecursionError:
        raise InvalidEvent("body: JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise InvalidEvent(f"body: expected a JSON object, got {type(doc).__name__}")
    return doc
