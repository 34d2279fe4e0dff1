"""Exact timelines of the three scenario families: never ready, deadlock, node fault."""

from __future__ import annotations

from muster.sim.engine import simulate
from muster.sim.scenario import load_builtin

from .conftest import run, timeline

NEVER_READY = """
cluster: {nodes: 2, gpusPerNode: 8}
settings: {timeout: 60s, requeuingStrategy: {backoffLimitCount: 3, backoffBaseSeconds: 10}}
until: 1h
workloads:
  - {name: broken, pods: 2, gpusPerPod: 8, startupSeconds: 30, runSeconds: 600, neverReady: true}
"""


def test_never_ready_gang_is_evicted_at_each_deadline_with_doubling_backoff_then_deactivated():
    # GIVEN a gang whose pods never become Ready, timeout 60s, base 10s, limit 3
    # WHEN it runs under gang scheduling
    result = run(NEVER_READY)
    # THEN it is evicted 60s after each admission, requeued after 10, 20, 40 seconds,
    # and deactivated at the fourth eviction (count + 1 > 3)
    events = [
        (e["t"], e["event"], e.get("attempt"), e.get("count"), e.get("requeueAt"))
        for e in result.events
    ]
    assert events == [
        (0, "Submitted", None, None, None),
        (0, "Admitted", 1, None, None),
        (60, "Evicted", 1, None, None),
        (60, "Requeued", None, 1, 70),
        (70, "BackoffFinished", None, 1, None),
        (70, "Admitted", 2, None, None),
        (130, "Evicted", 2, None, None),
        (130, "Requeued", None, 2, 150),
        (150, "BackoffFinished", None, 2, None),
        (150, "Admitted", 3, None, None),
        (210, "Evicted", 3, None, None),
        (210, "Requeued", None, 3, 250),
        (250, "BackoffFinished", None, 3, None),
        (250, "Admitted", 4, None, None),
        (310, "Evicted", 4, None, None),
        (310, "Deactivated", None, 3, None),
    ]
    evicted = [(e["reason"], e["cause"]) for e in result.events if e["event"] == "Evicted"]
    # The deactivating eviction is Kueue's: not one more PodsReadyTimeout.
    assert evicted == [("PodsReadyTimeout", "WaitForStart")] * 3 + [
        ("Deactivated", "RequeuingLimitExceeded")
    ]
    s = result.summary
    assert (s["deactivated"], s["evictions"], s["requeues"], s["makespanSeconds"]) == (1, 4, 3, 310)
    # 16 GPUs held for 4 x 60 s while never ready: 16 * 240 / 3600 GPU-hours wasted
    assert s["wastedGpuHours"] == round(16 * 240 / 3600, 3)
    assert s["usefulGpuHours"] == 0


def test_never_ready_gang_holds_its_gpus_forever_without_gang_scheduling():
    result = run(NEVER_READY, "none")
    assert [e["event"] for e in result.events] == ["Submitted", "Admitted"]
    assert result.summary["unfinished"] == 1
    assert result.summary["makespanSeconds"] == 3600
    assert result.summary["wastedGpuHours"] == 16.0


def test_deadlock_none_neither_finishes():
    # GIVEN two gangs of three 8-GPU pods on 32 GPUs, both admitted at once
    result = simulate(load_builtin("deadlock"), "none")
    # THEN their pods interleave (a0, b0, a1, b1 bound; a2, b2 pending) and neither runs
    assert result.summary["finished"] == 0
    assert result.summary["unfinished"] == 2
    assert result.summary["usefulGpuHours"] == 0
    assert result.summary["wastedGpuHours"] == 32.0  # all 32 GPUs for the whole hour


def test_deadlock_gang_defaults_evicts_both_together_until_deactivated():
    result = simulate(load_builtin("deadlock"), "gang")
    evictions = [
        (e["t"], e["workload"], e["readyPods"]) for e in result.events if e["event"] == "Evicted"
    ]
    assert evictions == [(t, w, 2) for t in (60, 130, 210, 310) for w in ("a", "b")]
    assert result.summary["deactivated"] == 2
    assert result.summary["finished"] == 0


