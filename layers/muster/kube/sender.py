"""Getting the agent's events onto the bus: coalescing, batching, partial retries.

- `Outbox` holds the latest pending event per object; a newer observation of the
  same pod inside the coalescing window replaces the older one (the control plane
  only needs the latest state, and `seq` makes the replacement safe).
- `EventBridgeSender` sends in PutEvents batches of at most 10 entries and under
  the 256 KB request limit, retries only the entries that failed, with backoff,
  and logs and counts what it finally cannot send.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from muster.schema import AGENT_SOURCE, WORKLOAD_OBSERVED

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


class EventBridgeSender:
    """Sends entries to an EventBridge bus; retries failed entries only, then gives up loudly."""

    def __init__(
        self,
        client: Any,
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
        delay = self.base_delay
        remaining = batch
        errors: dict[str, tuple[str, str]] = {}
        for attempt in range(1, self.attempts + 1):
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
                        for e in remaining
                    ]
                )
            except Exception as exc:  # throttling, network, credentials: the whole batch waits
                log.warning("PutEvents failed (try %d of %d): %s", attempt, self.attempts, exc)
                errors = {e.key: (type(exc).__name__, str(exc)) for e in remaining}
            else:
                failed = []
                for entry, result in zip(remaining, response.get("Entries") or [], strict=False):
                    if result.get("ErrorCode"):
                        failed.append(entry)
                        errors[entry.key] = (result["ErrorCode"], result.get("ErrorMessage", ""))
                    else:
                        self.stats["sent"] += 1
                if failed:
                    log.warning(
                        "PutEvents: %d of %d entries failed (try %d of %d)",
                        len(failed),
                        len(remaining),
                        attempt,
                        self.attempts,
                    )
                remaining = failed
            if not remaining:
                return
            if attempt < self.attempts:
                self.stats["retried"] += len(remaining)
                self.sleep(delay)
                delay = min(delay * 2, self.max_delay)
        for entry in remaining:
            code, message = errors.get(entry.key, ("Unknown", ""))
            self._give_up(entry, code, message)

    def _give_up(self, entry: Entry, code: str, message: str) -> None:
        self.stats["undeliverable"] += 1
        log.error(
            "could not send %s for %s: %s %s (the next resync sends its state again)",
            entry.detail_type,
            entry.key,
            code,
            message,
        )
