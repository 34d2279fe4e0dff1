"""`muster tune --on aws` against moto: the run's files and items in S3, the tuner
function's handler on each item, the execution followed, the results collected and
ranked by the local tuning's code.

moto runs no distributed map (its ListMapRuns is always empty and an execution
stays RUNNING), so where the map would run, these tests call the function's handler
on every item of the uploaded items file, as the map's item reader and item
selector hand them, and mark the execution succeeded in moto's backend.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.stepfunctions.models import stepfunctions_backends
from muster.aws.tune_map import (
    ITEMS,
    OUT_TUNER_BUCKET_NAME,
    OUT_TUNER_STATE_MACHINE_ARN,
    RunFiles,
    Tuner,
    TunerError,
    collect,
    find_tuner,
    follow,
    run_on_aws,
    scenario_files,
    start_run,
    upload_items,
    upload_run,
)
from muster.cli import main
from muster.lambdas.tune import BadTunerItem, run_setting
from muster.sim.scenario import load_scenario
from muster.sim.tune_grid import assemble, parse_grid, plan_grid, run_grid
from muster.sim.tune_item import run_item
from muster.sim.tune_pool import bound_of, run_in_phases
from muster.sim.tune_ranking import OBJECTIVES, rank

REGION = "us-east-1"
STACK = "Muster"
BUCKET = "muster-tuner-test"

# Three jobs of a Philly trace (one broken by the seed's draw at this fraction),
# kept in a folder of its own: the run must carry the trace, not its path.
TRACE = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-02 00:00:00,600.0,8,4800.0,vcA
2017-10-02 00:05:00,900.0,8,7200.0,vcA
2017-10-02 00:10:00,300.0,16,4800.0,vcB
"""
SCENARIO = """
cluster: {{nodes: 2, gpusPerNode: 8}}
settings:
  timeout: 10m
  requeuingStrategy: {{backoffBaseSeconds: 10, backoffMaxSeconds: 60}}
until: 3h
trace: {{path: {trace}, mapping: pods-of-8, brokenFraction: 0.34}}
"""
GRID = ["timeout=1m,5m", "requeuingStrategy.backoffLimitCount=0,unset"]


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    traces = tmp_path / "elsewhere"
    traces.mkdir()
    (traces / "three-jobs.csv").write_text(TRACE)
    path = tmp_path / "tuned" / "three.yaml"
    path.parent.mkdir()
    path.write_text(SCENARIO.format(trace=traces / "three-jobs.csv"))
    return path


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    # Moto runs no distributed map: the execution must stay RUNNING while the test
    # plays the map. The local mode's moto server makes moto execute state machines
    # for the whole process (its config, and the backends its modules name), so an
    # earlier test may have left that on: the plain backends are put back here.
    import moto.stepfunctions.models as sfn_models
    import moto.stepfunctions.responses as sfn_responses

    monkeypatch.setattr(sfn_models, "stepfunctions_backends", stepfunctions_backends)
    monkeypatch.setattr(sfn_responses, "stepfunctions_backends", stepfunctions_backends)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}):
        session = boto3.session.Session(region_name=REGION)
        session.client("s3").create_bucket(Bucket=BUCKET)
        yield session


def _deploy_tuner(session: Any, *, with_tuner: bool = True) -> Tuner:
    """A state machine in moto and a stack whose outputs name it and the bucket."""
    sfn = session.client("stepfunctions")
    arn = sfn.create_state_machine(
        name="Muster-Tuner",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/tuner",
    )["stateMachineArn"]
    outputs = {
        OUT_TUNER_BUCKET_NAME: {"Value": BUCKET},
        OUT_TUNER_STATE_MACHINE_ARN: {"Value": arn},
    }
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": outputs if with_tuner else {"Other": {"Value": "x"}},
    }
    session.client("cloudformation").create_stack(
        StackName=STACK, TemplateBody=json.dumps(template)
    )
    return Tuner(BUCKET, arn)


