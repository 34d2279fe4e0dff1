"""Wiring the agent together: reflector threads, the leader lease, the send loop."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from muster.agent.agent import WATCHED, Agent
from muster.agent.leader import LeaseElector
from muster.agent.watch import Change, Reflector, Sync, SyncPage, WatchSource

log = logging.getLogger("muster.agent")

INBOX_MESSAGES = 64
"""Messages (watch changes, list pages) waiting for the agent: a bound on its memory."""


class AgentRunner:
    """Runs the agent while this replica holds the lease; idles while it does not."""

    def __init__(
        self,
        agent: Agent,
        source: WatchSource,
        elector: LeaseElector | None = None,
        *,
        resync: float = 600.0,
        watch_timeout: int = 300,
        tick: float = 0.2,
        stats_every: float = 300.0,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self.agent = agent
        self.source = source
        self.elector = elector
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.tick = tick
        self.stats_every = stats_every
        self.reflectors: list[Reflector] = []
        self.heartbeat = heartbeat  # proof of life for the liveness probe
        self.last_beat = 0.0
        if elector is not None:
            agent.may_send = lambda: elector.leading  # fencing: only the leader sends

    def leading(self) -> bool:
        return self.elector is None or self.elector.leading

    def run(self, stop: threading.Event) -> None:
        if self.elector is not None:
            threading.Thread(target=self._campaign, args=(stop,), name="lease", daemon=True).start()
        while not stop.is_set():
            self._beat()
            if not self.leading():
                stop.wait(self.tick)
                continue
            self._lead(stop)

    def _beat(self) -> None:
        if self.heartbeat is not None and time.monotonic() - self.last_beat >= 5.0:
            self.heartbeat()
            self.last_beat = time.monotonic()

    def _campaign(self, stop: threading.Event) -> None:
        assert self.elector is not None
        while not stop.is_set():
            self.elector.try_acquire_or_renew()
            stop.wait(self.elector.retry_period)

    def _lead(self, stop: threading.Event) -> None:
        # Bounded: a reflector listing 50,000 pods waits for the agent to take its pages.
        inbox: queue.Queue[Sync | SyncPage | Change] = queue.Queue(maxsize=INBOX_MESSAGES)
        lead_stop = threading.Event()

        def put(message: Sync | SyncPage | Change) -> None:
            while not lead_stop.is_set():
                try:
                    inbox.put(message, timeout=1.0)
                    return
                except queue.Full:
                    continue

        self.reflectors = [
            Reflector(
                resource,
                self.source,
                put,
                label_selector=selector,
                resync=self.resync,
                watch_timeout=self.watch_timeout,
            )
            for resource, selector in WATCHED
        ]
        for reflector in self.reflectors:
            threading.Thread(
                target=reflector.run, args=(lead_stop,), name=reflector.resource.plural, daemon=True
            ).start()
        next_stats = time.monotonic() + self.stats_every
        try:
            while not stop.is_set() and self.leading():
                try:
                    message = inbox.get(timeout=self.tick)
                    self.agent.handle(message)
                    while True:  # drain what is already there before sending
                        self.agent.handle(inbox.get_nowait())
                except queue.Empty:
                    pass
                self.agent.flush()
                self._beat()
                if time.monotonic() >= next_stats:
                    log.info(json.dumps({"agentStats": self.stats()}))
                    next_stats = time.monotonic() + self.stats_every
            if stop.is_set() and self.leading():
                self.agent.flush(everything=True)
        finally:
            lead_stop.set()
            if not self.leading():
                log.warning("lost the lease; stopped sending")
                self.agent.reset()

    def stats(self) -> dict[str, Any]:
        sender_stats = getattr(self.agent.sender, "stats", {})
        return {
            **dict(self.agent.stats),
            **dict(self.agent.outbox.stats),
            **dict(sender_stats),
            "pending": len(self.agent.outbox.pending),
            "watches": {r.resource.plural: r.stats for r in self.reflectors},
        }
