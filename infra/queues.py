"""The three work queues (ingest, timer, admission), each with its own dead-letter queue."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as c


class QueueWithDlq(Construct):
    """A Standard, encrypted, TLS-only queue whose failing messages land in a DLQ."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        consumer_timeout_seconds: int,
        batching_window_seconds: int = 0,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dlq = sqs.Queue(
            self,
            "Dlq",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(c.DLQ_RETENTION_DAYS),
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(
                c.VISIBILITY_FACTOR * consumer_timeout_seconds + batching_window_seconds
            ),
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=c.MAX_RECEIVE_COUNT, queue=self.dlq
            ),
        )


class Queues(Construct):
    """`ingest` (agent events), `timer` (deadlines reached), `admission` (requeues after
    their backoff, admission requests)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        consumer = {queue: fn for fn, queue in c.FUNCTION_QUEUE.items()}
        self.by_name: dict[str, QueueWithDlq] = {
            name: QueueWithDlq(
                self,
                name.capitalize(),
                consumer_timeout_seconds=c.FUNCTION_TIMEOUT_SECONDS[consumer[name]],
                batching_window_seconds=c.BATCHING_WINDOW_SECONDS[consumer[name]],
            )
            for name in c.QUEUE_NAMES
        }

    @property
    def ingest(self) -> sqs.Queue:
        return self.by_name[c.INGEST].queue

    @property
    def timer(self) -> sqs.Queue:
        return self.by_name[c.TIMER].queue

    @property
    def admission(self) -> sqs.Queue:
        return self.by_name[c.ADMISSION].queue
