"""A control plane wired to in-memory adapters and a hand-driven clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from muster.core import (
    Kind,
    PodObserved,
    Settings,
    WorkloadObserved,
    parse_settings,
)
from muster.runtime.memory import (
    MemoryBus,
    MemoryMessages,
    MemoryMetrics,
    MemoryStore,
    MemoryTimers,
)
from muster.runtime.ports import RecordingCluster
from muster.runtime.service import ControlPlane


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    store: MemoryStore = field(default_factory=MemoryStore)
    timers: MemoryTimers = field(default_factory=MemoryTimers)
    messages: MemoryMessages = field(default_factory=MemoryMessages)
    bus: MemoryBus = field(default_factory=MemoryBus)
    metrics: MemoryMetrics = field(default_factory=MemoryMetrics)
    cluster: RecordingCluster = field(default_factory=RecordingCluster)
    clock: Clock = field(default_factory=Clock)
    doc: dict = field(default_factory=lambda: {"timeout": "60s"})

    def settings(self) -> Settings:
        return parse_settings(self.doc)

    def plane(self, *, inline_admission: bool = False) -> ControlPlane:
        return ControlPlane(
            store=self.store,
            timers=self.timers,
            messages=self.messages,
            bus=self.bus,
            metrics=self.metrics,
            cluster=self.cluster,
            settings=self.settings,
            clock=self.clock,
            draw=lambda: 0.0,
            sleep=lambda seconds: None,
            inline_admission=inline_admission,
        )

    def submit(self, key: str = "ns/train", gang: int = 2, **kw: object) -> None:
        self.plane().handle(WorkloadObserved(key, kw.pop("queue", "default"), gang, seq=1, **kw))  # type: ignore[arg-type]

    def admit(self) -> list[str]:
        return self.plane(inline_admission=True).admission_pass()

    def pod(
        self, key: str, name: str, seq: int, *, ready: bool, node: str | None = "n1", **kw: object
    ):
        phase = kw.pop("phase", "Running" if ready else "Pending")
        uid = kw.pop("uid", f"{name}-uid")
        return self.plane().handle(
            PodObserved(key, name, seq, uid=uid, phase=phase, ready=ready, node=node, **kw)  # type: ignore[arg-type]
        )

    def phase(self, key: str) -> str:
        snap = self.store.load(key)
        assert snap is not None
        return snap.workload.phase.value


@pytest.fixture
def rig() -> Rig:
    return Rig()


__all__ = ["Clock", "Kind", "Rig"]