def _play_the_map(session: Any, run_prefix: str, workdir: Path) -> int:
    """What the distributed map does, for the execution still running: every item of
    its items file, with the execution's input beside it (the item selector), to
    the function's handler; then the execution succeeds."""
    s3 = session.client("s3")
    sfn = session.client("stepfunctions")
    executions = sfn.list_executions(
        stateMachineArn=sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]
    )["executions"]
    [execution] = [e for e in executions if e["status"] == "RUNNING"]
    given = json.loads(sfn.describe_execution(executionArn=execution["executionArn"])["input"])
    assert given["prefix"] == run_prefix
    items = json.loads(s3.get_object(Bucket=BUCKET, Key=given["items"])["Body"].read())
    for item in items:
        event = {k: given[k] for k in ("prefix", "scenario", "files")} | {"item": item}
        summary = run_setting(event, s3, BUCKET, run_item, workdir=workdir)
        assert summary["result"].startswith(f"{run_prefix}/results/")
    backend = stepfunctions_backends[DEFAULT_ACCOUNT_ID][REGION]
    backend.describe_execution(execution["executionArn"]).status = "SUCCEEDED"
    return len(items)


def _map_player(session: Any, workdir: Path) -> tuple[list[int], Any]:
    """A `sleep` for the client that plays the map while it waits, and the number
    of items each execution it played had."""
    ran: list[int] = []

    def sleep(_seconds: float) -> None:
        key = session.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="runs/")["Contents"][0]
        ran.append(_play_the_map(session, "/".join(key["Key"].split("/")[:2]), workdir))

    return ran, sleep


def _ranking(tuning: Any) -> list[tuple[str, float, bool]]:
    return [(r.label, r.wasted, r.guarded) for r in rank(tuning.runs, OBJECTIVES["wasted"])]


def _summaries(tuning: Any) -> list[dict[str, Any]]:
    """Every run's summary on every seed, less its wall time."""
    runs = [*tuning.runs, tuning.none]
    return [
        {k: v for k, v in t.summary.items() if k != "wallSeconds"} for r in runs for t in r.trials
    ]


def test_the_function_runs_the_uploaded_items_to_the_local_tunings_ranking(
    aws: Any, scenario_file: Path, tmp_path: Path
) -> None:
    # GIVEN a tuning on two seeds planned as items, and the scenario and its trace
    scenario = load_scenario(scenario_file)
    seeds = [scenario, load_scenario(scenario_file, seed=scenario.seed + 1)]
    grid = parse_grid(GRID)
    plan = plan_grid(seeds, grid, source=scenario_file)
    s3 = aws.client("s3")
    assert scenario.trace is not None
    # WHEN they are uploaded and the function runs every item from the bucket
    run = upload_run(s3, BUCKET, scenario_files(scenario_file, scenario.trace.path), plan.tasks)
    assert run.files == ("scenario/three.yaml", "scenario/three-jobs.csv")
    items = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{run.prefix}/{ITEMS}")["Body"].read())
    assert len(items) == len(plan.tasks) == 2 * (1 + 4 + 2)  # none, the grid, today's, the defaults
    assert {i["scenario"]["path"] for i in items} == {"scenario/three.yaml"}
    for item in items:
        event = {"prefix": run.prefix, "scenario": run.scenario, "files": list(run.files)}
        run_setting(event | {"item": item}, s3, BUCKET, run_item, workdir=tmp_path / "lambda")
    # THEN the results collected from the bucket rank as the local pool's do
    remote = assemble(plan, collect(s3, BUCKET, run, plan.tasks))
    local = run_grid(seeds, grid, jobs=1, source=scenario_file)
    assert _ranking(remote) == _ranking(local)
    assert _summaries(remote) == _summaries(local)
    # AND the trace travelled with the run: the function read it beside the scenario
    assert (
        tmp_path / "lambda" / run.prefix.replace("/", "-") / "scenario/three-jobs.csv"
    ).is_file()


