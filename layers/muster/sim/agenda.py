"""The simulator's clock and what is due when: submissions, node faults, the
cluster's wake-ups, the core's deadlines and requeues, in a fixed order."""

from __future__ import annotations

from collections.abc import Iterable
from heapq import heappop, heappush
from typing import NamedTuple

from muster.core import DeadlineReached, RequeueDue

# What happens first at one instant (the order the scenario format promises).
FAULT, READY, COMPLETE, DEADLINE, REQUEUE, SUBMIT = range(6)

# Besides the core's own `DeadlineReached` and `RequeueDue`, the agenda holds these.


class Submit(NamedTuple):
    """The scenario's workload is created (suspended) and observed by the core."""

    workload: str


class PodStarted(NamedTuple):
    """A bound pod's startup is done: the kubelet reports it Ready."""

    job: str
    uid: str


class PodFails(NamedTuple):
    """A failing pod's next state: its image pull fails, its container exits or restarts."""

    job: str
    uid: str


class RunDone(NamedTuple):
    """A job's run is done, if it progressed without a break since `token`."""

    job: str
    token: int


class NodeFails(NamedTuple):
    node: str


class NodeRepaired(NamedTuple):
    node: str


Item = (
    Submit
    | PodStarted
    | PodFails
    | RunDone
    | NodeFails
    | NodeRepaired
    | DeadlineReached
    | RequeueDue
)


Entry = tuple[float, int, int, int, Item]


class Agenda:
    """The simulated clock and what is due when.

    Items run in (time, phase, tie, arrival) order: `phase` says what happens first
    at one instant (faults, pods turning Ready, completions, deadlines, requeues,
    submissions), `tie` orders one phase's items by the workload's place in the
    scenario (or the fault's), and arrival orders the rest.

    What is known from the start (`plan`: the scenario's submissions and faults)
    waits in one sorted list beside the heap of what comes up while running, so
    the heap stays small however long the scenario.
    """

    __slots__ = ("_heap", "_planned", "_pushed", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[Entry] = []
        self._planned: list[Entry] = []  # latest first: the next one is at the end
        self._pushed = 0

    def plan(self, items: Iterable[tuple[float, int, int, Item]]) -> None:
        """Items known before the run starts, in the order they were made."""
        for at, phase, tie, item in items:
            self._pushed += 1
            self._planned.append((at, phase, tie, self._pushed, item))
        self._planned.sort(reverse=True, key=lambda entry: entry[:4])  # arrival is unique

    def push(self, at: float, phase: int, tie: int, item: Item) -> None:
        self._pushed += 1
        heappush(self._heap, (at, phase, tie, self._pushed, item))

    def advance(self, until: float) -> bool:
        """Move the clock to the next instant with something due; False past `until`."""
        heap, planned = self._heap, self._planned
        if heap:
            at = heap[0][0]
            if planned and planned[-1][0] < at:
                at = planned[-1][0]
        elif planned:
            at = planned[-1][0]
        else:
            return False
        if at > until:
            return False
        self.now = at
        return True

    def due(self) -> bool:
        """Something more is due at the current instant."""
        now = self.now
        return bool(self._heap and self._heap[0][0] == now) or bool(
            self._planned and self._planned[-1][0] == now
        )

    def pop_due(self) -> Item | None:
        """The next item due at the current instant, or None."""
        heap, planned, now = self._heap, self._planned, self.now
        # Arrival numbers are unique, so comparing entries never reaches the items.
        if planned and planned[-1][0] == now and not (heap and heap[0] < planned[-1]):
            return planned.pop()[4]
        if heap and heap[0][0] == now:
            return heappop(heap)[4]
        return None
