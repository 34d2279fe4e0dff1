"""SQS and Step Functions as the fault driver models them, in virtual time.

Three queues with delays, a visibility timeout and a redrive to a DLQ after five
receives (also the `Messages` port), the virtual clock, and timers that send
their signal to the timer queue at the deadline, or early.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from muster.core import (
    Timer,
)
from muster.harness.clock import VirtualClock
from muster.harness.injectors import FaultPlan
from muster.runtime.messages import (
    ReconcileSlice,
    admission_body,
    reconcile_body,
    requeue_body,
    retry_delay,
    sqs_delay,
    timer_input,
)

VISIBILITY_SECONDS = {"ingest": 180.0, "timer": 180.0, "admission": 360.0}
MAX_RECEIVES = 5


@dataclass(order=True)
class Message:
    visible_at: float
    seq: int
    queue: str = field(compare=False)
    body: str = field(compare=False)
    receives: int = field(default=0, compare=False)


def sqs_batch(batch: list[Message]) -> dict[str, Any]:
    """The SQS event Lambda hands a function for `batch` (each with its receive count)."""
    return {
        "Records": [
            {
                "messageId": f"m{m.seq}",
                "receiptHandle": f"h{m.seq}",
                "body": m.body,
                "attributes": {"ApproximateReceiveCount": str(m.receives + 1)},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:muster-{m.queue}",
                "awsRegion": "us-east-1",
            }
            for m in batch
        ]
    }


@contextmanager
def quiet() -> Iterator[None]:
    """The control plane's logs off while a harness plays thousands of messages."""
    log = logging.getLogger("muster")
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        log.setLevel(level)


class VirtualQueues:
    """The three SQS queues in virtual time; also the `Messages` port."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.heap: list[Message] = []
        self.seq = itertools.count()
        self.dlq: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()

    def send(self, queue: str, body: str, delay: float = 0.0, receives: int = 0) -> None:
        self.sent[queue] += 1
        heapq.heappush(
            self.heap, Message(self.clock.now + delay, next(self.seq), queue, body, receives)
        )

    def due(self, queue: str, limit: int = 10) -> list[Message]:
        taken: list[Message] = []
        kept: list[Message] = []
        while self.heap and self.heap[0].visible_at <= self.clock.now and len(taken) < limit:
            m = heapq.heappop(self.heap)
            (taken if m.queue == queue else kept).append(m)
        for m in kept:
            heapq.heappush(self.heap, m)
        return taken

    def fail(self, m: Message) -> None:
        """Not deleted: visible again after the visibility timeout, or dead-lettered."""
        if m.receives + 1 >= MAX_RECEIVES:
            self.dlq[m.queue] += 1
            return
        heapq.heappush(
            self.heap,
            Message(
                self.clock.now + VISIBILITY_SECONDS[m.queue],
                next(self.seq),
                m.queue,
                m.body,
                m.receives + 1,
            ),
        )

    def in_flight(self, queue: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        for m in self.heap:
            if queue is None or m.queue == queue:
                yield m.queue, json.loads(m.body)

    # the Messages port
    def requeue(self, workload: str, count: int, delay: float) -> None:
        self.send("admission", requeue_body(workload, count), sqs_delay(delay))

    def request_admission(
        self, reason: str, workload: str | None, *, retry: int = 0, delay: float = 0.0
    ) -> None:
        self.send(
            "admission",
            admission_body(reason, workload, retry),
            sqs_delay(max(delay, retry_delay(retry))),
        )

    def deadline_later(self, workload: str, timer: Timer, delay: float) -> None:
        self.send("timer", json.dumps(timer_input(workload, timer)), sqs_delay(delay))

    # the ingest queue, for reconciliation slices and early agent events
    def send_slice(self, s: ReconcileSlice, delay: float) -> None:
        self.send("ingest", reconcile_body(s), sqs_delay(delay))

    def send_early(self, body: str, delay: float) -> None:
        self.send("ingest", body, sqs_delay(delay))


class VirtualTimers:
    """Step Functions: a timer sends its input to the timer queue at its deadline (or early)."""

    def __init__(self, queues: VirtualQueues, plan: FaultPlan) -> None:
        self.queues = queues
        self.plan = plan
        self.started: set[tuple[str, int, str, int]] = set()

    def start(self, workload: str, timer: Timer) -> None:
        name = (workload, timer.attempt, timer.kind.value, timer.episode)
        if name in self.started:
            return  # ExecutionAlreadyExists
        self.started.add(name)
        at = self.plan.early(timer.deadline, self.queues.clock.now)
        body = json.dumps(timer_input(workload, timer))
        self.queues.send("timer", body, max(0.0, at - self.queues.clock.now))

    def stop(self, workload: str, timer: Timer) -> None:
        """Best effort, as on AWS: the signal may still come; the core finds it stale."""
