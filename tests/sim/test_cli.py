"""`muster simulate` end to end: files, table, exit codes, determinism."""

from __future__ import annotations

import json
from pathlib import Path

from muster.cli import main
from muster.sim.engine import simulate
from muster.sim.scenario import builtin_names, load_builtin

SUMMARY_KEYS = {
    "workloads",
    "finished",
    "deactivated",
    "unfinished",
    "evictions",
    "requeues",
    "usefulGpuHours",
    "wastedGpuHours",
    "utilization",
    "queueDelaySeconds",
    "jctSeconds",
    "makespanSeconds",
    "simulatedEvents",
    "wallSeconds",
}


def test_simulate_writes_events_summary_and_picture(tmp_path: Path, capsys):
    scenario = tmp_path / "deadlock.yaml"
    scenario.write_text(
        (Path(__file__).parents[2] / "layers/muster/scenarios/deadlock.yaml").read_text()
    )
    code = main(
        ["simulate", str(scenario), "--policy", "gang+block", "--out", str(tmp_path / "out")]
    )
    assert code == 0
    out = capsys.readouterr()
    assert "gang+block" in out.out and "wasted GPU-hours" in out.out
    assert out.err == ""  # no progress bar when stderr is not a terminal
    lines = [json.loads(x) for x in (tmp_path / "out/events.jsonl").read_text().splitlines()]
    assert lines[0] == {"t": 0, "workload": "a", "event": "Submitted", "gangSize": 3}
    assert {
        "t": 80,
        "workload": "b",
        "event": "Evicted",
        "attempt": 1,
        "reason": "PodsReadyTimeout",
        "cause": "WaitForStart",
        "readyPods": 1,
        "gangSize": 3,
    } in lines
    assert {"t": 80, "workload": "b", "event": "Requeued", "count": 1, "requeueAt": 90} in lines
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["finished"] == 2 and summary["policy"] == "gang+block"
    assert (tmp_path / "out/gpu-use.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_puts_one_column_per_policy_and_tags_events(tmp_path: Path, capsys):
    code = main(
        [
            "simulate",
            "--builtin",
            "never-ready",
            "--compare",
            "gang,none",
            "--out",
            str(tmp_path),
            "--no-picture",
        ]
    )
    assert code == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header == ["gang", "none"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["policies"]) == {"gang", "none"}
    assert summary["policies"]["gang"]["deactivated"] == 1
    assert summary["policies"]["none"]["deactivated"] == 0
    policies = {
        json.loads(x)["policy"] for x in (tmp_path / "events.jsonl").read_text().splitlines()
    }
    assert policies == {"gang", "none"}
    assert not (tmp_path / "gpu-use.png").exists()


def test_builtin_all_writes_one_folder_per_scenario(tmp_path: Path, capsys):
    code = main(
        [
            "simulate",
            "--builtin",
            "all",
            "--compare",
            "none,gang",
            "--out",
            str(tmp_path),
            "--no-picture",
        ]
    )
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == builtin_names()
    assert {"deadlock", "never-ready", "node-fault", "node-fault-spare", "synthetic"} <= set(
        builtin_names()
    )


def test_bad_scenario_exits_2_with_the_field(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {nodes: 2}\nworkloads: [{name: a, pods: -1}]\n")
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "workloads[0].pods: must be at least 1" in err and str(bad) in err


def test_unknown_policy_and_missing_input_exit_2(capsys):
    assert main(["simulate", "--builtin", "deadlock", "--policy", "kueue"]) == 2
    assert "unknown policy 'kueue'" in capsys.readouterr().err
    assert main(["simulate"]) == 2
    assert "give a scenario file or --builtin" in capsys.readouterr().err


def test_progress_bar_only_on_request(capsys):
    assert main(["simulate", "--builtin", "node-fault", "--progress"]) == 0
    assert "of simulated time" in capsys.readouterr().err


def test_same_seed_same_output_different_seed_different_workloads():
    def run(seed: int) -> tuple[list[dict], dict]:
        r = simulate(load_builtin("synthetic", seed=seed), "gang")
        summary = {k: v for k, v in r.summary.items() if k != "wallSeconds"}
        return r.events, summary

    first, second, other = run(5), run(5), run(6)
    assert first == second
    assert first != other[0]
