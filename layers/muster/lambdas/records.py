"""What each function does with one SQS record, and with a whole admission batch.

Handlers stay thin: they build (or receive) a `ControlPlane` and give Powertools'
`process_partial_response` a record handler from here, which reports the records
that failed. A record that can never be processed (malformed JSON, an event that
breaks the schema, another cluster's event) is rejected with a log line naming the
field and an `InvalidEvents` metric, and is *not* retried; anything else that
fails raises, so the record returns to its queue and, after five receives, its DLQ.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from muster import contract
from muster.aws.observability import logger
from muster.core import Event, NodeObserved, SnapshotPart, Timer
from muster.runtime.admission import AdmissionRequests, admit_after_batch
from muster.runtime.messages import (
    AdmissionRequest,
    ReconcileSlice,
    control_plane_message,
    early_event,
    parse_reconcile_message,
    parse_requeue_message,
    parse_timer_message,
)
from muster.runtime.service import ControlPlane
from muster.schema import InvalidEvent, parse_agent_event


def reject(plane: ControlPlane, source: str, error: str, body: str) -> None:
    logger.warning(
        f"rejected {source} message: {error}",
        extra={"error": error, "body": body[:1024], "source": source},
    )
    plane.metrics.count(contract.METRIC_INVALID_EVENTS)


def ingest_record(plane: ControlPlane, cluster_name: str, record: SQSRecord) -> None:
    """One ingest message: an agent event, as EventBridge delivered it to the ingest
    queue, or a slice of a snapshot's reconciliation, which the ingest function sent
    there itself."""
    message = ingest_message(plane, cluster_name, record.body)
    if message is None:
        return
    logger.set_correlation_id(subject(message))
    apply_message(plane, message)


IngestMessage = Event | SnapshotPart | ReconcileSlice


def ingest_message(plane: ControlPlane, cluster_name: str, body: str) -> IngestMessage | None:
    """What an ingest message holds, or None when it is rejected (and counted)."""
    body, _ = early_event(body)
    own = control_plane_message(body)
    if own is None:
        return agent_event(plane, cluster_name, body)
    try:
        return parse_reconcile_message(own)
    except InvalidEvent as exc:
        reject(plane, "reconcile", str(exc), body)
        return None


def apply_message(
    plane: ControlPlane, message: IngestMessage, *, until: float | None = None
) -> None:
    """`until`: when the invocation must be done (a slice sends on what it cannot finish)."""
    if isinstance(message, ReconcileSlice):
        plane.reconcile_slice(message, until=until)
    else:
        plane.handle(message)


def agent_event(plane: ControlPlane, cluster_name: str, body: str) -> Event | SnapshotPart | None:
    """The agent event in an ingest message, or None when it is rejected (and counted)."""
    try:
        cluster, event = parse_agent_event(json.loads(body))
    except (InvalidEvent, ValueError) as exc:
        reject(plane, "agent", str(exc), body)
        return None
    except RecursionError:
        reject(plane, "agent", "body: JSON nested too deeply", body)
        return None
    if cluster != cluster_name:
        reject(plane, "agent", f"cluster: expected {cluster_name!r}, got {cluster!r}", body)
        return None
    return event


def subject(event: IngestMessage) -> str:
    """What an ingest message is about, for the log lines' correlation id."""
    if isinstance(event, ReconcileSlice):
        return f"snapshot/{event.scope}/{event.snapshot}/{event.slice}"
    if isinstance(event, SnapshotPart):
        return f"snapshot/{event.scope}/{event.snapshot}"
    if isinstance(event, NodeObserved):
        return f"node/{event.node}"
    return event.workload


EARLY_TOLERANCE_SECONDS = 2.0
"""A signal at most this early is held (a Wait state counts whole seconds); one earlier
is re-armed."""
HOLD_RESERVE_SECONDS = 10.0
"""What a timer batch keeps of its function's time for the records after a hold."""


