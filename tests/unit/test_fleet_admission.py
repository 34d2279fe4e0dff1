"""Cluster: deferred admission for shells that batch an instant, the pass's short cuts, and
forgetting finished workloads."""

from __future__ import annotations

import pytest
from muster.core import (
    Admit,
    Fleet,
    ForgottenWorkload,
    LogEvent,
    Outcome,
    Publish,
    Settings,
    WorkloadFinished,
    WorkloadObserved,
    parse_settings,
    plan_admission,
)
from muster.core.model import Phase, Workload


def test_deferred_cluster_leaves_the_admission_pass_to_the_caller():
    # GIVEN a cluster in deferred mode
    cluster = Fleet(Settings(), defer_admission=True)
    # WHEN two workloads are submitted at the same instant
    first = cluster.apply(WorkloadObserved("a", "q", 1, gpus=1), 0)
    second = cluster.apply(WorkloadObserved("b", "q", 1, gpus=1), 0)
    # THEN nothing is admitted yet, but the caller is told a pass is wanted
    assert first.admission_wanted and second.admission_wanted
    assert not [e for e in first.effects + second.effects if isinstance(e, Admit)]
    # AND one pass admits both, in queue order
    step = cluster.admission_pass(0)
    assert [e.workload for e in step.effects if isinstance(e, Admit)] == ["a", "b"]


def test_immediate_cluster_still_admits_on_apply():
    cluster = Fleet(Settings())
    step = cluster.apply(WorkloadObserved("a", "q", 1, gpus=1), 0)
    assert not step.admission_wanted
    assert [e.workload for e in step.effects if isinstance(e, Admit)] == ["a"]


def test_a_pass_with_nothing_queued_makes_no_plan():
    cluster = Fleet(Settings())
    cluster.apply(WorkloadObserved("a", "q", 1, gpus=1), 0)
    assert cluster.admission_pass(1).plans == []


def test_blocked_plan_is_the_same_without_ordering_the_queue():
    settings = parse_settings({"blockAdmission": True})
    admitted = Workload("a", "q", 2, gpus=2, phase=Phase.ADMITTED, attempt=1)
    queued = [Workload("b", "q", 1, gpus=1), Workload("c", "q", 1, gpus=1)]
    plan = plan_admission(queued, [admitted], settings, 0)
    assert (plan.admit, plan.blocked_by) == ((), "a")
    # nothing admissible (still backing off): not reported as blocked
    waiting = [Workload("b", "q", 1, gpus=1, requeue_at=50.0)]
    assert plan_admission(waiting, [admitted], settings, 0).blocked_by is None


def test_a_forgetful_fleet_drops_a_finished_workload_and_refuses_its_later_events() -> None:
    # GIVEN a fleet that forgets finished workloads, with one admitted and one queued
    fleet = Fleet(Settings(), forget_finished=True)
    fleet.apply(WorkloadObserved("a", "q", 1, gpus=1), 0)
    fleet.apply(WorkloadObserved("b", "q", 1, gpus=1), 0)
    assert fleet.get("a") is not None
    # WHEN `a` finishes
    step = fleet.apply(WorkloadFinished("a"), 5)
    # THEN it is logged as finished and dropped, `b` stays
    assert [e.event for e in step.effects if isinstance(e, Publish)] == [LogEvent.FINISHED]
    assert fleet.get("a") is None and [w.key for w in fleet] == ["b"]
    # AND a later event for it is refused rather than decided on nothing
    with pytest.raises(ForgottenWorkload, match="'a'"):
        fleet.apply(WorkloadFinished("a"), 6)


def test_a_fleet_keeps_finished_workloads_unless_told_to_forget_them() -> None:
    fleet = Fleet(Settings())
    fleet.apply(WorkloadObserved("a", "q", 1, gpus=1), 0)
    fleet.apply(WorkloadFinished("a"), 5)
    kept = fleet.get("a")
    assert kept is not None and kept.phase is Phase.FINISHED
    assert fleet.apply(WorkloadFinished("a"), 6).outcomes[0][1] is Outcome.DUPLICATE
