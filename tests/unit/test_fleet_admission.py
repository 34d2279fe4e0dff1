"""Cluster: deferred admission for shells that batch an instant, and the pass's short cuts."""

from __future__ import annotations

from muster.core import (
    Admit,
    Fleet,
    Settings,
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
