"""The capacity check at admission: gangs admitted only where their pods fit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from muster.core import (
    Fleet,
    NodeObserved,
    Phase,
    PodObserved,
    WorkloadFinished,
    WorkloadObserved,
    plan_admission,
)
from muster.core.admission import AdmissionQueue, Usage
from muster.core.capacity import FitSkip, Fitter, NodeCapacity, observe_node
from muster.core.model import ACTIVE_PHASES, Pod, Workload

from tests.unit.conftest import settings

FIT = settings(capacityCheck=True)


def node(name: str, gpus: int = 8, foreign: int = 0, seq: int = 1, **kw: object) -> NodeObserved:
    return NodeObserved(name, seq=seq, gpus=gpus, foreign_gpus=foreign, **kw)  # type: ignore[arg-type]


def cap(name: str, gpus: int = 8, foreign: int = 0, schedulable: bool = True) -> NodeCapacity:
    return NodeCapacity(name, 1, gpus, schedulable, None if schedulable else "cordoned", foreign)


def queued(key: str, pods: int, each: int, created: float = 0.0, **kw: object) -> Workload:
    return Workload(key, "q", pods, gpus=pods * each, created_at=created, queued_at=created, **kw)  # type: ignore[arg-type]


def test_a_gang_is_admitted_only_where_all_its_pods_fit() -> None:
    # GIVEN two nodes with 6 and 8 free GPUs, and a gang of 2 pods x 8 GPUs first in line
    nodes = [cap("n0", foreign=2), cap("n1")]
    big = queued("t/big", 2, 8, created=1)
    small = queued("t/small", 1, 4, created=2)
    # WHEN a pass runs with the check
    plan = plan_admission([big, small], [], FIT, 10, nodes=nodes)
    # THEN the gang that does not fit is skipped with the reason, and the next one admitted
    assert plan.admit == ("t/small",)
    assert (
        plan.skipped["t/big"]
        == "needs 2 \u00d7 8 GPUs on one node each; free blocks hold 1 of them (largest 8)"
    )
    # AND without the check both are admitted on quota alone
    assert plan_admission([big, small], [], settings(), 10, nodes=nodes).admit == (
        "t/big",
        "t/small",
    )


def test_the_reason_names_the_largest_free_block() -> None:
    plan = plan_admission(
        [queued("t/a", 4, 8)], [], FIT, 0, nodes=[cap("n0", foreign=2), cap("n1", foreign=4)]
    )
    assert plan.skipped["t/a"] == "needs 4 \u00d7 8 GPUs on one node each; largest free block is 6"


def test_two_gangs_are_never_admitted_on_the_same_free_gpus_in_one_pass() -> None:
    # GIVEN 16 free GPUs and three gangs of 8 GPUs on one node each
    nodes = [cap("n0"), cap("n1")]
    gangs = [queued(f"t/g{i}", 1, 8, created=i) for i in range(3)]
    # WHEN one pass plans them
    plan = plan_admission(gangs, [], FIT, 0, nodes=nodes)
    # THEN the first two take the two nodes; the third is skipped
    assert plan.admit == ("t/g0", "t/g1")
    assert "t/g2" in plan.skipped


def test_gangs_admitted_earlier_and_not_placed_keep_their_reservation() -> None:
    # GIVEN a gang admitted in an earlier pass whose pods are not bound yet
    admitted = replace(queued("t/first", 2, 8), phase=Phase.ADMITTED, admitted_at=5)
    nodes = [cap("n0"), cap("n1"), cap("n2")]
    # WHEN the next pass plans another gang of 2 x 8
    plan = plan_admission([queued("t/second", 2, 8, created=6)], [admitted], FIT, 10, nodes=nodes)
    # THEN it does not fit: 2 of the 3 free nodes are reserved
    assert plan.admit == ()
    assert plan.skipped["t/second"].startswith("needs 2 \u00d7 8 GPUs")


def test_a_bound_pod_uses_its_nodes_gpus_and_is_not_reserved_twice() -> None:
    # GIVEN a running gang of 2 x 4 with both pods bound to n0
    pods = {f"p{i}": Pod(f"p{i}", 1, phase="Running", ready=True, node="n0") for i in range(2)}
    running = replace(queued("t/run", 2, 4), phase=Phase.RUNNING, admitted_at=1, pods=pods)
    fitter = Fitter.of([cap("n0"), cap("n1")], [running])
    # THEN n0 is full and n1 free: the gang counts once, where it is
    assert fitter.free == [0, 8]


def test_unschedulable_nodes_offer_nothing() -> None:
    nodes = [cap("n0", schedulable=False), cap("n1", foreign=8)]
    plan = plan_admission([queued("t/a", 1, 1)], [], FIT, 0, nodes=nodes)
    assert plan.admit == ()
    assert plan.skipped["t/a"] == "needs 1 \u00d7 1 GPUs on one node each; largest free block is 0"


@pytest.mark.parametrize(
    ("workload", "why"),
    [
        (
            queued("t/sel", 2, 8, placement="nodeSelector"),
            "capacity check not applied: its pods set nodeSelector, which the check does not "
            "evaluate; judged on quota alone",
        ),
        (
            replace(queued("t/odd", 3, 1), gpus=4),
            "capacity check not applied: its pod sizes are unknown (4 GPUs over 3 pods); "
            "judged on quota alone",
        ),
    ],
)
def test_what_the_check_cannot_evaluate_falls_back_to_quota_and_says_so(
    workload: Workload, why: str
) -> None:
    # GIVEN nodes with no room for the gang
    plan = plan_admission([workload], [], FIT, 0, nodes=[cap("n0", foreign=8)])
    # THEN it is admitted on quota alone, and the plan says why the check did not apply
    assert plan.admit == (workload.key,)
    assert dict(plan.unchecked) == {workload.key: why}


def test_without_any_node_report_the_check_falls_back_to_quota() -> None:
    plan = plan_admission([queued("t/a", 2, 8)], [], FIT, 0, nodes=[])
    assert plan.admit == ("t/a",)
    assert "no node has reported its capacity yet" in dict(plan.unchecked)["t/a"]


def test_min_available_asks_for_the_largest_pods_of_the_gang() -> None:
    # GIVEN a PyTorchJob-like shape: 1 pod of 0 GPUs and 4 of 8, gang size 3
    w = replace(queued("t/a", 3, 8), shape=((4, 8), (1, 0)))
    plan = plan_admission([w], [], FIT, 0, nodes=[cap("n0"), cap("n1"), cap("n2", foreign=1)])
    assert plan.skipped["t/a"] == (
        "needs 3 \u00d7 8 GPUs on one node each; free blocks hold 2 of them (largest 8)"
    )


def test_node_reports_are_ordered_by_seq() -> None:
    # GIVEN a node known at seq 5
    known = observe_node(None, node("n0", gpus=8, foreign=0, seq=5))
    assert known is not None
    # THEN an older report (reordered delivery) and a duplicate change nothing
    assert observe_node(known, node("n0", gpus=8, foreign=8, seq=4)) is None
    assert observe_node(known, node("n0", gpus=8, foreign=8, seq=5)) is None
    # AND a newer one replaces it; NotReady makes it unschedulable whatever else it says
    newer = observe_node(known, node("n0", gpus=8, foreign=2, seq=6, ready=False))
    assert newer == NodeCapacity("n0", 6, 8, False, "NotReady", 2)
    # AND an event without capacity (an older agent) is not about capacity
    assert observe_node(known, NodeObserved("n0", ready=False, seq=9)) is None


def test_the_cluster_keeps_the_newest_capacity_and_admits_when_room_appears() -> None:
    # GIVEN a cluster with the check on, one full node, and a queued gang of 1 x 8
    cluster = Fleet(FIT)
    cluster.apply(node("n0", foreign=8, seq=10), 0)
    cluster.apply(WorkloadObserved("t/a", "q", 1, gpus=8, seq=1), 1)
    assert cluster.workloads["t/a"].phase is Phase.PENDING
    # WHEN a stale report (seq 9) says the node is free, nothing changes
    cluster.apply(node("n0", foreign=0, seq=9), 2)
    assert cluster.workloads["t/a"].phase is Phase.PENDING
    # AND when the newer report says so, the gang is admitted
    cluster.apply(node("n0", foreign=0, seq=11), 3)
    assert cluster.workloads["t/a"].phase is Phase.ADMITTED


def test_the_cluster_counts_muster_pods_bound_to_a_node() -> None:
    # GIVEN one node of 8 GPUs and a gang of 1 x 8 admitted and bound there
    cluster = Fleet(FIT)
    cluster.apply(node("n0"), 0)
    cluster.apply(WorkloadObserved("t/a", "q", 1, gpus=8, seq=1), 1)
    cluster.apply(PodObserved("t/a", "a-0", 2, "u", "Running", True, "n0"), 2)
    assert cluster.workloads["t/a"].phase is Phase.RUNNING
    # WHEN another gang of 1 x 8 arrives
    step = cluster.apply(WorkloadObserved("t/b", "q", 1, gpus=8, seq=1), 3)
    # THEN it waits for room, with the reason
    assert cluster.workloads["t/b"].phase is Phase.PENDING
    assert any(isinstance(s, FitSkip) and s.workload == "t/b" for p in step.plans for s in p.skips)


def test_the_admission_queue_gives_the_same_admissions_as_the_plain_pass() -> None:
    # GIVEN a mix of shapes, some fitting and some not
    nodes = [cap("n0", foreign=2), cap("n1"), cap("n2", foreign=4)]
    ws = [
        queued("t/a", 2, 8, created=1),
        queued("t/b", 1, 6, created=2),
        queued("t/c", 2, 4, created=3),
        queued("t/d", 1, 6, created=4),
        queued("t/e", 1, 2, created=5),
    ]
    queue = AdmissionQueue(FIT)
    for w in ws:
        queue.add(w)
    from_queue = queue.plan(0, Usage(), Fitter.of(nodes))
    assert from_queue.admit == plan_admission(ws, [], FIT, 0, nodes=nodes).admit
    assert from_queue.admit == ("t/b", "t/c", "t/e")


def test_in_a_dry_run_queue_the_check_reports_and_holds_nothing_back() -> None:
    shadow = settings(capacityCheck=True, queues={"q": {"dryRun": True}})
    w = queued("t/a", 2, 8)
    plan = plan_admission([w], [], shadow, 0, nodes=[cap("n0", foreign=4)])
    assert plan.admit == ("t/a",)
    assert dict(plan.unchecked)["t/a"] == (
        "dry run: the capacity check would hold it back "
        "(needs 2 \u00d7 8 GPUs on one node each; largest free block is 4)"
    )


@hsettings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("node"), st.integers(0, 3), st.integers(0, 8), st.booleans()),
            st.tuples(st.just("submit"), st.integers(0, 5), st.integers(1, 3), st.integers(1, 4)),
            st.tuples(st.just("pod"), st.integers(0, 5), st.integers(0, 2), st.integers(-1, 3)),
            st.tuples(st.just("finish"), st.integers(0, 5), st.just(0), st.just(0)),
        ),
        max_size=40,
    )
)
def test_the_cluster_keeps_the_same_capacity_view_as_one_built_afresh(steps) -> None:
    # GIVEN a cluster with the check on, nodes and gangs coming and going, pods bound,
    # moved and deleted in any order
    cluster = Fleet(FIT)
    for seq, (what, a, b, c) in enumerate(steps, start=1):
        if what == "node":
            cluster.apply(node(f"n{a}", gpus=b, seq=seq, schedulable=c), seq)
        elif what == "submit":
            cluster.apply(WorkloadObserved(f"t/w{a}", "q", b, b * c, created_at=seq, seq=seq), seq)
        elif what == "pod":
            on = f"n{c}" if c >= 0 else None
            event = PodObserved(f"t/w{a}", f"p{b}", seq, phase="Running", node=on, deleted=c == 3)
            cluster.apply(event, seq)
        else:
            cluster.apply(WorkloadFinished(f"t/w{a}"), seq)
        # THEN after every step the pass sees what a view built from scratch sees
        active = [w for w in cluster if w.phase in ACTIVE_PHASES]
        fresh = Fitter.of(cluster.nodes.values(), active)
        kept = cluster.fitter()
        assert kept is not None
        assert (kept.names, kept.free) == (fresh.names, fresh.free)


def test_with_every_reported_node_cordoned_a_gang_waits_in_the_simulator_as_in_the_lambdas() -> (
    None
):
    # GIVEN one node that reported its capacity and is cordoned, and a gang queued
    fleet = Fleet(FIT)
    fleet.apply(node("n0", schedulable=False, unschedulable="cordoned"), 0)
    fleet.apply(WorkloadObserved("t/a", "q", 1, gpus=8, seq=1, shape=((1, 8),)), 1)
    # WHEN the in-memory control plane and the planner the Lambdas call plan for it
    plan = plan_admission([queued("t/a", 1, 8)], [], FIT, 1, nodes=[cap("n0", schedulable=False)])
    # THEN both hold it back for want of room, neither admits it on quota alone
    assert plan.admit == ()
    assert "t/a" in plan.skipped and plan.unchecked == ()
    assert fleet.workloads["t/a"].phase is Phase.PENDING


def test_node_reports_ask_at_once_then_once_for_the_window_then_not_at_all():
    from muster.core.capacity import Pace, pace_request

    first, pace = pace_request(None, 100.0, 5.0)
    assert (first, pace) == (0.0, Pace(100.0))
    trailing, pace = pace_request(pace, 101.5, 5.0)
    assert trailing == 3.5 and pace == Pace(100.0, trailing=True)
    skipped, pace = pace_request(pace, 104.9, 5.0)
    assert skipped is None and pace == Pace(100.0, trailing=True)
    again, pace = pace_request(pace, 105.0, 5.0)
    assert (again, pace) == (0.0, Pace(105.0))
    # a clock that went back starts a new window rather than waiting
    back, pace = pace_request(pace, 90.0, 5.0)
    assert (back, pace) == (0.0, Pace(90.0))
