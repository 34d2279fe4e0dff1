"""`muster tune --on aws`: a tuning's items run by the tuner's distributed map.

The stack's optional tuner (`muster:tuner`, infra/tuner.py) is a bucket, a
function that runs one item (`muster.lambdas.tune`) and a state machine whose
distributed map hands it every item of a run. A run lives in the bucket under
`runs/<id>/`:

    scenario/<name>.yaml       the scenario file, its trace named beside it
    scenario/<trace file>      the trace (when the scenario reads one)
    items.json                 the items, a JSON array: the map's item reader reads it
    phase-<n>/items.json       the items of the run's n-th execution (n from 2)
    results/<index>.<at>.json  each item's whole result, written by the function

and the map's result writer writes under `map/<map run>/` (manifest.json, each
item's summary and the items that failed), a prefix fixed in the state machine.

The command uploads the run, starts an execution, follows it (the map run's item
counts, or the results written so far) and reads every result back; ranking them
is the local tuning's own code (`muster.sim.tune_grid.assemble`). A pruned
tuning runs as two executions of the map, one batch of items each: the runs
that go to the end first, then the others with the bound their results set
(`muster.sim.tune_pool.run_in_phases` decides the batches; the run's id names
both executions, the second `<id>-phase-2`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The names the stack and the tuner share, here rather than in `muster.contract`:
# the control plane's layer ships the contract, and stays the same with or without
# the tuner. infra/constants.py takes them from here (this module imports nothing
# beyond the standard library until it is called).
OUT_TUNER_BUCKET_NAME = "TunerBucketName"
OUT_TUNER_STATE_MACHINE_ARN = "TunerStateMachineArn"
ENV_TUNER_BUCKET = "MUSTER_TUNER_BUCKET"  # the tuner function's environment

RUNS = "runs"
ITEMS = "items.json"
MAP_RESULTS = "map"
POLL_SECONDS = 5.0


class TunerError(RuntimeError):
    """The tuner cannot be used, or a run on it did not give every result."""


def result_key(prefix: str, index: int, at: int) -> str:
    """Where the function writes the result of item `index` on the seed at `at`."""
    return f"{prefix}/results/{index}.{at}.json"


@dataclass(frozen=True, slots=True)
class Tuner:
    """A deployed tuner: its bucket and the state machine of its map."""

    bucket: str
    state_machine_arn: str


Task = tuple[int, Mapping[str, Any]]  # (seed's place, item)
Results = dict[tuple[int, int], dict[str, Any]]  # (seed's place, index) -> result


@dataclass(frozen=True, slots=True)
class RunFiles:
    """A run uploaded to the tuner's bucket, as the state machine's input names it:
    one batch of its items (`phase`), run by one execution."""

    prefix: str
    scenario: str  # the scenario file's name under the prefix
    files: tuple[str, ...]  # every file of the scenario (the file, its trace)
    items: int
    phase: int = 1
    earlier: int = 0  # the results that the run's earlier phases wrote

    @property
    def items_file(self) -> str:
        return ITEMS if self.phase == 1 else f"phase-{self.phase}/{ITEMS}"

    @property
    def execution_name(self) -> str:
        run_id = self.prefix.rsplit("/", 1)[-1]
        return run_id if self.phase == 1 else f"{run_id}-phase-{self.phase}"

    def execution_input(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "scenario": self.scenario,
            "files": list(self.files),
            "items": f"{self.prefix}/{self.items_file}",
        }


def find_tuner(cloudformation: Any, stack: str) -> Tuner:
    """The tuner of the stack, from its outputs; an error says how to deploy one."""
    try:
        [found] = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except Exception as exc:  # botocore's ClientError: no such stack, no access
        raise TunerError(f"stack {stack}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
    bucket = outputs.get(OUT_TUNER_BUCKET_NAME)
    machine = outputs.get(OUT_TUNER_STATE_MACHINE_ARN)
    if not bucket or not machine:
        raise TunerError(
            f"stack {stack} has no tuner: deploy it with -c muster:tuner=true "
            '(docs/install.md, "Context keys")'
        )
    return Tuner(bucket, machine)


def scenario_files(path: str | Path, trace: Path | None) -> dict[str, bytes]:
    """The scenario file and its trace as the function reads them: the trace beside
    the file, named by its file name alone."""
    import yaml

    source = Path(path)
    text = source.read_bytes()
    files: dict[str, bytes] = {}
    if trace is not None:
        doc = yaml.safe_load(text)
        doc["trace"]["path"] = trace.name
        text = yaml.safe_dump(doc, sort_keys=False).encode()
        files[f"scenario/{trace.name}"] = trace.read_bytes()
    name = f"scenario/{source.stem}.yaml"
    if name in files:
        raise TunerError(f"{source}: the scenario and its trace have the same name")
    return {name: text, **files}


def upload_run(
    s3: Any,
    bucket: str,
    files: Mapping[str, bytes],
    tasks: Sequence[Task],
    run_id: str | None = None,
) -> RunFiles:
    """The scenario's files (the scenario file first, as `scenario_files` gives them)
    and the items, each with its seed's place (`at`)."""
    if not files:
        raise TunerError("a run needs its scenario file")
    prefix = f"{RUNS}/{run_id or new_run_id()}"
    for key, body in files.items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)
    run = RunFiles(prefix, next(iter(files)), tuple(files), 0, phase=0)
    return upload_items(s3, bucket, run, tasks)


