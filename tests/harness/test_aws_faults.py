"""The fault wrappers around the runtime's ports, and the driver's invariants under them."""

from __future__ import annotations

import contextlib

import pytest
from muster.core import Admit, Kind, Timer, TimerKind, Workload
from muster.harness import Crash, FaultPlan, Throttled, wrap_ports
from muster.harness.driver import Harness, run_harness
from muster.retry import is_transient
from muster.runtime.memory import MemoryBus, MemoryMessages, MemoryStore, MemoryTimers
from muster.runtime.ports import Conflict, RecordingCluster

ALL_FAULTS = {
    "crash": 0.02,
    "conflict": 0.05,
    "throttle": 0.03,
    "lose": 0.05,
    "early_timer": 0.2,
    "redeliver": 0.05,
}


def _ports(plan: FaultPlan):
    return wrap_ports(
        plan,
        store=MemoryStore(),
        timers=MemoryTimers(),
        messages=MemoryMessages(),
        bus=MemoryBus(),
        cluster=RecordingCluster(),
    )


def test_a_conditional_write_can_lose_a_race_and_leave_nothing_written():
    ports = _ports(FaultPlan(conflict=1.0))
    with pytest.raises(Conflict):
        ports.store.write_workload(None, Workload(key="a/b", queue="q", gang_size=1), 0, (), 1.0)
    assert ports.store.load("a/b") is None
    assert ports.store.inner.items == {}  # type: ignore[attr-defined]


def test_a_crash_is_not_an_exception_the_runtime_could_catch():
    plan = FaultPlan(crash=1.0)
    ports = _ports(plan)
    with pytest.raises(Crash):
        ports.cluster.admit(Admit("a/b", 1, Kind.JOB))
    assert not issubclass(Crash, Exception)
    assert plan.injected["crash"] == 1


def test_a_crash_after_the_call_leaves_its_effect_done():
    plan = FaultPlan(seed=3, crash=0.5)
    ports = _ports(plan)
    inner = ports.cluster.inner
    for attempt in range(1, 41):
        with contextlib.suppress(Crash):
            ports.cluster.admit(Admit("a/b", attempt, Kind.JOB))
    before, after = (plan.injected[f"crash:cluster_admit:{w}"] for w in ("before", "after"))
    assert before > 0 and after > 0
    # Every call that did not die before it took effect, the one that died after it too.
    assert len(inner.calls) == 40 - before  # type: ignore[attr-defined]


def test_throttling_looks_transient_to_the_runtime_and_lost_messages_vanish():
    plan = FaultPlan(throttle=1.0)
    ports = _ports(plan)
    with pytest.raises(Throttled) as caught:
        ports.messages.requeue("a/b", 1, 60)
    assert is_transient(caught.value)
    lossy = _ports(FaultPlan(lose=1.0))
    lossy.messages.requeue("a/b", 1, 60)
    lossy.timers.start("a/b", Timer(TimerKind.STARTUP, 1, 1, 100.0))
    assert lossy.messages.inner.requeues == []  # type: ignore[attr-defined]
    assert lossy.timers.inner.started == []  # type: ignore[attr-defined]


def test_an_early_timer_comes_before_its_deadline_but_not_before_now():
    plan = FaultPlan(seed=1, early_timer=1.0)
    at = plan.early(1_000.0, 900.0)
    assert 900.0 <= at < 1_000.0 - 5


def test_without_faults_every_workload_ends_where_it_should():
    report = run_harness(FaultPlan(seed=1), workloads=30, seed=1)
    assert report.violations == []
    assert report.unfinished == []
    assert report.finished + report.deactivated == 30
    assert report.max_gpus_admitted <= report.quota
    assert report.sweeper_resent == 0  # nothing was lost, so nothing is sent again


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_under_every_fault_nothing_waits_forever_and_quota_holds(seed: int):
    # GIVEN crashes between effects, conflicts, throttling, lost messages and timers,
    # early timers and redelivery while a first delivery runs
    plan = FaultPlan(seed=seed, **ALL_FAULTS)
    # WHEN 40 workloads (some broken) run to the end
    report = run_harness(plan, workloads=40, seed=seed)
    # THEN every fault kind was injected
    for kind in ALL_FAULTS:
        assert plan.injected[kind] > 0, kind
    # AND after every sweep each workload had something that would move it on,
    # the quota held after every delivery, and every workload ended
    assert report.violations == []
    assert report.checks > 50
    assert report.max_gpus_admitted <= report.quota
    assert report.unfinished == []
    # AND no transient fault or crash got a workload quarantined
    assert report.quarantined == 0
    assert report.sweeper_resent > 0  # the sweeper moved what the lost messages would have


# A quota above the nodes' 128 GPUs: the capacity check, not quota, keeps gangs apart.
ROOMY = {
    "timeout": "5m",
    "gpuQuota": 160,
    "requeuingStrategy": {
        "backoffLimitCount": 3,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 600,
    },
}


@pytest.mark.parametrize("seed", [1, 2])
def test_with_the_capacity_check_no_two_gangs_are_admitted_on_the_same_gpus(seed: int):
    # GIVEN nodes with others' pods on some, and every fault injected
    plan = FaultPlan(seed=seed, **ALL_FAULTS)
    # WHEN 40 workloads run with capacityCheck on
    report = run_harness(plan, workloads=40, seed=seed, capacity=True, settings=ROOMY)
    # THEN nothing is lost or stuck, quota holds, and after every delivery the
    # admitted gangs fit the nodes as the control plane's view knows them
    assert report.violations == []
    assert report.fit_checks > 100
    assert report.unfinished == []
    assert report.max_gpus_admitted <= report.quota
    assert report.quarantined == 0


