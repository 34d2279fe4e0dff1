"""`muster tune`: a grid of settings, common random numbers, the guard rail, its files."""

from __future__ import annotations

import csv
import hashlib
import json
import shlex
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from muster.cli import main
from muster.core import load_settings_text
from muster.sim.scenario import load_scenario
from muster.sim.tune_grid import UNSET_VALUE, parse_grid, run_grid, settings_document
from muster.sim.tune_picture import pareto_figure
from muster.sim.tune_ranking import (
    OBJECTIVES,
    rank,
    read_provenance,
    recommended_document,
)

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


def test_tune_recommends_the_least_waste_that_loses_no_healthy_workload(
    scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # WHEN every combination runs and is ranked by wasted GPU-hours
    out = tmp_path / "tuned"
    # (to the end: the settings it would prune are looked at below)
    args = ["tune", str(scenario_file), "--grid", *GRID, "--jobs", "1", "--no-prune"]
    code = main([*args, "--out", str(out)])
    # THEN it succeeds and recommends 5m with no retries: the broken gang goes at once,
    # the slow one starts in time
    assert code == 0
    printed = capsys.readouterr().out
    assert "recommended: timeout=5m, requeuingStrategy.backoffLimitCount=0" in printed
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    first = rows[0]
    assert (first["timeout"], first["requeuingStrategy.backoffLimitCount"]) == ("5m", "0")
    by_choice = {
        (r["timeout"], r["requeuingStrategy.backoffLimitCount"]): r
        for r in rows
        if not r["baseline"]
    }
    # AND 1m with no retries, which wastes least, fails the guard rail: it deactivates
    # the slow gang
    cheapest = by_choice[("1m", "0")]
    assert cheapest["guardRail"] == "fail" and cheapest["deactivatedHealthy"] == "1"
    assert float(cheapest["wastedGpuHours"]) < float(rows[0]["wastedGpuHours"])
    # AND so does 1m retried forever: it deactivates nothing, but the slow gang, evicted
    # before it can start every time, never finishes
    forever = by_choice[("1m", "unset")]
    assert (forever["guardRail"], forever["deactivatedHealthy"]) == ("fail", "0")
    assert forever["unfinishedHealthy"] == "1"
    assert {id(r) for r in rows[-2:]} == {id(cheapest), id(forever)}
    # AND the recommended document is valid settings for `muster settings set --file`
    text = (out / "recommended-settings.yaml").read_text()
    settings = load_settings_text(text)
    assert settings.defaults.timeout == 300 and settings.defaults.backoff_limit_count == 0
    assert settings.defaults.backoff_base_seconds == 10  # the scenario's own settings kept
    context = json.loads((out / "cdk-context.json").read_text())["muster:settings"]
    assert context["timeout"] == "5m" and context["requeuingStrategy"]["backoffLimitCount"] == 0
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"


# Three healthy gangs that start in 90, 150 and 150 seconds, given no retry.
SLOW_STARTS = """
cluster: {nodes: 2, gpusPerNode: 8}
settings: {requeuingStrategy: {backoffLimitCount: 0}}
until: 2h
workloads:
  - {name: a, pods: 1, gpusPerPod: 4, startupSeconds: 90, runSeconds: 600}
  - {name: b, pods: 1, gpusPerPod: 4, startupSeconds: 150, runSeconds: 600}
  - {name: c, pods: 1, gpusPerPod: 4, startupSeconds: 150, runSeconds: 600}
"""


def test_settings_that_lose_fewer_healthy_workloads_rank_before_those_that_lose_more(
    tmp_path: Path,
):
    # GIVEN a 1-minute timeout that deactivates all three gangs, and 2 minutes two
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_STARTS)
    tuning = run_grid(load_scenario(path), parse_grid(["timeout=1m,2m,3m"]))
    # WHEN they are ranked by waste (1 minute wastes least)
    ranked = rank(tuning.runs, OBJECTIVES["wasted"])
    by_timeout = {r.choice[0][1]: r for r in ranked if r.in_grid}
    assert by_timeout["1m"].wasted < by_timeout["2m"].wasted
    # THEN both fail the guard rail, with their counts, and the one that loses two is
    # ranked before the one that loses three
    assert (by_timeout["2m"].deactivated_healthy, by_timeout["1m"].deactivated_healthy) == (2, 3)
    failing = [r.choice[0][1] for r in ranked if not r.guarded]
    assert failing == ["2m", "1m"]
    # AND the picture says how many each loses, beside its point
    fig = pareto_figure(tuning, next(r for r in ranked if r.guarded))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "timeout=2m\n2 healthy deactivated" in texts
    assert "timeout=1m\n3 healthy deactivated" in texts
    plt.close(fig)


