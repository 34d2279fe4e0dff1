"""A Kubernetes API served over real HTTP by kmock's emulator, for the sync client.

kmock is asyncio-based and Muster's Kubernetes client is synchronous, so the emulator
runs on its own event loop in a background thread; tests stay plain functions.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

kmock = pytest.importorskip("kmock")


class EmulatedApiServer:
    """The emulator, its URL, and a way to run coroutines on its loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.handler: Any = None
        self.server: Any = None
        self.url = ""

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def start(self) -> None:
        async def start() -> str:
            self.handler = kmock.KubernetesEmulator()
            await self.handler.__aenter__()
            self.server = kmock.Server(self.handler)
            await self.server.__aenter__()
            return str(self.server.url).rstrip("/")

        self.url = self.run(start())

    def stop(self) -> None:
        async def stop() -> None:
            await self.server.__aexit__(None, None, None)
            await self.handler.__aexit__(None, None, None)

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    # The emulator's state and reactions are plain Python objects; touch them on its loop.
    def call(self, fn: Any) -> Any:
        async def wrapped() -> Any:
            return fn()

        return self.run(wrapped())


@pytest.fixture()
def apiserver() -> Iterator[EmulatedApiServer]:
    server = EmulatedApiServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
