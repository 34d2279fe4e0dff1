"""What each function does with one SQS record, and with a whole admission batch.

Handlers stay thin: they build (or receive) a `ControlPlane` and hand each record
here. A record that can never be processed (malformed JSON, an event that breaks
the schema, another cluster's event) is rejected with a log line naming the field
and an `InvalidEvents` metric, and is *not* retried; anything else that fails
raises, so the record returns to its queue and, after five receives, its DLQ.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from muster.aws.observability import logger
from muster.core import NodeObserved, SnapshotPart, Timer
from muster.runtime.messages import AdmissionRequest, parse_requeue_message, parse_timer_message
from muster.runtime.service import ControlPlane
from muster.schema import InvalidEvent, parse_agent_event


def reject(plane: ControlPlane, source: str, error: str, body: str) -> None:
    logger.warning(
        f"rejected {source} message: {error}",
        extra={"error": error, "body": body[:1024], "source": source},
    )
    plane.metrics.count("InvalidEvents")


def ingest_record(plane: ControlPlane, cluster_name: str, body: str) -> None:
    """One agent event, as EventBridge delivered it to the ingest queue."""
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
        subject = f"listing/{event.scope}/{event.snapshot}"
    elif isinstance(event, NodeObserved):
        subject = f"node/{event.node}"
    else:
        subject = event.workload
    logger.set_correlation_id(subject)
    plane.handle(event)


EARLY_TOLERANCE_SECONDS = 5.0


def timer_record(
    plane: ControlPlane, body: str, sleep: Callable[[float], None] = time.sleep
) -> None:
    """One "deadline reached" message from the timer state machine.

    A signal that comes a little early (a Wait state's one-second precision, or
    clock skew) is held until the deadline; one that comes well before it is
    re-armed for the remainder (sent again to the timer queue with that delay),
    so no gang is evicted before its time.
    """
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
        timer = Timer(event.kind, event.attempt, event.episode, deadline)
        plane.messages.deadline_later(event.workload, timer, early)
        return
    plane.handle(event)


def process_sqs(
    event: dict[str, Any],
    context: Any,
    processor: BatchProcessor,
    handle: Callable[[str], None],
) -> dict[str, Any]:
    """Records one by one; the failed ones are reported for redelivery."""

    def record_handler(record: SQSRecord) -> None:
        handle(record.body)

    with processor(
        records=event.get("Records", []), handler=record_handler, lambda_context=context
    ):
        processor.process()
    return dict(processor.response())


def admission_batch(
    plane: ControlPlane, event: dict[str, Any], context: Any, processor: BatchProcessor
) -> dict[str, Any]:
    """Requeues first (each may end a backoff), then one admission pass for the batch.

    A workload whose effects fail is set aside by the pass, which goes on with
    the others. Should the pass fail, or set a workload aside, another pass is
    queued with a backoff (5 s, doubling, up to 15 minutes), never at once: the
    requeues already applied are not left waiting for an unrelated trigger, and
    a lasting failure does not turn into a hot loop.
    """
    requested = False
    hints: set[str] = set()
    retry = 0

    def handle(body: str) -> None:
        nonlocal requested, retry
        try:
            message = parse_requeue_message(body)
        except InvalidEvent as exc:
            reject(plane, "requeue", str(exc), body)
            return
        if isinstance(message, AdmissionRequest):
            requested = True
            retry = max(retry, message.retry)
            if message.workload:
                hints.add(message.workload)
            return
        logger.set_correlation_id(message.workload)
        plane.handle(message)

    response = process_sqs(event, context, processor, handle)
    wanted, named = plane.take_admission_request()
    if requested or wanted:
        logger.set_correlation_id(None)
        try:
            admitted = plane.admission_pass(hints | named)
        except Exception:
            logger.exception("admission pass failed; asking for another after a backoff")
            plane.messages.request_admission("retry after a failed pass", None, retry=retry + 1)
        else:
            logger.info("admission pass done", extra={"admitted": admitted})
            if plane.failed:
                logger.warning(
                    "admission pass set workloads aside; asking for another after a backoff",
                    extra={"failed": plane.failed, "retry": retry + 1},
                )
                plane.messages.request_admission("retry workloads set aside", None, retry=retry + 1)
        plane.take_admission_request()  # the pass itself ran until nothing more fitted
    return response


def sqs_processor() -> BatchProcessor:
    return BatchProcessor(event_type=EventType.SQS)
