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
from muster.core import NodeObserved, SnapshotPart, Timer
from muster.runtime.admission import AdmissionRequests, admit_after_batch
from muster.runtime.messages import (
    AdmissionRequest,
    control_plane_message,
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
    """One agent event, as EventBridge delivered it to the ingest queue (or a slice of a
    snapshot's reconciliation, which the ingest function sent there itself)."""
    body = record.body
    own = control_plane_message(body)
    if own is not None:
        try:
            work = parse_reconcile_message(own)
        except InvalidEvent as exc:
            reject(plane, "reconcile", str(exc), body)
            return
        logger.set_correlation_id(f"snapshot/{work.scope}/{work.snapshot}/{work.slice}")
        plane.reconcile_slice(work)
        return
    try:
        cluster, event = parse_agent_event(json.loads(body))
    except (InvalidEvent, ValueError) as exc:
        reject(plane, "agent", str(exc), body)
        return
    except RecursionError:
        reject(plane, "agent", "body: JSON nested too deeply", body)
        return
    if cluster != cluster_name:
        reject(plane, "agent", f"cluster: expected {cluster_name!r}, got {cluster!r}", body)
        return
    if isinstance(event, SnapshotPart):
        subject = f"snapshot/{event.scope}/{event.snapshot}"
    elif isinstance(event, NodeObserved):
        subject = f"node/{event.node}"
    else:
        subject = event.workload
    logger.set_correlation_id(subject)
    plane.handle(event)


EARLY_TOLERANCE_SECONDS = 5.0


def timer_record(
    plane: ControlPlane, record: SQSRecord, sleep: Callable[[float], None] = time.sleep
) -> None:
    """One "deadline reached" message from the timer state machine.

    A signal that comes a little early (a Wait state's one-second precision, or
    clock skew) is held until the deadline; one that comes well before it is
    re-armed for the remainder (sent again to the timer queue with that delay),
    so no gang is evicted before its time.
    """
    body = record.body
    try:
        event, deadline = parse_timer_message(body)
    except InvalidEvent as exc:
        reject(plane, "timer", str(exc), body)
        return
    logger.set_correlation_id(event.workload)
    early = deadline - plane.clock()
    if 0 < early <= EARLY_TOLERANCE_SECONDS:
        sleep(early)
    elif early > EARLY_TOLERANCE_SECONDS:
        logger.warning(
            "timer fired well before its deadline; re-armed for the remainder",
            extra={"earlySeconds": early},
        )
        timer = Timer(event.kind, event.attempt, event.episode, deadline, event.incarnation)
        plane.messages.deadline_later(event.workload, timer, early)
        return
    plane.handle(event)


def admission_batch(
    plane: ControlPlane,
    event: dict[str, Any],
    context: LambdaContext | None,
    processor: BatchProcessor,
) -> PartialItemFailureResponse:
    """The batch's requeues applied and its admission requests gathered, then one pass for all.

    When to run the pass, and what a failed one asks for, is the runtime's
    (`muster.runtime.admission`).
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
    admit_after_batch(plane, requests)
    return response


def sqs_processor() -> BatchProcessor:
    return BatchProcessor(event_type=EventType.SQS)