def upload_items(s3: Any, bucket: str, run: RunFiles, tasks: Sequence[Task]) -> RunFiles:
    """The run's next batch of items (the run's files are there already)."""
    # Each item names the scenario by its key under the run (not the path on this machine).
    items = [
        dict(item, at=at, scenario={**item["scenario"], "path": run.scenario}) for at, item in tasks
    ]
    batch = RunFiles(
        run.prefix,
        run.scenario,
        run.files,
        len(items),
        phase=run.phase + 1,
        earlier=run.earlier + run.items,
    )
    s3.put_object(
        Bucket=bucket,
        Key=f"{run.prefix}/{batch.items_file}",
        Body=json.dumps(items).encode(),
        ContentType="application/json",
    )
    return batch


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def start_run(sfn: Any, tuner: Tuner, run: RunFiles) -> str:
    """Start the map over the run's items; the execution's ARN."""
    started = sfn.start_execution(
        stateMachineArn=tuner.state_machine_arn,
        name=run.execution_name,
        input=json.dumps(run.execution_input()),
    )
    return str(started["executionArn"])


def items_done(sfn: Any, s3: Any, bucket: str, execution_arn: str, run: RunFiles) -> int:
    """Items finished so far: the map run's counts, or else the results written
    (less the earlier phases')."""
    runs = sfn.list_map_runs(executionArn=execution_arn).get("mapRuns", [])
    if runs:
        counts = sfn.describe_map_run(mapRunArn=runs[0]["mapRunArn"])["itemCounts"]
        return sum(int(counts.get(k, 0)) for k in ("succeeded", "failed", "timedOut", "aborted"))
    done = 0
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{run.prefix}/results/"
    ):
        done += page.get("KeyCount", 0)
    return max(0, done - run.earlier)


def follow(
    sfn: Any,
    s3: Any,
    tuner: Tuner,
    execution_arn: str,
    run: RunFiles,
    *,
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] | None = None,
    interval: float = POLL_SECONDS,
) -> None:
    """Wait for the execution, reporting items done; an error unless it succeeded."""
    pause = sleep or time.sleep
    while True:
        done = items_done(sfn, s3, tuner.bucket, execution_arn, run)
        if progress is not None:
            progress(min(done, run.items), run.items)
        described = sfn.describe_execution(executionArn=execution_arn)
        status = described["status"]
        if status == "SUCCEEDED":
            return
        if status != "RUNNING":
            why = ": ".join(filter(None, (described.get("error"), described.get("cause"))))
            raise TunerError(
                f"the tuner's execution {execution_arn} ended {status}"
                + (f" ({why})" if why else "")
                + f"; the items' failures are under s3://{tuner.bucket}/{MAP_RESULTS}/"
            )
        pause(interval)


def collect(s3: Any, bucket: str, run: RunFiles, tasks: Sequence[Task]) -> Results:
    """Every item's result by (seed's place, index); an error names the ones missing."""
    results: Results = {}
    missing = []
    for at, item in tasks:
        index = int(item["index"])
        key = result_key(run.prefix, index, at)
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            missing.append(key)
            continue
        results[(at, index)] = json.loads(body)
    if missing:
        raise TunerError(
            f"{len(missing)} of {len(tasks)} results are missing (first: s3://{bucket}/"
            f"{missing[0]}); the items' failures are under "
            f"s3://{bucket}/{MAP_RESULTS}/ (the map run's folder)"
        )
    return results


def run_on_aws(
    tasks: Sequence[Task],
    path: str | Path,
    trace: Path | None,
    *,
    stack: str,
    session: Any,
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] | None = None,
    interval: float = POLL_SECONDS,
    phases: Callable[[Sequence[Task], Callable[[Sequence[Task]], Results]], Results] | None = None,
) -> Results:
    """Upload the scenario (and `trace`, the file it reads) and the items, run them
    on the stack's tuner, and return every result by (seed's place, index).

    `phases(tasks, run_batch)` decides the batches: it calls `run_batch` with each
    (an execution of the map each, one after the other) and returns every result;
    without it, one execution runs every item. The progress is over every task."""
    from muster.botocore_config import BOTOCORE_RETRIES

    tuner = find_tuner(session.client("cloudformation", config=BOTOCORE_RETRIES), stack)
    s3 = session.client("s3", config=BOTOCORE_RETRIES)
    sfn = session.client("stepfunctions", config=BOTOCORE_RETRIES)
    files = scenario_files(path, trace)
    total = len(tasks)
    last: list[RunFiles] = []

    def run_batch(batch: Sequence[Task]) -> Results:
        if last:
            run = upload_items(s3, tuner.bucket, last[-1], batch)
        else:
            run = upload_run(s3, tuner.bucket, files, batch)
        last.append(run)

        def report(done: int, _items: int) -> None:
            if progress is not None:
                progress(run.earlier + done, total)

        execution = start_run(sfn, tuner, run)
        follow(sfn, s3, tuner, execution, run, progress=report, sleep=sleep, interval=interval)
        return collect(s3, tuner.bucket, run, batch)

    return phases(tasks, run_batch) if phases is not None else run_batch(tasks)