def _finished_ranking(
    tuning: Any, objective: str, leaving: frozenset[int] = frozenset()
) -> list[Any]:
    """The ranking of the settings that finished (less those in `leaving`): label,
    mark and every seed's figures."""
    return [
        (r.label + r.mark, _summaries_of(r))
        for r in rank(tuning.runs, OBJECTIVES[objective])
        if r.index not in leaving
    ]


def _summaries_of(run: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in t.summary.items() if k != "wallSeconds"} for t in run.trials]


@pytest.mark.parametrize("objective", ["wasted", "evictions"])
def test_pruned_items_run_in_two_batches_to_the_local_pruned_answer(
    aws: Any, scenario_file: Path, tmp_path: Path, objective: str
) -> None:
    # GIVEN a tuning on two seeds planned as items, pruned on the objective
    scenario = load_scenario(scenario_file)
    seeds = [scenario, load_scenario(scenario_file, seed=scenario.seed + 1)]
    grid = parse_grid(GRID)
    plan = plan_grid(seeds, grid, source=scenario_file, prune=objective)
    s3 = aws.client("s3")
    assert scenario.trace is not None
    files = scenario_files(scenario_file, scenario.trace.path)
    batches: list[list[dict[str, Any]]] = []
    runs: list[RunFiles] = []

    def run_batch(tasks: Any) -> dict[tuple[int, int], dict[str, Any]]:
        """One execution of the map: the batch's items file, the function on each item."""
        run = (
            upload_items(s3, BUCKET, runs[-1], tasks)
            if runs
            else upload_run(s3, BUCKET, files, tasks)
        )
        runs.append(run)
        items = json.loads(
            s3.get_object(Bucket=BUCKET, Key=run.execution_input()["items"])["Body"].read()
        )
        batches.append(items)
        for item in items:
            event = {"prefix": run.prefix, "scenario": run.scenario, "files": list(run.files)}
            run_setting(event | {"item": item}, s3, BUCKET, run_item, workdir=tmp_path / "lambda")
        return collect(s3, BUCKET, run, tasks)

    # WHEN the function runs them as two batches
    results = run_in_phases(plan.tasks, run_batch, seeds=2)
    remote = assemble(plan, results)
    # THEN the first batch is plain Kubernetes and the baselines, to the end; the
    # second the grid, each item with the bound the first set, in a file of its own
    first, second = batches
    assert len(first) == 2 * 3 and all("prune" not in i for i in first)
    above = bound_of({k: v for k, v in results.items() if k[1] in {-1, 4, 5}}, objective, 2)
    assert 0 < above < float("inf")
    assert len(second) == 2 * 4 and {i["prune"]["above"] for i in second} == {above}
    assert runs[1].execution_input()["items"] == f"{runs[0].prefix}/phase-2/{ITEMS}"
    # AND some setting stopped as a local pruned run reports it (no summary, how far)
    assert remote.dominated, "nothing was pruned: the test proves nothing"
    for d in remote.dominated:
        stopped = [results[(at, d.index)] for at in range(2)]
        assert any(o["summary"] is None and 0 <= o["dominatedAt"] < 1 for o in stopped)
        assert all(o["summary"] is not None or o["objectiveSoFar"] > above for o in stopped)
    # AND the settings that finished rank as without pruning, with the same figures,
    # as in the local pruned run; the recommendation is the same
    full = run_grid(seeds, grid, jobs=1, source=scenario_file)
    local = run_grid(seeds, grid, jobs=1, source=scenario_file, prune=objective)
    stopped_here = frozenset(d.index for d in remote.dominated)
    assert _finished_ranking(remote, objective) == _finished_ranking(full, objective, stopped_here)
    stopped_there = frozenset(d.index for d in local.dominated)
    assert _finished_ranking(remote, objective, stopped_there) == _finished_ranking(
        local, objective, stopped_here
    )
    best = [
        next(r.index for r in rank(t.runs, OBJECTIVES[objective]) if r.guarded)
        for t in (remote, local, full)
    ]
    assert best[0] == best[1] == best[2]
    key = OBJECTIVES[objective].key
    winner = next(r for r in full.runs if r.index == best[0])
    assert all(key(r) > key(winner) for r in full.runs if r.index in stopped_here)


