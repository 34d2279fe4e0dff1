"""What lies between the agent and the control plane: EventBridge, SQS, agent restarts.

Every event the agent sends is delivered zero, one or more times, each copy at
its send time plus a delay within the reordering window. An agent gap drops
everything sent while no agent runs; a later relist heals what was lost.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Perturbation:
    duplicate: float = 0.2  # chance of a second delivery (at-least-once)
    loss: float = 0.1  # chance an event is lost (healed by the next relist)
    window: float = 5.0  # deliveries reorder within this many seconds
    redelivery: float = 0.05  # chance of one more copy much later (an SQS redelivery)
    redelivery_after: float = 120.0  # ... up to this many seconds later
    gaps: bool = True  # honour the history's agent gaps


NONE = Perturbation(duplicate=0.0, loss=0.0, window=0.0, redelivery=0.0, gaps=False)


@dataclass
class Perturber:
    """Delivery times of each sent event, decided by one seeded random source."""

    rng: random.Random
    settings: Perturbation = field(default_factory=Perturbation)
    gaps: list[tuple[float, float]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def in_gap(self, at: float) -> bool:
        return self.settings.gaps and any(start <= at < end for start, end in self.gaps)

    def deliveries(self, sent_at: float) -> list[float]:
        """When copies of an event sent at `sent_at` arrive (none: lost)."""
        s = self.settings
        if self.in_gap(sent_at):
            self._count("unsent")
            return []
        if s.loss and self.rng.random() < s.loss:
            self._count("lost")
            return []
        copies = 2 if s.duplicate and self.rng.random() < s.duplicate else 1
        if copies == 2:
            self._count("duplicated")
        times = [
            sent_at + (self.rng.uniform(0, s.window) if s.window else 0.0) for _ in range(copies)
        ]
        if s.redelivery and self.rng.random() < s.redelivery:
            self._count("redelivered late")
            times.append(sent_at + self.rng.uniform(s.window, s.redelivery_after))
        return times

    def _count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1
