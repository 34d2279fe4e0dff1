"""`muster tune`: a grid of settings, common random numbers, the guard rail, its files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from muster.cli import main
from muster.core import load_settings_text
from muster.sim.scenario import load_scenario
from muster.sim.tune_grid import UNSET_VALUE, parse_grid, run_grid, settings_document
from muster.sim.tune_ranking import OBJECTIVES, rank, recommended_document

# A healthy gang that takes 3 minutes to start and a broken one that never does.
# A 1-minute timeout with no retries deactivates the healthy one (it finishes under
# plain Kubernetes): the guard rail must keep that setting from being recommended,
# however little it wastes.
SCENARIO = """
cluster: {nodes: 1, gpusPerNode: 8}
settings:
  timeout: 10m
  requeuingStrategy: {backoffBaseSeconds: 10, backoffMaxSeconds: 60}
until: 2h
workloads:
  - {name: slow, pods: 1, gpusPerPod: 4, startupSeconds: 180, runSeconds: 600}
  - {name: broken, pods: 1, gpusPerPod: 4, neverReady: true}
"""
GRID = ["timeout=1m,5m", "requeuingStrategy.backoffLimitCount=0,unset"]


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "two-gangs.yaml"
    path.write_text(SCENARIO)
    return path


def test_tune_recommends_the_least_waste_that_deactivates_no_healthy_workload(
    scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # WHEN every combination runs and is ranked by wasted GPU-hours
    out = tmp_path / "tuned"
    code = main(["tune", str(scenario_file), "--grid", *GRID, "--jobs", "1", "--out", str(out)])
    # THEN it succeeds and recommends 5m with no retries: the broken gang goes at once,
    # the slow one starts in time
    assert code == 0
    printed = capsys.readouterr().out
    assert "recommended: timeout=5m, requeuingStrategy.backoffLimitCount=0" in printed
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    first = rows[0]
    assert (first["timeout"], first["requeuingStrategy.backoffLimitCount"]) == ("5m", "0")
    # AND 1m with no retries, which wastes least, is ranked last for failing the guard rail
    by_choice = {(r["timeout"], r["requeuingStrategy.backoffLimitCount"]): r for r in rows}
    cheapest = by_choice[("1m", "0")]
    assert cheapest["guardRail"] == "fail" and cheapest["deactivatedHealthy"] == "1"
    assert float(cheapest["wastedGpuHours"]) < float(rows[0]["wastedGpuHours"])
    assert rows[-1] is cheapest
    # AND the recommended document is valid settings for `muster settings set --file`
    text = (out / "recommended-settings.yaml").read_text()
    settings = load_settings_text(text)
    assert settings.defaults.timeout == 300 and settings.defaults.backoff_limit_count == 0
    assert settings.defaults.backoff_base_seconds == 10  # the scenario's own settings kept
    context = json.loads((out / "cdk-context.json").read_text())["muster:settings"]
    assert context["timeout"] == "5m" and context["requeuingStrategy"]["backoffLimitCount"] == 0
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_parallel_runs_give_the_same_numbers_as_one_at_a_time(scenario_file: Path):
    # GIVEN the same scenario: its draws come from its seed, the same for every run
    scenario = load_scenario(scenario_file)
    grid = parse_grid(GRID)
    # WHEN the grid runs in one process and in two
    serial, base1 = run_grid(scenario, grid, jobs=1)
    parallel, base2 = run_grid(scenario, grid, jobs=2)

    def numbers(summary: dict) -> dict:
        return {k: v for k, v in summary.items() if k != "wallSeconds"}

    # THEN every run's figures are identical, in grid order
    assert [numbers(r.summary) for r in serial] == [numbers(r.summary) for r in parallel]
    assert numbers(base1) == numbers(base2)
    assert [r.label for r in serial] == [
        "timeout=1m, requeuingStrategy.backoffLimitCount=0",
        "timeout=1m, requeuingStrategy.backoffLimitCount=unset",
        "timeout=5m, requeuingStrategy.backoffLimitCount=0",
        "timeout=5m, requeuingStrategy.backoffLimitCount=unset",
    ]
    # AND an objective other than waste ranks by its own figure (guard rail first)
    ranked = rank(serial, OBJECTIVES["evictions"])
    passing = [r for r in ranked if r.guarded]
    assert [r.evictions for r in passing] == sorted(r.evictions for r in passing)


def test_unset_removes_a_setting_and_is_written_null_for_settings_set():
    base = {
        "timeout": "5m",
        "requeuingStrategy": {"backoffLimitCount": 3, "backoffBaseSeconds": 10},
    }
    choice = (("requeuingStrategy.backoffLimitCount", UNSET_VALUE), ("timeout", "2m"))
    doc = settings_document(base, choice)
    assert doc == {"timeout": "2m", "requeuingStrategy": {"backoffBaseSeconds": 10}}
    assert base["requeuingStrategy"]["backoffLimitCount"] == 3  # the scenario's is untouched

    class _Run:
        document = doc

    _Run.choice = choice  # type: ignore[attr-defined]
    written = recommended_document(_Run)  # type: ignore[arg-type]
    assert written["requeuingStrategy"] == {"backoffBaseSeconds": 10, "backoffLimitCount": None}


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (["timeout"], "--grid 'timeout': expected SETTING=V1,V2"),
        (["timeout=2m", "timeout=5m"], "--grid timeout: given twice"),
        (["timeout=2m,soon"], "timeout"),
        (["requeuingStrategy.backoffLimitCount=-1"], "backoffLimitCount"),
        (["requeuingStrategy.bakoffLimitCount=3"], "bakoffLimitCount"),
        (["timeout.minutes=3"], "timeout is a value"),
    ],
)
def test_a_bad_grid_is_refused_naming_the_setting_before_anything_runs(
    scenario_file: Path, grid: list[str], message: str, capsys: pytest.CaptureFixture[str]
):
    code = main(["tune", str(scenario_file), "--grid", *grid, "--jobs", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("muster tune: ") and message in err
