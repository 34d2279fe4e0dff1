"""Virtual time for the fault harnesses, and an agenda of what is due when.

The history harness (`muster.harness.truth`) runs its agenda: entries ordered by
time, then by when they were put there. The AWS fault driver
(`muster.harness.driver`) reads and advances the time only.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any


@dataclass
class VirtualClock:
    """Simulated time and what is due when."""

    now: float = 0.0
    queue: list[tuple[float, int, str, Any]] = field(default_factory=list)
    order: itertools.count = field(default_factory=itertools.count)

    def at(self, when: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.queue, (when, next(self.order), kind, payload))

    def __call__(self) -> float:
        return self.now
