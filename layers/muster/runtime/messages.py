"""The control plane's own SQS messages: timer signals, requeues, admission requests.

Built and parsed in one module so that the sender and the consumer cannot drift.
A malformed message raises `InvalidEvent` (a retry cannot mend it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from muster.core import DeadlineReached, RequeueDue, Timer, TimerKind
from muster.schema import InvalidEvent, parse_time

REQUEUE = "requeue"
ADMISSION = "admission"
SQS_MAX_DELAY_SECONDS = 900


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """Run an admission pass; `workload` names the one that may have become admissible."""

    reason: str
    workload: str | None = None
    retry: int = 0  # passes that failed before this one was asked for


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
    kind = doc.get("kind")
    try:
        timer_kind = TimerKind(str(kind))
    except ValueError:
        raise InvalidEvent(
            f"kind: expected 'startup', 'recovery' or 'fault', got {kind!r}"
        ) from None
    if not isinstance(doc.get("deadline"), str):
        raise InvalidEvent("deadline: required RFC 3339 timestamp")
    deadline = parse_time(doc["deadline"], "deadline")
    event = DeadlineReached(
        workload=_text(doc, "workload"),
        attempt=_whole(doc, "attempt"),
        kind=timer_kind,
        episode=_whole(doc, "episode"),
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
    if kind == REQUEUE:
        return RequeueDue(_text(doc, "workload"), _whole(doc, "count"))
    if kind == ADMISSION:
        workload = doc.get("workload")
        if workload is not None and not isinstance(workload, str):
            raise InvalidEvent(f"workload: expected a string or null, got {workload!r}")
        retry = doc.get("retry", 0)
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
            raise InvalidEvent(f"retry: expected a whole number, got {retry!r}")
        return AdmissionRequest(str(doc.get("reason") or "requested"), workload, retry)
    raise InvalidEvent(f"type: expected {REQUEUE!r} or {ADMISSION!r}, got {kind!r}")


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


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _whole(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidEvent(f"{key}: expected a whole number, got {value!r}")
    return value
