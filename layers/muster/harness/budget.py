"""Lambda instances in virtual time, each invocation under its function's budget.

Each function (ingest, timer, admission, the sweeper) has a few instances; each
instance is a thread, but only one runs at a time: the one furthest behind in
virtual time. Every call a handler makes to a service (`spend`) takes that
service's latency floor (`LATENCY`) of its instance's time and first lets any
instance that is behind run up to it, so the calls of concurrent instances
interleave in time order as they would on AWS, and the code between two calls
takes no time.

An invocation whose modelled duration passes its function's timeout fails as
Lambda fails it: `InvocationTimedOut` is raised at the call that would pass it (a
`BaseException`, so no `except Exception` in the handler catches it), the whole
SQS batch returns to its queue, and the effects already made stay. Every
invocation's modelled duration is recorded (`Invocation`).

Queues are the fault harness's SQS model (`VirtualQueues`), one heap per queue
here, so an idle instance knows when its next batch is visible. A function with a
batching window (the ingest function's, `infra/constants.py`) starts a batch as
Lambda's event source mapping does: once `batch` messages are visible, or once the
first has been visible for the window, whichever comes first.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from muster.harness.clock import VirtualClock
from muster.harness.virtual_aws import MAX_RECEIVES, VISIBILITY_SECONDS, Message, VirtualQueues

LATENCY = {
    "dynamodb": 0.004,
    "kubernetes": 0.010,
    "stepfunctions": 0.020,
    "sqs": 0.010,
    "events": 0.010,
}
"""The latency floor of one call to each service, in seconds."""


class InvocationTimedOut(BaseException):
    """The invocation ran past its function's timeout (Lambda stops it there)."""


class _Stopped(BaseException):
    """The run is over: unwinds an instance still waiting to make a call."""


class SplitQueues(VirtualQueues):
    """`VirtualQueues` with one heap per queue (the next visible message at a glance)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock)
        self.heaps: dict[str, list[Message]] = {}
        self._ready: dict[tuple[str, int, float], float | None] = {}  # cached `ready_at`

    def send(self, queue: str, body: str, delay: float = 0.0, receives: int = 0) -> None:
        self.sent[queue] += 1
        self._ready.clear()
        heapq.heappush(
            self.heaps.setdefault(queue, []),
            Message(self.clock.now + delay, next(self.seq), queue, body, receives),
        )

    def due(self, queue: str, limit: int = 10) -> list[Message]:
        heap = self.heaps.get(queue, [])
        taken: list[Message] = []
        while heap and heap[0].visible_at <= self.clock.now and len(taken) < limit:
            taken.append(heapq.heappop(heap))
        if taken:
            self._ready.clear()
        return taken

    def ready_at(self, queue: str, batch: int, window: float) -> float | None:
        """When a batch of `queue` starts: `batch` messages visible, or the first one
        visible for `window` seconds (None: the queue is empty)."""
        heap = self.heaps.get(queue)
        if not heap:
            return None
        first = heap[0].visible_at
        if window <= 0 or batch <= 1:
            return first
        cached = self._ready.get((queue, batch, window), -1.0)
        if cached is None or cached >= 0:
            return cached
        full = heapq.nsmallest(batch, heap)[-1].visible_at if len(heap) >= batch else None
        at = first + window if full is None else min(first + window, full)
        self._ready[queue, batch, window] = at
        return at

    def fail(self, m: Message) -> None:
        if m.receives + 1 >= MAX_RECEIVES:
            self.dlq[m.queue] += 1
            return
        visible = self.clock.now + VISIBILITY_SECONDS[m.queue]
        self._ready.clear()
        heapq.heappush(
            self.heaps.setdefault(m.queue, []),
            Message(visible, next(self.seq), m.queue, m.body, m.receives + 1),
        )

    def next_visible(self, queue: str) -> float | None:
        heap = self.heaps.get(queue)
        return heap[0].visible_at if heap else None

    def waiting(self, queue: str | None = None) -> int:
        return sum(len(h) for q, h in self.heaps.items() if queue is None or q == queue)


@dataclass
class Invocation:
    """One invocation: its function, instance, start, modelled duration and outcome."""

    function: str
    worker: str
    start: float
    duration: float = 0.0
    records: int = 0
    failed: int = 0  # records returned to the queue
    timed_out: bool = False
    error: str = ""


Handler = Callable[[list[Message]], list[Message]]
"""A function's batch handler: the messages it was given -> those that failed."""


@dataclass
class Worker:
    name: str
    function: str
    timeout: float
    t: float = 0.0
    t0: float = 0.0
    job: list[Message] | None = None
    waiting: bool = False
    busy: bool = False


@dataclass
class Function:
    name: str
    handler: Handler
    timeout: float
    batch: int
    queue: str | None  # None: a schedule (`every`)
    every: float = 0.0
    next_run: float = 0.0
    window: float = 0.0  # the batching window (seconds)


