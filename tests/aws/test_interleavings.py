"""Property: however pod events of one gang interleave between instances, the stored
gang ends consistent (the ready count matches the pods, and the phase matches
whether the gang is whole)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from muster.core import NodeObserved, Phase, PodObserved
from muster.runtime.memory import MemoryStore

from .conftest import Rig

KEY = "ns/gang"


@dataclass
class InterleavingStore(MemoryStore):
    """Before a write, may let another instance apply the next waiting event."""

    waiting: deque[Any] = field(default_factory=deque)
    interleave: deque[bool] = field(default_factory=deque)
    other: Any = None
    depth: int = 0

    def _maybe_interleave(self) -> None:
        if self.depth == 0 and self.waiting and self.interleave and self.interleave.popleft():
            self.depth += 1
            try:
                self.other.handle(self.waiting.popleft())
            finally:
                self.depth -= 1

    def write_pod(self, key, write, epoch, ready_delta, now=0.0, **kw):
        self._maybe_interleave()
        super().write_pod(key, write, epoch, ready_delta, now, **kw)

    def write_workload(self, before, after, epoch, outbox, now, pods=(), ready_delta=0, **kw):
        self._maybe_interleave()
        return super().write_workload(before, after, epoch, outbox, now, pods, ready_delta, **kw)


pod_event = st.tuples(st.integers(0, 3), st.booleans())  # (pod, ready)


@settings(max_examples=200, deadline=None)
# A pod that stops being ready between another writer's read and its commit of Running.
@example(
    events=[(2, True)],
    finals=[True, True, False, True],
    order=[0, 1, 3, 2],
    interleave=[False, False, True, True],
)
@given(
    events=st.lists(st.one_of(pod_event, st.just(("node-down", 0))), max_size=20),
    finals=st.lists(st.booleans(), min_size=4, max_size=4),
    order=st.permutations(range(4)),
    interleave=st.lists(st.booleans(), max_size=28),
)
def test_any_interleaving_leaves_the_gang_consistent(events, finals, order, interleave):
    # GIVEN an admitted gang of four, two instances sharing one table
    store = InterleavingStore()
    rig = Rig(store=store, doc={"timeout": "1h", "recoveryTimeout": "1h"})
    rig.submit(KEY, 4)
    rig.admit()
    first, second = rig.plane(), rig.plane()
    store.other = second
    seqs = [0, 0, 0, 0]
    # every pod reports at least once at the end, so the gang is often whole
    for item in [*events, *((pod, finals[pod]) for pod in order)]:
        if item[0] == "node-down":
            store.waiting.append(NodeObserved("n1", ready=False))
            continue
        pod, ready = item
        seqs[pod] += 1
        node = "n1" if pod < 2 else "n2"
        store.waiting.append(
            PodObserved(
                KEY, f"p{pod}", seqs[pod], uid=f"u{pod}", phase="Running", ready=ready, node=node
            )
        )
    store.interleave.extend(interleave)
    # WHEN every event is applied, some of them in the middle of another's writes
    while store.waiting:
        first.handle(store.waiting.popleft())
    # THEN the ready count matches the pods and the phase matches the gang
    snap = store.load(KEY)
    assert snap is not None
    w = snap.workload
    assert snap.ready_count == w.ready_pods
    if w.whole:
        assert w.phase is Phase.RUNNING
    else:
        assert w.phase in (Phase.ADMITTED, Phase.RECOVERING)