def test_run_on_aws_follows_the_execution_and_collects_every_result(
    aws: Any, scenario_file: Path, tmp_path: Path
) -> None:
    # GIVEN a deployed tuner
    _deploy_tuner(aws)
    scenario = load_scenario(scenario_file)
    grid = parse_grid(GRID)
    plan = plan_grid([scenario], grid, source=scenario_file)
    seen: list[tuple[int, int]] = []
    ran: list[int] = []

    def sleep(_seconds: float) -> None:  # the map runs while the client waits
        prefix = aws.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="runs/")["Contents"][0]
        ran.append(_play_the_map(aws, "/".join(prefix["Key"].split("/")[:2]), tmp_path / "l"))

    # WHEN the tuning runs on it
    assert scenario.trace is not None
    results = run_on_aws(
        plan.tasks,
        scenario_file,
        scenario.trace.path,
        stack=STACK,
        session=aws,
        progress=lambda done, total: seen.append((done, total)),
        sleep=sleep,
    )
    # THEN the bar went from no item to every item (moto has no map run: the
    # results written count), and the ranking is the local run's
    total = len(plan.tasks)
    assert ran == [total]
    assert seen == [(0, total), (total, total)]
    local = run_grid([scenario], grid, jobs=1, source=scenario_file)
    assert _ranking(assemble(plan, results)) == _ranking(local)


def test_run_on_aws_in_phases_runs_one_execution_a_batch_and_one_bar_over_them(
    aws: Any, scenario_file: Path, tmp_path: Path
) -> None:
    # GIVEN a deployed tuner and a pruned tuning
    _deploy_tuner(aws)
    scenario = load_scenario(scenario_file)
    plan = plan_grid([scenario], parse_grid(GRID), source=scenario_file, prune="wasted")
    seen: list[tuple[int, int]] = []
    ran, sleep = _map_player(aws, tmp_path / "l")
    assert scenario.trace is not None
    # WHEN it runs on the tuner in phases
    results = run_on_aws(
        plan.tasks,
        scenario_file,
        scenario.trace.path,
        stack=STACK,
        session=aws,
        progress=lambda done, total: seen.append((done, total)),
        sleep=sleep,
        phases=lambda tasks, run_batch: run_in_phases(tasks, run_batch, seeds=1),
    )
    # THEN two executions ran, and the bar went over both from no item to every item
    total = len(plan.tasks)
    assert ran == [3, 4]
    assert seen == [(0, total), (3, total), (3, total), (total, total)]
    assert set(results) == {(0, int(item["index"])) for _, item in plan.tasks}
    assert any(out["summary"] is None for out in results.values())