def timer_record(
    plane: ControlPlane,
    record: SQSRecord,
    sleep: Callable[[float], None] = time.sleep,
    *,
    hold_up_to: float = EARLY_TOLERANCE_SECONDS,
) -> None:
    """One "deadline reached" message from the timer state machine.

    A signal at most `hold_up_to` early (a Wait state's one-second precision, or
    clock skew) is held until the deadline; one that comes earlier is re-armed
    for the remainder (sent again to the timer queue with that delay), so no gang
    is evicted before its time.
    """
    body = record.body
    try:
        event, deadline = parse_timer_message(body)
    except InvalidEvent as exc:
        reject(plane, "timer", str(exc), body)
        return
    logger.set_correlation_id(event.workload)
    early = deadline - plane.clock()
    if 0 < early <= hold_up_to:
        sleep(early)
    elif early > 0:
        logger.warning(
            "timer fired before its deadline; re-armed for the remainder",
            extra={"earlySeconds": early},
        )
        timer = Timer(event.kind, event.attempt, event.episode, deadline, event.incarnation)
        plane.messages.deadline_later(event.workload, timer, early)
        return
    plane.handle(event)


def timer_batch(
    plane: ControlPlane,
    event: dict[str, Any],
    context: LambdaContext | None,
    processor: BatchProcessor,
    sleep: Callable[[float], None] = time.sleep,
) -> PartialItemFailureResponse:
    """A batch of deadline signals, held at most once: for the latest of those a
    little early, and only while the function's time allows; every signal still
    early after that is re-armed (`timer_record`), so ten early records never
    sleep ten times, and no gang is evicted before its deadline."""
    hold = batch_hold(plane, event, context)
    if hold > 0:
        sleep(hold)
    return process_partial_response(
        event=event,
        record_handler=partial(timer_record, plane, sleep=sleep, hold_up_to=0.0),
        processor=processor,
        context=context,
    )


def batch_hold(plane: ControlPlane, event: dict[str, Any], context: LambdaContext | None) -> float:
    """How long a timer batch holds: the largest earliness up to the tolerance, or 0
    when that would eat into what the records need of the function's time."""
    now = plane.clock()
    early = []
    for raw in event.get("Records") or []:
        try:
            _, deadline = parse_timer_message(SQSRecord(raw).body)
        except InvalidEvent:
            continue  # the record handler rejects it
        if 0 < deadline - now <= EARLY_TOLERANCE_SECONDS:
            early.append(deadline - now)
    hold = max(early, default=0.0)
    if context is not None and hold:
        left = context.get_remaining_time_in_millis() / 1000 - HOLD_RESERVE_SECONDS
        hold = hold if hold <= left else 0.0
    return hold


PASS_RESERVE_SECONDS = 10.0
"""What an admission pass keeps of its function's time (at most half of what is left):
it admits nothing after that and asks for another pass (one admission and its
effects take well under this)."""


def admission_batch(
    plane: ControlPlane,
    event: dict[str, Any],
    context: LambdaContext | None,
    processor: BatchProcessor,
) -> PartialItemFailureResponse:
    """The batch's requeues applied and its admission requests gathered, then one pass for all.

    When to run the pass, and what a failed one asks for, is the runtime's
    (`muster.runtime.admission`); the pass stops admitting `PASS_RESERVE_SECONDS`
    before the function's time ends, and asks for another.
    """
    requests = AdmissionRequests()

    def record_handler(record: SQSRecord) -> None:
        body = record.body
        try:
            message = parse_requeue_message(body)
        except InvalidEvent as exc:
            reject(plane, "admission", str(exc), body)
            return
        if isinstance(message, AdmissionRequest):
            requests.add(message)
            return
        logger.set_correlation_id(message.workload)
        plane.handle(message)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    logger.set_correlation_id(None)
    until = None
    if context is not None:
        left = context.get_remaining_time_in_millis() / 1000
        until = plane.clock() + max(left - PASS_RESERVE_SECONDS, left / 2)
    admit_after_batch(plane, requests, until=until)
    return response


def sqs_processor() -> BatchProcessor:
    return BatchProcessor(event_type=EventType.SQS)