def test_deadlock_block_admission_lets_both_finish():
    result = simulate(load_builtin("deadlock"), "gang+block")
    assert timeline(result) == [
        (0, "a", "Submitted", None),
        (0, "b", "Submitted", None),
        (0, "a", "Admitted", None),
        (20, "a", "PodsReady", "Started"),
        (20, "b", "Admitted", None),  # b only once a is PodsReady
        (80, "b", "Evicted", "WaitForStart"),  # a still holds three of four nodes
        (80, "b", "Requeued", None),
        (90, "b", "BackoffFinished", None),
        (90, "b", "Admitted", None),
        (120, "a", "Finished", None),
        (140, "b", "PodsReady", "Started"),
        (240, "b", "Finished", None),
    ]
    assert result.summary["finished"] == 2
    assert result.summary["jctSeconds"] == {"p50": 120, "p95": 240, "max": 240}


def test_node_fault_without_spare_evicts_with_cause_wait_for_recovery():
    # GIVEN a running 3-node gang on 3 nodes; node-1 fails at 100s for 600s
    result = simulate(load_builtin("node-fault"), "gang")
    # THEN it waits for recovery, is evicted at 100 + 60 (cause WaitForRecovery),
    # fails to start while the node is down, and runs in full once it is back
    assert timeline(result) == [
        (0, "train", "Submitted", None),
        (0, "train", "Admitted", None),
        (30, "train", "PodsReady", "Started"),
        (100, "node-1", "NodeFailed", None),  # the fault first, then what it causes
        (100, "train", "WaitForRecovery", None),
        (160, "train", "Evicted", "WaitForRecovery"),
        (160, "train", "Requeued", None),
        (220, "train", "BackoffFinished", None),
        (220, "train", "Admitted", None),
        (280, "train", "Evicted", "WaitForStart"),
        (280, "train", "Requeued", None),
        (400, "train", "BackoffFinished", None),
        (400, "train", "Admitted", None),
        (460, "train", "Evicted", "WaitForStart"),
        (460, "train", "Requeued", None),
        (700, "node-1", "NodeRepaired", None),
        (700, "train", "BackoffFinished", None),
        (700, "train", "Admitted", None),
        (730, "train", "PodsReady", "Started"),  # a fresh start after an eviction
        (1330, "train", "Finished", None),  # the full 600s again: no checkpoint
    ]
    counts = [e["count"] for e in result.events if e["event"] == "Requeued"]
    assert counts == [1, 2, 3]


def test_node_fault_with_spare_recovers_and_keeps_its_progress():
    result = simulate(load_builtin("node-fault-spare"), "gang")
    assert timeline(result) == [
        (0, "train", "Submitted", None),
        (0, "train", "Admitted", None),
        (30, "train", "PodsReady", "Started"),
        (100, "node-1", "NodeFailed", None),
        (100, "train", "WaitForRecovery", None),
        (130, "train", "PodsReady", "Recovered"),
        # ran 70s before the fault, paused 30s, the remaining 530s after it
        (660, "train", "Finished", None),
    ]
    assert result.summary["evictions"] == 0


def test_node_fault_under_none_only_recreates_the_lost_pod():
    result = simulate(load_builtin("node-fault"), "none")
    assert [(e["t"], e["event"]) for e in result.events if e["event"] != "Submitted"] == [
        (0, "Admitted"),
        (30, "PodsReady"),
        (100, "NodeFailed"),
        (100, "WaitForRecovery"),
        (700, "NodeRepaired"),
        (730, "PodsReady"),  # the node is back at 700, the pod Ready 30s later
        (1260, "Finished"),
    ]
    assert result.summary["evictions"] == 0


def test_events_at_exactly_until_are_processed():
    doc = """
    cluster: {nodes: 1}
    until: 100s
    workloads: [{name: a, pods: 1, startupSeconds: 10, runSeconds: 90}]
    """
    result = run(doc)
    assert result.events[-1] == {
        "t": 100,
        "workload": "a",
        "event": "Finished",
        "attempt": 1,
        "reason": "Succeeded",
    }


def test_same_instant_order_pod_ready_before_deadline():
    # A pod Ready at the very second of the deadline wins: Ready is processed first.
    doc = """
    cluster: {nodes: 1}
    settings: {timeout: 30s}
    until: 1h
    workloads: [{name: a, pods: 1, startupSeconds: 30, runSeconds: 10}]
    """
    result = run(doc)
    assert [e["event"] for e in result.events] == ["Submitted", "Admitted", "PodsReady", "Finished"]