def test_muster_tune_on_aws_prints_the_same_recommendation(
    aws: Any,
    scenario_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _deploy_tuner(aws)
    args = ["tune", str(scenario_file), "--grid", *GRID, "--seeds", "1", "--jobs", "1"]
    assert main([*args, "--no-prune"]) == 0
    local = capsys.readouterr().out

    ran, sleep = _map_player(aws, tmp_path / "l")
    monkeypatch.setattr("muster.aws.tune_map.time.sleep", sleep)
    assert main([*args, "--on", "aws", "--stack", STACK, "--no-prune"]) == 0
    remote = capsys.readouterr().out
    assert remote == local
    assert "recommended:" in remote
    assert len(ran) == 1, "--no-prune runs one execution"


def _without_how_far(printed: str) -> str:
    return re.sub(r"dominated at \d+% of the trace", "dominated at ..% of the trace", printed)


def test_muster_tune_on_aws_prunes_in_two_executions_to_the_local_pruned_answer(
    aws: Any,
    scenario_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a deployed tuner, and the local pruned tuning of a scenario on two seeds
    _deploy_tuner(aws)
    args = ["tune", str(scenario_file), "--grid", *GRID, "--seeds", "2", "--jobs", "1"]
    assert main(args) == 0
    local = capsys.readouterr().out
    assert "dominated at" in local, "nothing was pruned: the test proves nothing"
    # WHEN it runs on AWS, pruned (the default)
    ran, sleep = _map_player(aws, tmp_path / "l")
    monkeypatch.setattr("muster.aws.tune_map.time.sleep", sleep)
    assert main([*args, "--on", "aws", "--stack", STACK]) == 0
    remote = capsys.readouterr().out
    # THEN it ran two executions: plain Kubernetes and the two baselines on each
    # seed, then the grid's four settings with the bound they set
    assert ran == [2 * 3, 2 * 4]
    # AND it prints what the local pruned run prints: the same ranking, the same
    # settings dominated (each stopped where its own bound stopped it), the same
    # recommendation
    assert _without_how_far(remote) == _without_how_far(local)
    assert "recommended:" in remote
    sfn = aws.client("stepfunctions")
    arn = sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]
    names = sorted(e["name"] for e in sfn.list_executions(stateMachineArn=arn)["executions"])
    assert names[1] == names[0] + "-phase-2"


def test_a_stack_without_the_tuner_says_how_to_deploy_it(aws: Any) -> None:
    _deploy_tuner(aws, with_tuner=False)
    with pytest.raises(TunerError, match="muster:tuner=true"):
        find_tuner(aws.client("cloudformation"), STACK)
    with pytest.raises(TunerError, match="stack Nowhere"):
        find_tuner(aws.client("cloudformation"), "Nowhere")


def test_a_failed_execution_and_missing_results_are_errors_naming_where_to_look(
    aws: Any, scenario_file: Path
) -> None:
    tuner = _deploy_tuner(aws)
    s3, sfn = aws.client("s3"), aws.client("stepfunctions")
    scenario = load_scenario(scenario_file)
    plan = plan_grid([scenario], parse_grid(GRID), source=scenario_file)
    assert scenario.trace is not None
    run = upload_run(s3, BUCKET, scenario_files(scenario_file, scenario.trace.path), plan.tasks)
    execution = start_run(sfn, tuner, run)
    sfn.stop_execution(executionArn=execution, error="Tuner.Failed", cause="an item failed")
    with pytest.raises(TunerError, match=r"ended ABORTED.*/map/"):
        follow(sfn, s3, tuner, execution, run, sleep=lambda _s: None)
    with pytest.raises(TunerError, match=rf"{len(plan.tasks)} of {len(plan.tasks)} results"):
        collect(s3, BUCKET, run, plan.tasks)


@pytest.mark.parametrize(
    "event",
    [
        {"prefix": "../etc", "scenario": "scenario/a.yaml", "files": ["scenario/a.yaml"]},
        {"prefix": "runs/x", "scenario": "scenario/a.yaml", "files": ["../a.yaml"]},
        {"prefix": "runs/x", "scenario": "scenario/b.yaml", "files": ["scenario/a.yaml"]},
        {"prefix": "runs/x", "scenario": "scenario/a.yaml", "files": ["scenario/a.yaml"]},
    ],
)
def test_the_function_refuses_what_is_not_a_tuner_item(
    aws: Any, event: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(BadTunerItem):
        run_setting(
            event | {"item": {"index": 0}}, aws.client("s3"), BUCKET, run_item, workdir=tmp_path
        )


def test_the_execution_input_names_the_items_file() -> None:
    run = RunFiles("runs/r1", "scenario/a.yaml", ("scenario/a.yaml",), 3)
    assert run.execution_input() == {
        "prefix": "runs/r1",
        "scenario": "scenario/a.yaml",
        "files": ["scenario/a.yaml"],
        "items": "runs/r1/items.json",
    }
