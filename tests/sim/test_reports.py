"""What the simulator reports: utilization over one fixed window, node faults and
evictions in the event log and the picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from muster.cli import main
from muster.sim.engine import POLICIES, simulate
from muster.sim.report import marks, write_outputs
from muster.sim.scenario import load_builtin

from tests.sim.conftest import scenario


def test_utilization_is_gpu_hours_used_over_the_scenarios_window() -> None:
    # GIVEN one 8-GPU job of 10 minutes on one 8-GPU node, in a 2-hour window
    sc = scenario(
        """
        cluster: {nodes: 1, gpusPerNode: 8}
        until: 2h
        workloads: [{name: a, pods: 1, gpusPerPod: 8, startupSeconds: 0s, runSeconds: 600}]
        """
    )
    # WHEN it runs
    s = simulate(sc, "gang").summary
    # THEN the run ends early, but utilization is 80 GPU-minutes of 16 GPU-hours
    assert s["makespanSeconds"] < 700
    assert s["windowSeconds"] == 7200
    assert s["usefulGpuHours"] == pytest.approx(8 * 600 / 3600, abs=1e-3)
    assert s["utilization"] == pytest.approx((8 * 600) / (8 * 7200), abs=1e-4)
    assert s["idleGpuHours"] == pytest.approx(
        16 - s["usefulGpuHours"] - s["wastedGpuHours"], abs=1e-2
    )


@pytest.mark.parametrize("name", ["deadlock", "node-fault", "never-ready"])
def test_every_policy_of_a_comparison_is_measured_in_the_same_window(name: str) -> None:
    sc = load_builtin(name)
    runs = {p: simulate(sc, p).summary for p in POLICIES}
    assert {s["windowSeconds"] for s in runs.values()} == {sc.until}
    gpus = sc.nodes * sc.gpus_per_node
    for s in runs.values():
        assert s["utilization"] == pytest.approx(
            s["usefulGpuHours"] / (gpus * sc.until / 3600), abs=1e-4
        )
    # a policy that uses more GPU-hours has the higher utilization, whatever its length
    ranked = sorted(runs.values(), key=lambda s: s["usefulGpuHours"])
    assert [s["utilization"] for s in ranked] == sorted(s["utilization"] for s in ranked)


def test_a_node_fault_is_in_the_event_log_before_what_it_caused() -> None:
    events = simulate(load_builtin("node-fault"), "gang").events
    names = [(e.get("workload") or e["node"], e["event"]) for e in events]
    failed = names.index(("node-1", "NodeFailed"))
    recovery = names.index(("train", "WaitForRecovery"))
    repaired = names.index(("node-1", "NodeRepaired"))
    assert failed < recovery < repaired
    assert events[failed]["t"] == 100 and events[repaired]["t"] == 700
    assert "workload" not in events[failed]


def test_marks_are_the_evictions_and_the_time_each_node_is_down() -> None:
    events = [
        {"t": 10, "node": "n1", "event": "NodeFailed"},
        {"t": 20, "workload": "a", "event": "Evicted"},
        {"t": 30, "node": "n1", "event": "NodeRepaired"},
        {"t": 40, "node": "n2", "event": "NodeFailed"},
        {"t": 50, "workload": "b", "event": "Evicted"},
    ]
    shown = marks(events, end=90)
    assert shown.evictions == [20.0, 50.0]
    assert shown.nodes_down == [("n1", 10.0, 30.0), ("n2", 40.0, 90.0)]


def test_the_picture_and_files_of_a_comparison_with_faults(tmp_path: Path) -> None:
    sc = load_builtin("node-fault")
    results = [simulate(sc, p) for p in ("none", "gang")]
    written = write_outputs(results, tmp_path)
    assert [p.name for p in written] == ["events.jsonl", "summary.json", "gpu-use.png"]
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert {(x["policy"], x["event"]) for x in lines if "node" in x and "workload" not in x} == {
        ("none", "NodeFailed"),
        ("none", "NodeRepaired"),
        ("gang", "NodeFailed"),
        ("gang", "NodeRepaired"),
    }
    assert (tmp_path / "gpu-use.png").stat().st_size > 1000


def test_the_cli_table_shows_the_same_window_for_each_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "o"
    assert (
        main(
            [
                "simulate",
                "--builtin",
                "deadlock",
                "--compare",
                "none,gang+block",
                "--out",
                str(out),
                "--no-picture",
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    windows = {p: s["windowSeconds"] for p, s in summary["policies"].items()}
    assert len(set(windows.values())) == 1