@dataclass
class Workers:
    """The functions' instances and the scheduler that runs them in time order."""

    clock: VirtualClock
    queues: SplitQueues
    invocations: list[Invocation] = field(default_factory=list)
    spent: dict[str, float] = field(default_factory=dict)  # seconds per service
    calls: dict[str, int] = field(default_factory=dict)  # calls per service

    def __post_init__(self) -> None:
        self.cond = threading.Condition()
        self.functions: dict[str, Function] = {}
        self.workers: list[Worker] = []
        self.turn: Worker | None = None  # None: the caller of `run`
        self.until = 0.0
        self.stopping = False
        self.threads: list[threading.Thread] = []
        self._current: Invocation | None = None

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        timeout: float,
        instances: int,
        batch: int = 10,
        queue: str | None = None,
        every: float = 0.0,
        window: float = 0.0,
    ) -> None:
        self.functions[name] = Function(
            name, handler, timeout, batch, queue, every, self.clock.now + every, window
        )
        for i in range(instances):
            w = Worker(f"{name}-{i}", name, timeout, self.clock.now)
            self.workers.append(w)
            thread = threading.Thread(target=self._thread, args=(w,), daemon=True)
            self.threads.append(thread)
            thread.start()

    # ------------------------------------------------------------------ the timeline

    def spend(self, seconds: float, what: str) -> tuple[str, float]:
        """Take `seconds` of the running instance's time for a call (see the module docstring)."""
        w = self.turn
        if w is None:  # outside any invocation (a scenario's setup): the clock alone
            start = self.clock.now
            self.clock.now += seconds
            return "setup", start
        service = what.partition(".")[0]
        self.calls[service] = self.calls.get(service, 0) + 1
        self.spent[service] = self.spent.get(service, 0.0) + seconds
        start = w.t
        if start + seconds > w.t0 + w.timeout + 1e-9:
            w.t = w.t0 + w.timeout
            raise InvocationTimedOut(f"{w.name}: past {w.timeout:.0f} s at {what}")
        with self.cond:
            if self._earliest(exclude=w) < start:
                w.waiting = True
                self._next()
                self.cond.wait_for(lambda: self.turn is w or self.stopping)
                w.waiting = False
                if self.stopping:
                    raise _Stopped()
        w.t = start + seconds
        self.clock.now = w.t
        return w.name, start

    def sleep(self, seconds: float) -> None:
        """A handler's sleep: its instance's time passes (no call is made)."""
        self.spend(seconds, "sleep")

    # ------------------------------------------------------------------ running

    def run(self, until: float) -> None:
        """Run every function's invocations due before `until` (virtual)."""
        with self.cond:
            self.until = until
            self._next()
            self.cond.wait_for(lambda: self.turn is None)
        self.clock.now = max(self.clock.now, until)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for thread in self.threads:
            thread.join(timeout=5)

    def _start_time(self, w: Worker) -> float | None:
        f = self.functions[w.function]
        if f.queue is None:
            return max(w.t, f.next_run)
        visible = self.queues.ready_at(f.queue, f.batch, f.window)
        return None if visible is None else max(w.t, visible)

    def _earliest(self, exclude: Worker | None = None) -> float:
        best = float("inf")
        for w in self.workers:
            if w is exclude:
                continue
            if w.waiting:
                best = min(best, w.t)
            elif not w.busy:
                at = self._start_time(w)
                if at is not None:
                    best = min(best, at)
        return best

    def _next(self) -> None:
        """Hand the turn to whoever is furthest behind (under `cond`)."""
        chosen: tuple[float, int, Worker] | None = None
        for order, w in enumerate(self.workers):
            at = w.t if w.waiting else (None if w.busy else self._start_time(w))
            if at is not None and (chosen is None or (at, order) < chosen[:2]):
                chosen = (at, order, w)
        if chosen is None or chosen[0] > self.until:
            self.turn = None
        else:
            at, _, w = chosen
            if not w.waiting:
                self._take(w, at)
            self.turn = w
            self.clock.now = w.t
        self.cond.notify_all()

    def _take(self, w: Worker, at: float) -> None:
        f = self.functions[w.function]
        w.t = w.t0 = at
        self.clock.now = at
        if f.queue is None:
            f.next_run = at + f.every
            w.job = []
        else:
            w.job = self.queues.due(f.queue, f.batch)
        w.busy = True

    def _thread(self, w: Worker) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.turn is w or self.stopping)
                if self.stopping:
                    return
                batch = w.job or []
            try:
                self._invoke(w, batch)
            except _Stopped:
                return
            with self.cond:
                w.busy = False
                w.job = None
                self._next()

    def _invoke(self, w: Worker, batch: list[Message]) -> None:
        f = self.functions[w.function]
        record = Invocation(f.name, w.name, w.t0, records=len(batch))
        self.invocations.append(record)
        try:
            failed = f.handler(batch)
        except InvocationTimedOut:
            record.timed_out = True
            failed = batch
        except _Stopped:
            raise
        except Exception as exc:  # the whole batch fails, as an unhandled error does
            record.error = f"{type(exc).__name__}: {exc}"
            failed = batch
        record.duration = w.t - w.t0
        record.failed = len(failed)
        self.clock.now = w.t
        for m in failed:
            self.queues.fail(m)


class Timed:
    """A port whose every call takes a service's latency of the running instance's time."""

    def __init__(self, target: Any, workers: Workers, service: str) -> None:
        self._target = target
        self._workers = workers
        self._service = service

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._workers.spend(LATENCY[self._service], f"{self._service}.{name}")
            return attr(*args, **kwargs)

        return call