def test_todays_settings_and_the_defaults_are_rows_of_the_ranking_marked_as_such(
    scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # GIVEN a grid that holds today's settings (the scenario's 10m, retried forever)
    # but not Muster's defaults (the scenario's backoff differs from theirs)
    out = tmp_path / "tuned"
    grid = ["timeout=10m,5m", "requeuingStrategy.backoffLimitCount=unset"]
    assert (
        main(["tune", str(scenario_file), "--grid", *grid, "--jobs", "1", "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    # THEN today's settings mark the grid's row, the defaults are run beside the grid
    assert len(rows) == 3
    today = next(r for r in rows if r["baseline"] == "today")
    assert (today["timeout"], today["requeuingStrategy.backoffLimitCount"]) == ("10m", "unset")
    defaults = next(r for r in rows if r["baseline"] == "defaults")
    assert (defaults["timeout"], defaults["requeuingStrategy.backoffLimitCount"]) == ("5m", "unset")
    # AND the table marks both
    assert "timeout=10m, requeuingStrategy.backoffLimitCount=unset [today]" in printed
    assert "timeout=5m, requeuingStrategy.backoffLimitCount=unset [defaults]" in printed
    # AND the defaults ran with Muster's own backoff, not the scenario's
    tuning = run_grid(load_scenario(scenario_file), parse_grid(grid))
    beside = next(r for r in tuning.runs if not r.in_grid)
    assert beside.baselines == ("defaults",) and beside.document == {}
    grid_5m = next(r for r in tuning.runs if r.in_grid and r.choice[0][1] == "5m")
    assert beside.summary["evictions"] != grid_5m.summary["evictions"]


# A trace: which jobs are broken and how long each takes to start come from the seed.
RANDOM = """
cluster: {nodes: 2, gpusPerNode: 8}
settings: {timeout: 5m, requeuingStrategy: {backoffBaseSeconds: 10, backoffMaxSeconds: 60}}
until: 3h
trace: {synthetic: {jobs: 30, maxRunSeconds: 900}, brokenFraction: 0.2}
"""


def test_a_scenario_that_draws_from_its_seed_is_tuned_on_three_seeds_with_the_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "random.yaml"
    path.write_text(RANDOM)
    out = tmp_path / "tuned"
    grid = ["requeuingStrategy.backoffLimitCount=1,unset"]
    # WHEN it is tuned without --seeds
    assert main(["tune", str(path), "--grid", *grid, "--jobs", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # THEN every setting ran on seeds 0, 1 and 2, and the figures are means with a spread
    assert "(seeds 0, 1, 2: means, ± half the spread)" in printed
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    assert {r["seeds"] for r in rows} == {"0 1 2"}
    spread = [r for r in rows if float(r["wastedGpuHoursMin"]) < float(r["wastedGpuHoursMax"])]
    assert spread, "the seeds gave every setting the same waste"
    for r in rows:
        low, mean, high = (
            float(r[k]) for k in ("wastedGpuHoursMin", "wastedGpuHours", "wastedGpuHoursMax")
        )
        assert low <= mean <= high
    assert "±" in printed.split("\n")[2]
    # AND the picture draws the spread as bars
    tuning = run_grid([load_scenario(path, seed=s) for s in (0, 1, 2)], parse_grid(grid), jobs=2)
    fig = pareto_figure(tuning, None)
    assert fig.axes[0].containers, "no spread bars"
    plt.close(fig)
    # AND a scenario that draws nothing from its seed runs once; --seeds asks for more
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(SCENARIO)
    assert main(["tune", str(fixed), "--grid", "timeout=5m", "--jobs", "1", "--out", str(out)]) == 0
    assert {r["seeds"] for r in csv.DictReader((out / "ranking.csv").open())} == {"0"}
    capsys.readouterr()
    assert (
        main(
            [
                "tune",
                str(fixed),
                "--grid",
                "timeout=5m",
                "--seeds",
                "2",
                "--jobs",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert {r["seeds"] for r in csv.DictReader((out / "ranking.csv").open())} == {"0 1"}


def test_the_recommendation_records_where_it_came_from_and_runs_again_the_same(
    scenario_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "tuned"
    assert (
        main(["tune", str(scenario_file), "--grid", *GRID, "--jobs", "1", "--out", str(out)]) == 0
    )
    first = capsys.readouterr().out
    text = (out / "recommended-settings.yaml").read_text()
    found = read_provenance(text)
    # THEN the file names the scenario (with its digest), the seeds, the grid, the policy
    assert found["scenario"]["path"] == str(scenario_file)
    assert found["scenario"]["sha256"] == hashlib.sha256(scenario_file.read_bytes()).hexdigest()
    assert (found["seeds"], found["grid"], found["policy"]) == ([0], GRID, "gang")
    # AND the figures of the recommendation, the baselines and plain Kubernetes
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    figures = found["figures"]
    assert figures["recommended"]["wastedGpuHours"] == float(rows[0]["wastedGpuHours"])
    assert figures["recommended"]["healthyDeactivated"] == 0
    assert {"today's settings", "Muster's defaults", "plain Kubernetes (none)"} <= set(figures)
    # AND its command gives the same ranking again
    again = shlex.split(found["command"])
    assert again[:2] == ["muster", "tune"]
    assert main([*again[1:], "--jobs", "1", "--no-picture"]) == 0
    assert capsys.readouterr().out == first.split("wrote ")[0]
    # AND the comments leave the document valid settings
    assert load_settings_text(text).defaults.timeout == 300


def test_parallel_runs_give_the_same_numbers_as_one_at_a_time(scenario_file: Path):
    # GIVEN the same scenario: its draws come from its seed, the same for every run
    scenario = load_scenario(scenario_file)
    grid = parse_grid(GRID)
    # WHEN the grid runs in one process and in two
    serial = run_grid(scenario, grid, jobs=1)
    parallel = run_grid(scenario, grid, jobs=2)

    def numbers(summary: dict) -> dict:
        return {k: v for k, v in summary.items() if k != "wallSeconds"}

    # THEN every run's figures are identical, in grid order
    assert [numbers(r.summary) for r in serial.runs] == [numbers(r.summary) for r in parallel.runs]
    assert numbers(serial.none.summary) == numbers(parallel.none.summary)
    assert [r.label for r in serial.runs if r.in_grid] == [
        "timeout=1m, requeuingStrategy.backoffLimitCount=0",
        "timeout=1m, requeuingStrategy.backoffLimitCount=unset",
        "timeout=5m, requeuingStrategy.backoffLimitCount=0",
        "timeout=5m, requeuingStrategy.backoffLimitCount=unset",
    ]
    # AND an objective other than waste ranks by its own figure (guard rail first)
    ranked = rank(serial.runs, OBJECTIVES["evictions"])
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
        in_grid = True
        baselines = ()

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
