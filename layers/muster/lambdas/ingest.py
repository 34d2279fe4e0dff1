"""The ingest function's batch: a workload's pod events in it applied together.

Pod events of one gang come in bursts (a 4,096-pod gang starting is 8,000 and
more); handled one at a time each is a write, and every writer of the gang meets
the others on its workload item. Here the batch's pod events of one workload
become one run (`ControlPlane.handle_pods`: one read, one write, one count),
while each workload's events keep their order: a workload's other event ends its
run (the pod events after it start another), and an event not of one workload
(a node's capacity report, a part of a cluster snapshot, a slice of its
reconciliation) ends every open run.
Everything else is applied one by one, in the batch's order.

Failures are still per record: a run that fails fails exactly its records (each is
delivered again; what was applied becomes a duplicate), the others succeed, and
Powertools' `process_partial_response` reports them as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from muster.aws.observability import logger
from muster.core import NodeObserved, PodObserved, SnapshotPart
from muster.lambdas.records import IngestMessage, apply_message, ingest_message, subject
from muster.runtime.messages import EARLY_DELAYS, ReconcileSlice, early_body, early_event
from muster.runtime.results import WorkloadNotYetKnown
from muster.runtime.service import ControlPlane


@dataclass
class Step:
    """Events applied together (a workload's pod run), or one other event; their records."""

    events: list[IngestMessage] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # the records' message ids
    pods: str | None = None  # the workload of a pod run


def plan(items: list[tuple[str, IngestMessage]]) -> list[Step]:
    """The batch's (message id, event) pairs as steps, in order; see the module."""
    steps: list[Step] = []
    runs: dict[str, Step] = {}  # workload -> its run still open
    for message_id, event in items:
        if isinstance(event, PodObserved):
            run = runs.get(event.workload)
            if run is None:
                run = runs[event.workload] = Step(pods=event.workload)
                steps.append(run)
            run.events.append(event)
            run.ids.append(message_id)
            continue
        if isinstance(event, SnapshotPart | ReconcileSlice) or (
            isinstance(event, NodeObserved) and not event.workload
        ):
            runs.clear()
        else:
            runs.pop(event.workload, None)
        steps.append(Step([event], [message_id]))
    return steps


RESERVE_SECONDS = 5.0
"""What a batch keeps of its function's time: slices of a reconciliation stop short of it."""


def apply(plane: ControlPlane, step: Step, until: float | None = None) -> None:
    logger.set_correlation_id(step.pods or subject(step.events[0]))
    if step.pods is None:
        apply_message(plane, step.events[0], until=until)
        return
    pods = [e for e in step.events if isinstance(e, PodObserved)]
    plane.handle_pods(step.pods, pods)


def ingest_batch(
    plane: ControlPlane,
    cluster_name: str,
    event: dict[str, Any],
    context: LambdaContext | None,
    processor: BatchProcessor,
) -> PartialItemFailureResponse:
    """Every agent event of the batch applied (see the module); the records that failed."""
    items: list[tuple[str, IngestMessage]] = []
    bodies: dict[str, tuple[str, int]] = {}  # message id -> (agent event, tries so far)
    for raw in event.get("Records") or []:
        record = SQSRecord(raw)
        bodies[record.message_id] = early_event(record.body)
        parsed = ingest_message(plane, cluster_name, record.body)
        if parsed is not None:  # a rejected one is counted, and not retried
            items.append((record.message_id, parsed))
    failed: dict[str, Exception] = {}
    until = None
    if context is not None:
        until = plane.clock() + context.get_remaining_time_in_millis() / 1000 - RESERVE_SECONDS
    for step in plan(items):
        try:
            apply(plane, step, until)
        except WorkloadNotYetKnown as exc:
            failed.update(send_back(plane, step.ids, bodies, exc))
        except Exception as exc:
            failed.update(dict.fromkeys(step.ids, exc))
    logger.set_correlation_id(None)

    def record_handler(record: SQSRecord) -> None:
        error = failed.get(record.message_id)
        if error is not None:
            raise RecordFailed(f"{type(error).__name__}: {error}") from error

    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )


def send_back(
    plane: ControlPlane,
    ids: list[str],
    bodies: dict[str, tuple[str, int]],
    exc: WorkloadNotYetKnown,
) -> dict[str, Exception]:
    """Events of a workload not yet known, sent back to be applied a little later
    (`EARLY_DELAYS`); the records that could not be (out of tries, or the send failed)."""
    failed: dict[str, Exception] = {}
    sent = 0
    for message_id in ids:
        body, tries = bodies[message_id]
        if plane.slices is None or tries >= len(EARLY_DELAYS):
            failed[message_id] = exc
            continue
        try:
            plane.slices.send_early(early_body(body, tries + 1), EARLY_DELAYS[tries])
        except Exception as error:  # the record is delivered again instead
            failed[message_id] = error
            continue
        sent += 1
    if sent:
        logger.info(
            "events of a workload not yet known, sent back to be applied again",
            extra={"events": sent, "error": str(exc)},
        )
    return failed


class RecordFailed(Exception):
    """The step this record was applied in failed; it is delivered again."""
