"""`muster tune`'s pruning, its items and its pool: the answer never changes."""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from muster.cli import main
from muster.core import parse_settings
from muster.sim.engine import Simulation, simulate
from muster.sim.scenario import load_scenario
from muster.sim.tune_grid import Tuning, parse_grid, run_grid
from muster.sim.tune_item import make_item, run_item
from muster.sim.tune_ranking import OBJECTIVES, rank, within_spread

# A healthy gang slow to start and a broken one that never starts: with no backoff
# limit the broken one is retried until the horizon, and wastes more the shorter
# the timeout; today's settings and the defaults finish first and bound the rest.
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

# A trace: broken jobs and start-up times drawn from the seed.
RANDOM = """
cluster: {nodes: 2, gpusPerNode: 8}
settings: {timeout: 5m, requeuingStrategy: {backoffBaseSeconds: 10, backoffMaxSeconds: 60}}
until: 3h
trace: {synthetic: {jobs: 30, maxRunSeconds: 900}, brokenFraction: 0.2}
"""
RANDOM_GRID = ["timeout=2m,5m,15m", "requeuingStrategy.backoffLimitCount=1,unset"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _figures(tuning: Tuning, objective: str) -> list[tuple[str, list[dict]]]:
    """The ranking of the runs that finished: label and every seed's summary."""

    def numbers(summary: dict) -> dict:
        return {k: v for k, v in summary.items() if k != "wallSeconds"}

    ranked = rank(tuning.runs, OBJECTIVES[objective])
    return [(r.label + r.mark, [numbers(t.summary) for t in r.trials]) for r in ranked]


@pytest.mark.parametrize(
    ("text", "grid", "objective", "seeds", "jobs"),
    [
        (SCENARIO, GRID, "wasted", (0,), 1),
        (SCENARIO, GRID, "evictions", (0,), 1),
        (RANDOM, RANDOM_GRID, "wasted", (0, 1, 2), 2),
    ],
    ids=["wasted", "evictions", "three-seeds-two-workers"],
)
def test_pruning_leaves_the_ranking_and_the_recommendation_as_they_are(
    tmp_path: Path, text: str, grid: list[str], objective: str, seeds: tuple[int, ...], jobs: int
) -> None:
    path = _write(tmp_path, "s.yaml", text)
    scenarios = [load_scenario(path, seed=s) for s in seeds]
    # WHEN the grid runs to the end, and again pruned
    full = run_grid(scenarios, parse_grid(grid), jobs=jobs)
    pruned = run_grid(scenarios, parse_grid(grid), jobs=jobs, prune=objective)
    # THEN some setting was stopped as dominated
    assert pruned.dominated, "nothing was pruned: the test proves nothing"
    stopped = {d.index for d in pruned.dominated}
    # AND the settings that finished rank as they did, with the very same figures
    everything = _figures(full, objective)
    labels = {r.index: r.label + r.mark for r in full.runs}
    kept = [row for row in everything if row[0] not in {labels[i] for i in stopped}]
    assert _figures(pruned, objective) == kept
    # AND the recommendation is the same, and ranked above every dominated setting
    key = OBJECTIVES[objective].key
    best_full = next(r for r in rank(full.runs, OBJECTIVES[objective]) if r.guarded)
    best_pruned = next(r for r in rank(pruned.runs, OBJECTIVES[objective]) if r.guarded)
    assert best_pruned.index == best_full.index
    for r in full.runs:
        if r.index in stopped:
            assert key(r) > key(best_full)
            assert not r.baselines, "a baseline was stopped"
    # AND plain Kubernetes is the same run
    assert pruned.none.summary["finished"] == full.none.summary["finished"]


def test_a_dominated_setting_is_stopped_listed_and_never_recommended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "two-gangs.yaml", SCENARIO)
    out = tmp_path / "tuned"
    # WHEN it is tuned (pruning is on by default)
    args = ["tune", str(path), "--grid", *GRID, "--jobs", "1", "--no-picture"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # THEN a 1-minute timeout with no limit, which retries the broken gang every two
    # minutes, is stopped early and listed as dominated, with how far it got
    line = next(
        x
        for x in printed.splitlines()
        if "timeout=1m, requeuingStrategy.backoffLimitCount=unset" in x
    )
    assert line.lstrip().startswith("-  ")
    percent = int(line.split("dominated at ")[1].split("%")[0])
    assert 0 < percent < 100
    assert "recommended: timeout=5m, requeuingStrategy.backoffLimitCount=0" in printed
    rows = list(csv.DictReader((out / "ranking.csv").open()))
    dominated = [r for r in rows if r["guardRail"] == "dominated"]
    assert {r["timeout"] for r in dominated} >= {"1m"}
    assert all(r["wastedGpuHours"] == "" and 0 < float(r["dominatedAt"]) < 1 for r in dominated)
    # AND with --no-prune every setting runs to the end, and the recommendation is the same
    assert main([*args, "--no-prune", "--out", str(out)]) == 0
    again = capsys.readouterr().out
    assert "dominated at" not in again
    assert "recommended: timeout=5m, requeuingStrategy.backoffLimitCount=0" in again
    assert again.splitlines()[2] == printed.splitlines()[2]  # the winner's row


def test_a_stop_predicate_ends_a_run_early_and_one_that_never_fires_changes_nothing(
    tmp_path: Path,
) -> None:
    scenario = load_scenario(_write(tmp_path, "s.yaml", RANDOM))
    plain = simulate(scenario, "gang")
    asked: list[float] = []

    def never(sim: Simulation) -> bool:
        asked.append(sim.agenda.now)
        return False

    watched = simulate(scenario, "gang", stop=never, stop_every=600)
    assert watched.events == plain.events and watched.stopped_at is None
    assert len(asked) > 5 and all(b - a >= 600 for a, b in itertools.pairwise(asked))
    stopped = simulate(scenario, "gang", stop=lambda sim: sim.agenda.now >= 3600)
    assert stopped.stopped_at is not None and 3600 <= stopped.stopped_at < scenario.until
    assert len(stopped.events) < len(plain.events)


def test_an_item_is_json_in_and_out_and_runs_from_the_scenario_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.yaml", RANDOM)
    scenario = load_scenario(path, seed=1)
    doc = {**scenario.raw_settings, "timeout": "2m"}
    # GIVEN an item as a distributed map would hand it over: JSON, naming the file
    item = json.loads(json.dumps(make_item(path, 1, "gang", doc, 4)))
    found = run_item(item)
    # THEN its result is JSON, and the simulator's own run of that file, seed and settings
    assert json.loads(json.dumps(found)) == found
    settings = replace(parse_settings(doc), gpu_quota=scenario.gpu_quota)
    expected = simulate(replace(scenario, settings=settings, raw_settings=doc), "gang")
    same = {k: v for k, v in expected.summary.items() if k != "wallSeconds"}
    assert {k: v for k, v in found["summary"].items() if k != "wallSeconds"} == same
    assert (found["index"], found["seed"], found["dominatedAt"]) == (4, 1, None)
    finished = sorted({e["workload"] for e in expected.events if e["event"] == "Finished"})
    assert found["finished"] == finished
    # AND under a backoff limit the workloads it deactivates are the event log's
    limited = {**doc, "requeuingStrategy": {"backoffLimitCount": 1}}
    gave_up = run_item(make_item(path, 1, "gang", limited, 5))
    settings = replace(parse_settings(limited), gpu_quota=scenario.gpu_quota)
    logged = simulate(replace(scenario, settings=settings, raw_settings=limited), "gang")
    deactivated = sorted({e["workload"] for e in logged.events if e["event"] == "Deactivated"})
    assert deactivated and gave_up["deactivated"] == deactivated
    assert gave_up["finished"] == sorted(
        {e["workload"] for e in logged.events if e["event"] == "Finished"}
    )
    # AND with a bound it stops once its waste passes it, and says where
    item["prune"] = {"objective": "wasted", "above": 0.5}
    stopped = run_item(item)
    assert stopped["summary"] is None and 0 < stopped["dominatedAt"] < 1
    assert stopped["objectiveSoFar"] > 0.5
    assert json.loads(json.dumps(stopped)) == stopped


def test_the_recommendation_names_settings_within_its_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [x for x in RANDOM.splitlines() if not x.startswith("settings")]
    path = _write(tmp_path, "random.yaml", "\n".join(lines))
    # GIVEN the defaults (5m), a setting a second away from them, and a far worse one
    grid = ["timeout=5m,301s,40m"]
    assert main(["tune", str(path), "--grid", *grid, "--jobs", "1", "--no-picture"]) == 0
    printed = capsys.readouterr().out
    # THEN the recommendation says the seeds do not tell it from the one a second away
    assert "recommended: timeout=5m [today, defaults]" in printed
    line = next(x for x in printed.splitlines() if x.startswith("within the spread"))
    assert "timeout=301s" in line and "40m" not in line
    tuning = run_grid([load_scenario(path, seed=s) for s in (0, 1, 2)], parse_grid(grid))
    ranked = rank(tuning.runs, OBJECTIVES["wasted"])
    close = within_spread(ranked[0], ranked, OBJECTIVES["wasted"])
    assert [r.label for r in close] == ["timeout=301s"]
    assert ranked[-1].label == "timeout=40m" and ranked[-1] not in close
    # AND on one seed nothing is said
    one = ["tune", str(path), "--grid", *grid, "--seeds", "1", "--jobs", "1", "--no-picture"]
    assert main(one) == 0
    assert "within the spread" not in capsys.readouterr().out
