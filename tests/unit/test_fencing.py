"""Fencing decided by the control plane's record, never by the workload's annotations."""

from __future__ import annotations

import pytest
from muster.core.fencing import still_current
from muster.core.model import Admit, Evict, Kind, Phase, Reason, Workload
from muster.lambdas.wiring import record_reader
from muster.runtime.memory import MemoryStore


def record(attempt: int, phase: Phase) -> Workload:
    return Workload("ml/train", "q", 2, attempt=attempt, phase=phase)


def evict(attempt: int) -> Evict:
    return Evict("ml/train", attempt, Kind.JOB, Reason.PODS_READY_TIMEOUT, Reason.WAIT_FOR_START)


@pytest.mark.parametrize(
    ("held", "current"),
    [
        (record(3, Phase.ADMITTED), True),
        (record(3, Phase.RUNNING), True),
        (record(3, Phase.RECOVERING), True),
        (record(3, Phase.REQUEUED), False),  # evicted since
        (record(3, Phase.FINISHED), False),
        (record(4, Phase.ADMITTED), False),  # a newer attempt holds the workload
        (None, False),
    ],
)
def test_an_admit_stands_only_while_the_record_holds_that_attempt(
    held: Workload | None, current: bool
) -> None:
    assert still_current(Admit("ml/train", 3, Kind.JOB), held) is current


@pytest.mark.parametrize(
    ("held", "current"),
    [
        (record(3, Phase.REQUEUED), True),
        (record(3, Phase.DEACTIVATED), True),
        (record(3, Phase.PENDING), True),  # backoff over, not yet readmitted
        (record(4, Phase.ADMITTED), False),
        (None, True),  # forgotten: withdrawing is the safe side
    ],
)
def test_an_eviction_stands_unless_a_newer_attempt_was_admitted(
    held: Workload | None, current: bool
) -> None:
    assert still_current(evict(3), held) is current


def test_the_lambdas_read_the_committed_record() -> None:
    store = MemoryStore()
    read = record_reader(store)
    assert read("ml/train") is None
    store.write_workload(None, record(2, Phase.ADMITTED), 0, (), 0.0)
    held = read("ml/train")
    assert held is not None and held.attempt == 2 and held.phase is Phase.ADMITTED


def test_an_action_for_an_earlier_object_under_the_name_is_never_current() -> None:
    # GIVEN the record of a new object under the name, at the same attempt number
    new = Workload("ml/train", "q", 2, attempt=1, phase=Phase.ADMITTED, uid="new")
    # THEN the old object's admission and eviction do not stand; the new one's do
    assert not still_current(Admit("ml/train", 1, Kind.JOB, "old"), new)
    old_evict = Evict("ml/train", 1, Kind.JOB, Reason.PODS_READY_TIMEOUT, None, uid="old")
    assert not still_current(old_evict, new)
    assert still_current(Admit("ml/train", 1, Kind.JOB, "new"), new)
