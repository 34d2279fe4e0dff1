"""The requeue queue: backoff as the message delay, and admission-pass requests."""

from __future__ import annotations

from typing import Any

from muster.runtime.messages import admission_body, requeue_body, sqs_delay


class SqsMessages:
    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def requeue(self, workload: str, count: int, delay: float) -> None:
        """Carries (workload, count), so a duplicate or a late leg is STALE in the core."""
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=requeue_body(workload, count),
            DelaySeconds=sqs_delay(delay),
        )

    def request_admission(self, reason: str, workload: str | None) -> None:
        self.client.send_message(
            QueueUrl=self.queue_url, MessageBody=admission_body(reason, workload), DelaySeconds=0
        )
