"""The local mode and the simulator tell the same story.

The local mode runs the deployed stack's template on a local moto server and the
real handlers; the simulator runs the same decision core in simulated time. For
the same scenario both must give the same lifecycle events per workload, at
times that differ only by the local mode's latencies (SQS polling, Step
Functions' one-second timer resolution), which time scaling multiplies.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from muster.cli import main
from muster.sim.engine import simulate
from muster.sim.scenario import load_scenario

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
    simulated = simulate(load_scenario(path), "gang").events
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


FAULTS_SCENARIO = """
description: an image that cannot be pulled, stopped early and deactivated
cluster: {nodes: 1, gpusPerNode: 8}
settings:
  timeout: 2m
  requeuingStrategy: {backoffBaseSeconds: 10}
  workloadFaults: {limitCount: 1, evictAfter: 15s}
until: 5m
workloads:
  - {name: bad-image, queue: q, pods: 2, gpusPerPod: 4, startupSeconds: 10, failure: ImagePullBackOff}
"""


def test_a_job_whose_image_cannot_be_pulled_is_stopped_early_in_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN failure-aware retry on and a job whose image cannot be pulled
    path = tmp_path / "faults.yaml"
    path.write_text(FAULTS_SCENARIO)
    out = tmp_path / "out"
    # WHEN it runs through the real handlers (the evictAfter timer a Step Functions
    # execution on moto)
    code = main(["local", str(path), "--scale", str(SCALE), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    local = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    # THEN it is evicted early twice and deactivated, and the live view says why
    assert story(local)["bad-image"] == [
        ("Submitted", None, None, None, None),
        ("Admitted", 1, None, None, None),
        ("Evicted", 1, "WorkloadFault", "WaitForStart", None),
        ("Requeued", None, None, None, 1),
        ("BackoffFinished", None, None, None, 1),
        ("Admitted", 2, None, None, None),
        ("Evicted", 2, "Deactivated", "WorkloadFaults", None),
        ("Deactivated", None, "WorkloadFaults", None, 1),
    ]
    assert "why: 2 of 2 pods cannot pull image" in printed
    assert "retries stopped: 2 evictions in a row failed this way" in printed
    assert [e.get("class") for e in local if e["event"] == "Evicted"] == ["WorkloadFault"] * 2
    # AND the simulator tells the same story, well before the 2-minute deadline
    simulated = simulate(load_scenario(path), "gang").events
    assert story(local) == story(simulated)
    first = next(e for e in simulated if e["event"] == "Evicted")
    assert first["t"] == 25  # the pull fails at 10 s, evictAfter 15 s
