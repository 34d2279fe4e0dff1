"""Getting the agent's events onto the bus: coalescing, batching, partial retries.

- `Outbox` holds the latest pending event per object; a newer observation of the
  same pod inside the coalescing window replaces the older one (the control plane
  only needs the latest state, and `seq` makes the replacement safe).
- `EventBridgeSender` sends in PutEvents batches of at most 10 entries and under
  the 256 KB request limit, retries only the entries that failed, with backoff,
  and logs and counts what it finally cannot send.
- `PrintSender` writes them to stdout instead, for trying the agent out.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from muster.retry import Backoff, retry
from muster.schema import AGENT_SOURCE, WORKLOAD_OBSERVED

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient

log = logging.getLogger("muster.agent")

MAX_ENTRIES = 10
MAX_REQUEST_BYTES = 256 * 1024
TIME_FIELD_BYTES = 14  # EventBridge counts a present `Time` as 14 bytes


@dataclass(slots=True)
class Entry:
    """One event waiting to go out; `key` names the object it describes."""

    key: str
    detail_type: str
    detail: dict[str, Any]
    first_seen: float = 0.0
    body: str = ""

    def __post_init__(self) -> None:
        self.body = json.dumps(self.detail, separators=(",", ":"), sort_keys=True)

    @property
    def size(self) -> int:
        """Entry size as EventBridge computes it (Source + DetailType + Detail + Time)."""
        return (
            len(AGENT_SOURCE.encode())
            + len(self.detail_type.encode())
            + len(self.body.encode())
            + TIME_FIELD_BYTES
        )


class Sender(Protocol):
    def send(self, entries: Sequence[Entry]) -> None: ...


@dataclass
class Outbox:
    """Pending events, one per object; workload events first, pods after the window."""

    window: float = 1.0
    pending: dict[str, Entry] = field(default_factory=dict)
    stats: Counter[str] = field(default_factory=Counter)

    def put(self, entry: Entry, now: float) -> None:
        previous = self.pending.get(entry.key)
        if previous is not None:
            entry.first_seen = previous.first_seen
            self.stats["coalesced"] += 1  # replacing keeps its place and its window
        else:
            entry.first_seen = now
        self.pending[entry.key] = entry

    def due(self, now: float, *, everything: bool = False) -> list[Entry]:
        """Entries to send now: workloads at once, others once their window has passed."""
        ready = [
            e
            for e in self.pending.values()
            if everything or e.detail_type == WORKLOAD_OBSERVED or now - e.first_seen >= self.window
        ]
        for e in ready:
            del self.pending[e.key]
        # A workload before its pods, so the control plane knows it when they arrive.
        ready.sort(key=lambda e: (e.detail_type != WORKLOAD_OBSERVED, e.first_seen))
        return ready

    def clear(self) -> None:
        self.pending.clear()


def batches(entries: Iterable[Entry]) -> list[list[Entry]]:
    """Split into PutEvents requests: at most 10 entries and 256 KB each."""
    out: list[list[Entry]] = []
    current: list[Entry] = []
    size = 0
    for entry in entries:
        if current and (len(current) == MAX_ENTRIES or size + entry.size > MAX_REQUEST_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.size
    if current:
        out.append(current)
    return out


class _Unsent(Exception):
    """Some entries of a batch were not accepted; they are sent again."""


class EventBridgeSender:
    """Sends entries to an EventBridge bus; retries failed entries only, then gives up loudly."""

    def __init__(
        self,
        client: EventBridgeClient,
        bus: str,
        *,
        attempts: int = 5,
        base_delay: float = 0.5,
        max_delay: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.bus = bus
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.sleep = sleep
        self.stats: Counter[str] = Counter()

    @classmethod
    def for_bus(cls, bus: str) -> EventBridgeSender:
        """A sender on the standard credential chain whose client makes one try per call.

        The sender retries the entries that failed itself; botocore's retries
        under it would multiply the tries and the wait.
        """
        import boto3

        from muster.botocore_config import ONE_TRY

        return cls(boto3.client("events", config=ONE_TRY), bus)

    def send(self, entries: Sequence[Entry]) -> None:
        sendable = []
        for entry in entries:
            if entry.size > MAX_REQUEST_BYTES:
                self._give_up(entry, "EntryTooLarge", f"{entry.size} bytes")
            else:
                sendable.append(entry)
        for batch in batches(sendable):
            self._send_batch(batch)

    def _send_batch(self, batch: list[Entry]) -> None:
        remaining = batch
        errors: dict[str, tuple[str, str]] = {}
        tries = 0

        def put() -> None:
            nonlocal remaining, tries
            tries += 1
            remaining = self._put(remaining, errors, tries)
            if remaining:
                raise _Unsent()

        def count_retry(_try: int, _error: BaseException) -> None:
            self.stats["retried"] += len(remaining)

        try:
            retry(
                put,
                attempts=self.attempts,
                retry_on=_Unsent,
                backoff=Backoff(self.base_delay, self.max_delay),
                sleep=self.sleep,
                on_retry=count_retry,
            )
        except _Unsent:
            for entry in remaining:
                code, message = errors.get(entry.key, ("Unknown", ""))
                self._give_up(entry, code, message)

    def _put(
        self, entries: list[Entry], errors: dict[str, tuple[str, str]], attempt: int
    ) -> list[Entry]:
        """One PutEvents of `entries`; returns those that failed (their errors in `errors`)."""
        self.stats["put_events_calls"] += 1
        try:
            response = self.client.put_events(
                Entries=[
                    {
                        "Source": AGENT_SOURCE,
                        "DetailType": e.detail_type,
                        "Detail": e.body,
                        "EventBusName": self.bus,
                    }
                    for e in entries
                ]
            )
        except Exception as exc:  # throttling, network, credentials: the whole batch waits
            log.warning("PutEvents failed (try %d of %d): %s", attempt, self.attempts, exc)
            errors.update({e.key: (type(exc).__name__, str(exc)) for e in entries})
            return entries
        failed = []
        for entry, result in zip(entries, response.get("Entries") or [], strict=False):
            if result.get("ErrorCode"):
                failed.append(entry)
                errors[entry.key] = (result["ErrorCode"], result.get("ErrorMessage", ""))
            else:
                self.stats["sent"] += 1
        if failed:
            log.warning(
                "PutEvents: %d of %d entries failed (try %d of %d)",
                len(failed),
                len(entries),
                attempt,
                self.attempts,
            )
        return failed

    def _give_up(self, entry: Entry, code: str, message: str) -> None:
        self.stats["undeliverable"] += 1
        log.error(
            "could not send %s for %s: %s %s (the next resync sends its state again)",
            entry.detail_type,
            entry.key,
            code,
            message,
        )


class PrintSender:
    """Writes events to stdout: for trying the agent out without a bus."""

    def send(self, entries: Sequence[Any]) -> None:
        for e in entries:
            print(json.dumps({"detail-type": e.detail_type, "detail": e.detail}), flush=True)
