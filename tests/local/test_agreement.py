"""The local mode and the simulator tell the same story, with the same figures.

The local mode runs the deployed stack's template on a local moto server and the
real handlers; the simulator runs the same decision core in simulated time. For
the same scenario both must give the same lifecycle events per workload, at
times that differ only by the local mode's latencies (SQS polling, Step
Functions' one-second timer resolution), which time scaling multiplies, and the
same summary: the same counts, and figures of time and GPU time that differ only
as far as those latencies move them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from muster.cli import main
from muster.sim.engine import simulate
from muster.sim.scenario import load_builtin, load_scenario

pytestmark = pytest.mark.slow

SCALE = 10.0
# Per event, after a chain of several hand-offs. Measured on 2 cores: each hop (the bus,
# SQS polling, the handler's DynamoDB reads and writes on moto) takes 0.5-0.8 s, and a
# workload's eviction comes after about five of them, 4.0-4.3 s behind the simulator.
TOLERANCE_REAL_SECONDS = 6.0

SCENARIO = """
description: one gang ready in time, one never ready (evicted, requeued, deactivated)
cluster: {nodes: 2, gpusPerNode: 8}
settings:
  timeout: 30s
  requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 10}
until: 5m
workloads:
  - {name: good, queue: q, submitAt: 0s, pods: 1, gpusPerPod: 8, startupSeconds: 10, runSeconds: 30}
  - {name: bad, queue: q, submitAt: 2s, pods: 1, gpusPerPod: 8, startupSeconds: 10, runSeconds: 30, neverReady: true}
"""

KEYS = ("event", "attempt", "reason", "cause", "count")


def story(events: list[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    by_workload: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for e in events:
        by_workload[e.get("workload") or e["node"]].append(tuple(e.get(k) for k in KEYS))
    return dict(by_workload)


def times(events: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for e in events:
        out[e.get("workload") or e["node"]].append(e["t"])
    return dict(out)


# What only one kind of run has: its policy's name, its wall time, the simulator's
# count of the events its core decided on (the local mode's core decides inside the
# functions) and their outcomes, and the local mode's time scale.
RUN_OWN = {"policy", "wallSeconds", "simulatedEvents", "outcomes", "timeScale"}
EXACT = (
    "scenario",
    "seed",
    "workloads",
    "finished",
    "deactivated",
    "unfinished",
    "evictions",
    "requeues",
    "windowSeconds",
    "evictionsByClass",
    "deactivatedHealthy",
    "deactivatedByReason",
)


def drift(local: list[dict[str, Any]], simulated: list[dict[str, Any]]) -> float:
    """The largest difference between the two runs' times of the same event."""
    return max(
        abs(t_local - t_sim)
        for workload, sim_times in times(simulated).items()
        for t_local, t_sim in zip(times(local)[workload], sim_times, strict=True)
    )


def assert_summaries_agree(local: dict[str, Any], sim: dict[str, Any], late: float) -> None:
    """Every figure of the two summaries agrees, as far as the local mode's latencies allow.

    `late` is the largest difference between the two runs' event times. A figure on
    the wrong clock is off by the time scale (10x); latencies move a delay, a
    completion time or the end of the run by at most `late`, leave the GPU-hours of
    useful work (run times come from the cluster model) within a few percent, and
    lengthen how long a gang that is never Ready holds its GPUs (within 2x here).
    """
    assert set(local) - RUN_OWN == set(sim) - RUN_OWN
    for key in EXACT:
        assert local.get(key) == sim.get(key), key
    for group in ("queueDelaySeconds", "jctSeconds"):
        for k, v in sim[group].items():
            assert abs(local[group][k] - v) <= late, (group, k, local[group][k], v)
    assert abs(local["makespanSeconds"] - sim["makespanSeconds"]) <= late
    for key in ("usefulGpuHours", "utilization"):
        assert local[key] == pytest.approx(sim[key], rel=0.05), key
    wasted = {"wastedGpuHours": sim["wastedGpuHours"], **sim.get("wastedGpuHoursByFailure", {})}
    mine = {"wastedGpuHours": local["wastedGpuHours"], **local.get("wastedGpuHoursByFailure", {})}
    assert set(mine) == set(wasted)
    for key, v in wasted.items():
        assert v / 2 - 0.01 <= mine[key] <= 2 * v + 0.01, (key, mine[key], v)
    # Idle is what is left of the window: off by no more than the other two are.
    off = abs(local["usefulGpuHours"] - sim["usefulGpuHours"]) + abs(
        local["wastedGpuHours"] - sim["wastedGpuHours"]
    )
    assert abs(local["idleGpuHours"] - sim["idleGpuHours"]) <= off + 0.01


