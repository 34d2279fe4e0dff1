"""The admission pass: order, quotas, backoff and blockAdmission."""

from __future__ import annotations

from dataclasses import replace

from muster.core import (
    DeadlineReached,
    Fleet,
    Phase,
    TimerKind,
    Workload,
    plan_admission,
)

from tests.unit.conftest import ready, settings, submit


def pending(
    key: str, created: float, priority: int = 0, gpus: int = 8, queue: str = "q", **kw: object
) -> Workload:
    return replace(
        Workload(
            key, queue, 1, gpus=gpus, priority=priority, created_at=created, queued_at=created
        ),
        **kw,
    )


def test_priority_first_then_the_timestamp() -> None:
    ws = [pending("a", 3), pending("b", 1), pending("c", 2, priority=5)]
    assert plan_admission(ws, [], settings(), 10).admit == ("c", "b", "a")


def test_eviction_timestamp_sends_an_evicted_workload_to_the_back_creation_keeps_its_place() -> (
    None
):
    evicted = pending("old", 0, queued_at=50)
    newer = pending("new", 10)
    assert plan_admission([evicted, newer], [], settings(gpuQuota=8), 60).admit == ("new",)
    creation = settings(gpuQuota=8, requeuingStrategy={"timestamp": "Creation"})
    assert plan_admission([evicted, newer], [], creation, 60).admit == ("old",)


def test_a_workload_in_backoff_is_passed_by_others_until_its_requeue_at() -> None:
    backing_off = pending("old", 0, requeue_at=100)
    newer = pending("new", 10)
    s = settings(gpuQuota=8, requeuingStrategy={"timestamp": "Creation"})
    assert plan_admission([backing_off, newer], [], s, 60).admit == ("new",)
    assert plan_admission([backing_off, newer], [], s, 100).admit == ("old",)


def test_best_effort_fifo_skips_what_does_not_fit_and_tries_the_next() -> None:
    big = pending("big", 0, gpus=32)
    small = pending("small", 1, gpus=8)
    active = [replace(pending("x", 0, gpus=16), phase=Phase.RUNNING)]
    plan = plan_admission([big, small], active, settings(gpuQuota=32), 5)
    assert plan.admit == ("small",)
    assert "needs 32 GPUs, cluster quota has 16 free" in plan.skipped["big"]


def test_queue_quotas_hold_within_each_queue() -> None:
    s = settings(queues={"a": {"gpuQuota": 8}, "b": {}})
    ws = [pending("a1", 0, queue="a"), pending("a2", 1, queue="a"), pending("b1", 2, queue="b")]
    plan = plan_admission(ws, [], s, 5)
    assert plan.admit == ("a1", "b1")
    assert "queue a quota" in plan.skipped["a2"]


def test_block_admission_admits_one_per_pass_and_nothing_while_one_is_not_ready() -> None:
    s = settings(blockAdmission=True)
    ws = [pending("a", 0), pending("b", 1)]
    assert plan_admission(ws, [], s, 5).admit == ("a",)
    for phase in (Phase.ADMITTED, Phase.RECOVERING):
        blocker = replace(pending("x", 0), phase=phase)
        plan = plan_admission(ws, [blocker], s, 5)
        assert plan.admit == () and plan.blocked_by == "x"
    running = replace(pending("x", 0), phase=Phase.RUNNING)
    assert plan_admission(ws, [running], s, 5).admit == ("a",)


def test_block_admission_end_to_end_admits_the_next_only_after_pods_ready() -> None:
    # GIVEN two gangs and blockAdmission
    c = Fleet(settings(blockAdmission=True))
    c.apply(submit("t/a", pods=1), 0)
    c.apply(submit("t/b", pods=1), 1)
    assert (c.get("t/a").phase, c.get("t/b").phase) == (Phase.ADMITTED, Phase.PENDING)  # type: ignore[union-attr]
    # WHEN the first becomes ready THEN the second is admitted
    result = c.apply(ready("t/a", "p0"), 2)
    assert c.get("t/b").phase is Phase.ADMITTED  # type: ignore[union-attr]
    assert any(type(e).__name__ == "Admit" and e.workload == "t/b" for e in result.effects)


def test_an_eviction_frees_the_lock_for_the_next_workload() -> None:
    c = Fleet(settings(blockAdmission=True, timeout="1m"))
    c.apply(submit("t/a", pods=1), 0)
    c.apply(submit("t/b", pods=1), 1)
    c.apply(DeadlineReached("t/a", 1, TimerKind.STARTUP), 60)
    assert c.get("t/a").phase is Phase.REQUEUED  # type: ignore[union-attr]
    assert c.get("t/b").phase is Phase.ADMITTED  # type: ignore[union-attr]