def test_without_the_capacity_check_gangs_are_admitted_on_the_same_gpus():
    # The invariant is not hollow: the same cluster with admission on quota alone breaks it.
    from dataclasses import replace

    from muster.harness.driver import Harness

    harness = Harness(FaultPlan(seed=1), workloads=40, seed=1, capacity=True, settings=ROOMY)
    harness.settings = replace(harness.settings, capacity_check=False)
    report = harness.run()
    assert any(v.startswith("same GPUs") for v in report.violations)


def test_without_the_sweeper_lost_messages_leave_workloads_waiting_forever():
    # The invariant is not hollow: take the sweeper away and it fails.
    report = run_harness(FaultPlan(seed=1, lose=0.2), workloads=40, seed=1, sweeper=False)
    waiting = [v for v in report.violations if v.startswith("waits forever")]
    assert waiting


def _with_faults(plan: FaultPlan):
    def wrap(ports: dict) -> dict:
        wrapped = wrap_ports(
            plan,
            store=ports["store"],
            timers=ports["timers"],
            messages=ports["messages"],
            bus=ports["bus"],
            cluster=ports["cluster"],
        )
        return {
            **ports,
            "store": wrapped.store,
            "timers": wrapped.timers,
            "messages": wrapped.messages,
            "bus": wrapped.bus,
            "cluster": wrapped.cluster,
        }

    return wrap


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_history_harness_converges_with_write_conflicts_injected(seed: int):
    # The cluster-truth harness drives the plane itself, with no redelivery of a
    # failed message, so only the faults the plane absorbs on its own are plugged in
    # there: lost races on every conditional write.
    from muster.harness import run_history

    plan = FaultPlan(seed=seed, conflict=0.2)
    outcome = run_history(seed, wrap_ports=_with_faults(plan))
    assert plan.injected["conflict"] > 0
    assert outcome.divergences == []


@pytest.mark.parametrize("block", [False, True])
def test_refused_admissions_and_throttled_entries_neither_stall_nor_quarantine(block: bool):
    # GIVEN every fault, plus releases the API server refuses for good (10% of
    # attempts) and lifecycle events whose PutEvents entry is throttled
    plan = FaultPlan(seed=7, refuse_admit=0.1, throttle_entry=0.05, **ALL_FAULTS)
    settings = {
        "timeout": "5m",
        "blockAdmission": block,
        "gpuQuota": 64,
        "requeuingStrategy": {
            "backoffLimitCount": 3,
            "backoffBaseSeconds": 60,
            "backoffMaxSeconds": 600,
        },
    }
    # WHEN 40 workloads run
    report = run_harness(plan, workloads=40, seed=7, settings=settings)
    # THEN refusals and throttled entries were drawn
    assert plan.injected["refuse_admit"] > 0 and plan.injected["throttle_entry"] > 0
    # AND nothing waits forever, quota holds, and every workload ended: a refused
    # admission holds neither the lock nor quota, and a throttled entry is retried
    assert report.violations == []
    assert report.unfinished == []
    assert report.max_gpus_admitted <= report.quota
    # AND neither a refusal nor a throttled entry quarantined anyone
    assert report.quarantined == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_pod_groups_run_again_under_every_fault(seed: int):
    # GIVEN a quarter of the workloads plain pod groups, each to run twice under its
    # name (gated pods, replaced by their controller after an eviction), under every
    # fault, refused releases and throttled entries included
    plan = FaultPlan(seed=seed, refuse_admit=0.05, throttle_entry=0.05, **ALL_FAULTS)
    harness = Harness(plan, workloads=40, seed=seed, pod_groups=0.25)
    groups = [k for k in harness.cluster.specs if k.endswith("@podgroup")]
    # WHEN they all run
    report = harness.run()
    # THEN each pod group that finished ran both its runs, nothing waits forever,
    # quota holds (in the store and on the cluster) and every workload ended
    assert len(groups) >= 5
    assert report.violations == [] and report.unfinished == []
    assert sum(harness.cluster.runs_done[k] == 2 for k in groups) >= 3
    assert report.quarantined == 0


def test_a_pod_group_left_finished_after_its_first_run_is_seen(monkeypatch: pytest.MonkeyPatch):
    # The run check is not hollow: a core that never starts a pod group's new run fails it.
    monkeypatch.setattr("muster.core.workloads.runs_again", lambda w, e: False)
    report = run_harness(FaultPlan(seed=1), workloads=40, seed=1, pod_groups=0.25)
    assert any("Finished after 1 of its 2 runs" in v for v in report.violations)


def test_a_cluster_that_keeps_what_was_evicted_breaks_the_quota_on_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
):
    # The cluster's quota check is not hollow: evictions that never withdraw break it.
    from muster.harness.model_cluster import ModelCluster

    monkeypatch.setattr(ModelCluster, "evict", lambda self, effect: None)
    report = run_harness(FaultPlan(seed=1), workloads=40, seed=1)
    assert any(v.startswith("quota on the cluster") for v in report.violations)