def test_local_mode_and_simulator_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a scenario file
    path = tmp_path / "two.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    # WHEN it runs through the local control plane
    code = main(["local", str(path), "--scale", str(SCALE), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    local = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    # THEN the live view showed the story and the files are the simulator's
    assert "bad" in printed and "Deactivated" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["finished"], summary["deactivated"], summary["evictions"]) == (1, 1, 2)
    assert (out / "gpu-use.png").stat().st_size > 1000
    # AND the simulator gives the same lifecycle, event for event
    run = simulate(load_scenario(path), "gang")
    simulated = run.events
    assert story(local) == story(simulated)
    assert story(local)["bad"][-2:] == [
        ("Evicted", 2, "Deactivated", "RequeuingLimitExceeded", None),
        ("Deactivated", None, "RequeuingLimitExceeded", None, 1),
    ]
    # AND at the same times, within the local mode's latencies
    for workload, sim_times in times(simulated).items():
        for t_local, t_sim in zip(times(local)[workload], sim_times, strict=True):
            assert abs(t_local - t_sim) <= TOLERANCE_REAL_SECONDS * SCALE, (
                workload,
                t_local,
                t_sim,
            )

    # AND the same summary
    assert_summaries_agree(summary, run.summary, drift(local, simulated))


def test_the_built_in_story_at_the_readmes_settings_is_the_simulators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the built-in story, run as `make demo` runs it (the default --scale 10)
    out = tmp_path / "demo"
    # WHEN it plays through the local control plane
    code = main(["local", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    local = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    # THEN it is the simulator's story, event for event: every gang that becomes Ready
    # does so in time, and `bad-image` is evicted early twice (reason WorkloadFault,
    # then deactivated with WorkloadFaults), not at its deadline
    run = simulate(load_builtin("local-story"), "gang")
    assert story(local) == story(run.events), printed
    assert [e.get("reason") for e in local if e.get("workload") == "bad-image"][2:] == [
        "WorkloadFault",
        None,
        None,
        None,
        "Deactivated",
        "WorkloadFaults",
    ]
    assert "why: 2 of 2 pods cannot pull image" in printed
    assert "retries stopped: 2 evictions in a row failed this way" in printed
    # AND each phase line comes after the event that moved the workload there
    assert_phases_follow_their_events(printed)
    # AND the summary is the simulator's, as printed and in summary.json
    summary = json.loads((out / "summary.json").read_text())
    assert_summaries_agree(summary, run.summary, drift(local, run.events))
    (row,) = [line.split() for line in printed.splitlines() if line.startswith("utilization ")]
    assert float(row[1].rstrip("%")) == pytest.approx(100 * run.summary["utilization"], abs=1)


PHASE_AFTER = {
    "Submitted": "Pending",
    "Admitted": "Admitted",
    "PodsReady": "Running",
    "WaitForRecovery": "Recovering",
    "Requeued": "Requeued",
    "BackoffFinished": "Pending",
    "Deactivated": "Deactivated",
    "Finished": "Finished",
}


def assert_phases_follow_their_events(printed: str) -> None:
    """Every workload a phase line shows in a phase was put there by an event line above it."""
    told: dict[str, str | None] = {}
    for line in printed.splitlines():
        if line.startswith("["):  # `[   t s] workload  Event  ...`
            _, rest = line.split("]", 1)
            who, event = rest.split()[:2]
            told[who] = PHASE_AFTER.get(event)
        elif line.startswith(" " * 12) and ": " in line and not line.strip().startswith("why:"):
            for cell in line.strip().split("  |  "):
                phase, names = cell.split(": ", 1)
                for name in names.split(", "):
                    assert told.get(name) == phase, (name, phase, line)
