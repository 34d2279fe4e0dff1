"""`muster history export` on the local mode's deployment, replayed by the simulator.

The local mode runs a scenario through the deployed stack (moto) and the real
handlers; their history lands in the state table. The export must give one row
per workload with what happened (gang, GPUs, startup and run times in real
seconds, outcome), and the simulator, reading that trace, must tell the same story.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from muster.cli import main
from muster.local.run import STACK, Endpoint, LocalResult, run_local
from muster.sim.engine import simulate
from muster.sim.scenario import load_scenario, parse_scenario_text

pytestmark = pytest.mark.slow

SCALE = 10.0
LATENCY_REAL_SECONDS = 3.0  # the local mode's hand-offs (SQS polling, timer resolution)

SCENARIO = """
cluster: {nodes: 2, gpusPerNode: 8}
settings:
  timeout: 30s
  requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 10}
until: 5m
workloads:
  - {name: good, queue: q, submitAt: 0s, pods: 2, gpusPerPod: 4, startupSeconds: 10, runSeconds: 40}
  - {name: bad, queue: q, submitAt: 2s, pods: 1, gpusPerPod: 8, neverReady: true}
"""


def test_the_export_of_a_local_run_replays_as_the_same_story(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--endpoint` points this process's boto3 at the local endpoint: undo it afterwards.
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, os.environ.get(key, "unset"))
    trace = tmp_path / "trace.csv"
    codes: list[int] = []

    def export(endpoint: Endpoint, result: LocalResult) -> None:
        where = ["--endpoint", endpoint.url, "--stack", STACK]
        codes.append(main(["history", "export", "--since", "1h", "--out", str(trace), *where]))
        raise KeyboardInterrupt  # stop holding: everything the local mode started stops

    # GIVEN a scenario played through the local control plane
    run_local(parse_scenario_text(SCENARIO, name="two"), scale=SCALE, hold=export)
    # WHEN its history is exported
    assert codes == [0], capsys.readouterr().err
    assert "wrote 2 workloads" in capsys.readouterr().out
    rows = {r["workload"]: r for r in csv.DictReader(trace.open())}
    # THEN one row per workload, with what the control plane observed
    good, bad = rows["default/good"], rows["default/bad"]
    assert (good["gangSize"], good["gpus"], good["outcome"], good["attempts"]) == (
        "2",
        "8",
        "Succeeded",
        "1",
    )
    assert abs(float(good["startupSeconds"]) - 10 / SCALE) <= LATENCY_REAL_SECONDS
    assert abs(float(good["runSeconds"]) - 40 / SCALE) <= LATENCY_REAL_SECONDS
    assert (bad["outcome"], bad["startupSeconds"], bad["evictions"]) == ("Deactivated", "", "2")
    # AND the simulator, reading the trace under the same settings, tells the same story
    replay = tmp_path / "replay.yaml"
    replay.write_text(SCENARIO.split("workloads:")[0] + f"trace: {{path: {trace}}}\n")
    replayed = simulate(load_scenario(replay), "gang").events
    original = simulate(parse_scenario_text(SCENARIO, name="two"), "gang").events

    def story(events: list[dict[str, object]], workload: str) -> list[tuple[object, ...]]:
        return [
            (e["event"], e.get("reason"), e.get("cause"))
            for e in events
            if e["workload"] == workload
        ]

    assert story(replayed, "job-00001") == story(original, "good")
    assert story(replayed, "job-00002") == story(original, "bad")
    assert story(replayed, "job-00002")[-1] == ("Deactivated", "RequeuingLimitExceeded", None)
