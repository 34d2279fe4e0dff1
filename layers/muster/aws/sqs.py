"""The admission queue (backoff as the message delay, admission-pass requests) and
deadline signals sent again to the timer queue."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from muster import contract
from muster.core import Timer
from muster.runtime.messages import (
    ReconcileSlice,
    admission_body,
    reconcile_body,
    requeue_body,
    retry_delay,
    sqs_delay,
    timer_input,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


class SqsMessages:
    def __init__(self, client: SQSClient, queue_url: str, timer_queue_url: str = "") -> None:
        self.client = client
        self.queue_url = queue_url
        self.timer_queue_url = timer_queue_url

    def requeue(self, workload: str, count: int, delay: float) -> None:
        """Carries (workload, count), so a duplicate or a late leg is STALE in the core."""
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=requeue_body(workload, count),
            DelaySeconds=sqs_delay(delay),
        )

    def request_admission(
        self, reason: str, workload: str | None, *, retry: int = 0, delay: float = 0.0
    ) -> None:
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=admission_body(reason, workload, retry),
            DelaySeconds=sqs_delay(max(delay, retry_delay(retry))),
        )

    def deadline_later(self, workload: str, timer: Timer, delay: float) -> None:
        """The timer state machine's message, sent by hand (a longer wait arrives in legs)."""
        if not self.timer_queue_url:
            raise RuntimeError(
                f"{contract.ENV_TIMER_QUEUE_URL} is not set: cannot signal a deadline"
            )
        self.client.send_message(
            QueueUrl=self.timer_queue_url,
            MessageBody=json.dumps(timer_input(workload, timer)),
            DelaySeconds=sqs_delay(delay),
        )


class SqsSlices:
    """The ingest queue, for the slices of a snapshot's reconciliation and early agent events."""

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def send_slice(self, s: ReconcileSlice, delay: float) -> None:
        self.client.send_message(
            QueueUrl=self.queue_url, MessageBody=reconcile_body(s), DelaySeconds=sqs_delay(delay)
        )

    def send_early(self, body: str, delay: float) -> None:
        self.client.send_message(
            QueueUrl=self.queue_url, MessageBody=body, DelaySeconds=sqs_delay(delay)
        )
