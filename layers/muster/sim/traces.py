"""Job traces: the Philly CSV format, Muster's own history, a synthetic generator.

All produce `TraceJob`s (submit time, GPUs, duration, queue; a Muster trace from
`muster history export` also gives the gang, the observed startup and whether the
workload ever became Ready); `expand_trace`
turns them into workloads with a mapping of GPUs to pods, draws startup times,
marks a seeded `brokenFraction` as never ready and draws node faults from
`nodeMtbfHours`. Every draw comes from its own seeded stream (`seeded`), so the
same scenario and seed always give the same workloads. docs/simulator.md states
the distributions and where their numbers come from.
"""

from __future__ import annotations

import bisect
import csv
import math
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from muster.core import fields
from muster.core.diagnosis import IMAGE_REASONS
from muster.core.fields import check_keys, collecting, problem, whole_number
from muster.sim.history_trace import TRACE_COLUMNS, is_muster_trace, parse_time
from muster.sim.specs import NodeFaultSpec, ScenarioError, TraceSpec, WorkloadSpec, seeded

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


@dataclass(frozen=True, slots=True)
class TraceJob:
    submit_at: float  # seconds after the first job of the trace
    gpus: int
    duration: float
    queue: str
    # Known from a Muster trace (observed), drawn or mapped for the others:
    pods: int | None = None
    startup: float | None = None
    never_ready: bool = False
    priority: int = 0
    failure: str | None = None  # how a never-ready job failed (FAILURES), when known


# ---------------------------------------------------------------------- Philly


# A trace with a systematic mistake has one per row: name the first ones only.
MAX_ROW_ERRORS = 20


def _philly_row(row: Mapping[str, Any]) -> tuple[list[str], tuple[float, float, int]]:
    """One CSV row's (submit time, duration, GPUs), or what is wrong with each field."""
    problems: list[str] = []
    stamp = _field(
        row,
        "timestamp",
        lambda t: datetime.strptime(t, "%Y-%m-%d %H:%M:%S").timestamp(),
        "YYYY-MM-DD HH:MM:SS",
        problems,
    )
    duration = _field(row, "duration", float, "seconds", problems)
    gpus = _field(row, "num_gpus", lambda v: int(float(v)), "a whole number", problems)
    return problems, (stamp or 0.0, duration or 0.0, gpus or 0)


def _raise_row_errors(path: Path, bad: list[str]) -> None:
    if not bad:
        return
    shown = bad[:MAX_ROW_ERRORS]
    more = len(bad) - len(shown)
    if more:
        shown.append(f"trace.path: {path}: and {more} more errors like these")
    raise ScenarioError(*shown)


def _field(
    row: Mapping[str, Any],
    name: str,
    parse: Any,
    expected: str,
    problems: list[str],
    *,
    optional: bool = False,
) -> Any:
    """One column of a trace row parsed, or None with what is wrong added to `problems`."""
    raw = row.get(name)
    if optional and not raw:
        return None
    try:
        return parse(raw)
    except (AttributeError, TypeError, ValueError, OverflowError):
        problems.append(f"{name}: expected {expected}, got {raw!r}")
        return None


def load_philly(path: Path, limit: int | None = None) -> list[TraceJob]:
    """Jobs of a Philly job-trace CSV (Jeon et al., USENIX ATC 2019), in submit order."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"trace.path: cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in PHILLY_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ScenarioError(
                f"trace.path: {path} lacks the column(s) {', '.join(missing)} "
                f"(a Philly trace has {', '.join(PHILLY_COLUMNS)})"
            )
        rows: list[tuple[float, int, float, str]] = []
        bad: list[str] = []
        for line, row in enumerate(reader, start=2):
            problems, parsed = _philly_row(row)
            if problems:
                bad += [f"trace.path: {path} line {line}: {p}" for p in problems]
                continue
            stamp, duration, gpus = parsed
            if gpus < 1 or duration < 0:
                continue  # CPU-only or malformed rows hold no GPUs: nothing to gang-schedule
            rows.append((stamp, gpus, duration, row["cluster"] or "default"))
            if limit is not None and len(rows) >= limit:
                break
    _raise_row_errors(path, bad)
    if not rows:
        raise ScenarioError(f"trace.path: {path} has no jobs with GPUs")
    rows.sort(key=lambda r: r[0])
    first = rows[0][0]
    return [TraceJob(s - first, g, d, q) for s, g, d, q in rows]


# ---------------------------------------------------------------------- Muster


def load_muster_trace(path: Path, limit: int | None = None) -> list[TraceJob]:
    """Jobs of a trace from `muster history export` (docs/simulator.md, "Muster traces").

    A workload that never became Ready and was deactivated is replayed as never
    Ready, and so is one still pending whose last eviction found its pods failing
    on their own; each fails as its diagnosis said (`replay_failure`). One with no
    observed run time otherwise (still pending, or deleted before it ran) is left
    out: there is nothing to replay.
    """
    required = ("submitted", "gangSize", "gpus", "runSeconds", "outcome")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise ScenarioError(
                f"trace.path: {path} lacks the column(s) {', '.join(missing)} "
                f"(a Muster trace has {', '.join(TRACE_COLUMNS)})"
            )
        rows: list[TraceJob] = []
        bad: list[str] = []
        for line, row in enumerate(reader, start=2):
            problems, job = _muster_row(row)
            if problems:
                bad += [f"trace.path: {path} line {line}: {p}" for p in problems]
                continue
            if job is None:
                continue
            rows.append(job)
            if limit is not None and len(rows) >= limit:
                break
    _raise_row_errors(path, bad)
    if not rows:
        raise ScenarioError(f"trace.path: {path} has no workload to replay")
    rows.sort(key=lambda j: j.submit_at)
    first = rows[0].submit_at
    return [replace(j, submit_at=round(j.submit_at - first, 3)) for j in rows]


def _muster_row(row: Mapping[str, Any]) -> tuple[list[str], TraceJob | None]:
    """One CSV row's job (None when there is nothing to replay), or what is wrong with
    each field."""
    problems: list[str] = []
    submitted = _field(row, "submitted", parse_time, "an ISO 8601 time", problems)
    gang = _field(row, "gangSize", int, "a whole number", problems)
    gpus = _field(row, "gpus", int, "a whole number", problems)
    startup = _field(row, "startupSeconds", float, "seconds", problems, optional=True)
    run = _field(row, "runSeconds", float, "seconds", problems, optional=True)
    priority = _field(row, "priority", int, "a whole number", problems, optional=True)
    if gang is not None and gang < 1:
        problems.append(f"gangSize: must be at least 1, got {gang}")
    if gpus is not None and gpus < 0:
        problems.append(f"gpus: must not be negative, got {gpus}")
    if problems:
        return problems, None
    failure = replay_failure(row.get("failureClass") or None, row.get("failureReason") or None)
    outcome = row["outcome"]
    never_ready = startup is None and (
        outcome == "Deactivated" or (outcome == "Pending" and failure is not None)
    )
    if run is None and not never_ready:
        return problems, None
    job = TraceJob(
        submitted,
        gpus,
        run or 0.0,
        row.get("queue") or "default",
        pods=gang,
        startup=startup,
        never_ready=never_ready,
        priority=priority or 0,
        failure=failure if never_ready else None,
    )
    return problems, job


# Reasons of a pod whose container never starts: replayed as a failed image pull
# (the simulator's failure that shows at once and stays); any other reason of a pod
# failing on its own is a container that starts and fails, replayed as a crash loop.
_NEVER_STARTS = IMAGE_REASONS | {
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}


def replay_failure(failure_class: str | None, reason: str | None) -> str | None:
    """The failure mode the simulator replays for a job whose last eviction's
    diagnosis was `failure_class` with `reason`: None (a plain never-Ready job,
    `NotReady`) unless its pods failed on their own."""
    if failure_class != "WorkloadFault":
        return None
    if reason in _NEVER_STARTS:
        return "ImagePullBackOff"
    return "CrashLoopBackOff"


# ---------------------------------------------------------------------- synthetic

# Fitted to Microsoft's Philly trace (Jeon et al., USENIX ATC 2019); see docs/simulator.md.
# Share of single-GPU jobs over the whole trace: 93.2% (6.8% use more than one GPU).
SINGLE_GPU_SHARE = 0.932
# How the multi-GPU jobs split by size (the week of 2017-10-02: 248, 93, 203, 4, 15 jobs).
MULTI_GPU_SIZES = ((2, 248), (4, 93), (8, 203), (16, 4), (32, 15))
# Duration percentiles in seconds (same week), single- and multi-GPU jobs apart:
# multi-GPU jobs run far longer (median 10 h against 32 min).
DURATION_PERCENTILES = {
    "single": (
        (0.0, 1),
        (0.1, 59),
        (0.25, 521),
        (0.5, 1894),
        (0.75, 2815),
        (0.9, 6102),
        (0.95, 11066),
        (0.99, 81213),
    ),
    "multi": (
        (0.0, 4),
        (0.1, 15),
        (0.25, 424),
        (0.5, 36382),
        (0.75, 158727),
        (0.9, 270634),
        (0.95, 401440),
        (0.99, 786523),
    ),
}
# Arrivals come in bursts (sweeps submitted together): 7.9 jobs per burst on average
# (arrivals at most 60 s apart), 8.3 s apart within a burst, and 98% of consecutive
# jobs in a burst ask for the same GPUs.
BURST_MEAN_JOBS = 7.9
BURST_GAP_SECONDS = 8.3
# Startup (bound until Ready: image pull and framework start), an assumption:
# lognormal with median 45 s and sigma 0.5 (p95 about 100 s), clipped to [5 s, 600 s].
STARTUP_MEDIAN_SECONDS = 45.0
STARTUP_SIGMA = 0.5
STARTUP_RANGE = (5.0, 600.0)

_SYNTHETIC_KEYS = {"jobs", "load", "maxRunSeconds", "queues", "burstMeanJobs"}


def synthetic_jobs(params: Mapping[str, Any], *, seed: int, total_gpus: int) -> list[TraceJob]:
    """Jobs whose sizes, durations and bursty arrivals follow the Philly figures above.

    `load` is the offered load: the jobs' GPU-seconds divided by (cluster GPUs x the
    span of their arrivals); arrivals are spread to hit it. `maxRunSeconds` truncates
    the very long tail (clusters enforce run limits; default one day).
    """
    with collecting(ScenarioError):
        path = "trace.synthetic."
        check_keys(params, _SYNTHETIC_KEYS, path, "field")
        jobs = whole_number(params, "jobs", 1, path, minimum=1, required=True)
        load = _positive(params, "load", 0.8)
        cap = fields.duration(params, "maxRunSeconds", 86400.0, path)
        if cap <= 0:
            problem(f"{path}maxRunSeconds: must be greater than 0s")
        burst = _positive(params, "burstMeanJobs", BURST_MEAN_JOBS)
        queues = whole_number(params, "queues", 1, path, minimum=1)

    rng = seeded(seed, "synthetic")
    sizes, weights = zip(*MULTI_GPU_SIZES, strict=True)
    # (burst start on a unit-rate clock, offset within the burst, gpus, duration, queue)
    raw: list[tuple[float, float, int, float, str]] = []
    clock = 0.0
    while len(raw) < jobs:
        clock += rng.expovariate(1.0)
        in_burst = 1 + int(rng.expovariate(1.0 / (burst - 1.0))) if burst > 1 else 1
        gpus = 1 if rng.random() < SINGLE_GPU_SHARE else rng.choices(sizes, weights)[0]
        queue = f"q{rng.randrange(queues)}" if queues > 1 else "default"
        offset = 0.0
        for _ in range(min(in_burst, jobs - len(raw))):
            duration = min(_duration(rng, "single" if gpus == 1 else "multi"), cap)
            raw.append((clock, offset, gpus, duration, queue))
            offset += rng.expovariate(1.0 / BURST_GAP_SECONDS)
    # Stretch the burst starts so that the offered load is `load`; the gaps within a
    # burst stay as measured.
    work = sum(g * d for _, _, g, d, _ in raw)
    scale = work / (load * total_gpus) / clock
    jobs_out = sorted(
        (TraceJob(round(start * scale + offset, 3), g, d, q) for start, offset, g, d, q in raw),
        key=lambda j: j.submit_at,
    )
    first = jobs_out[0].submit_at
    return [TraceJob(round(j.submit_at - first, 3), j.gpus, j.duration, j.queue) for j in jobs_out]


def _duration(rng: random.Random, kind: str) -> float:
    """Inverse-CDF draw, log-linear between the measured percentiles."""
    table = DURATION_PERCENTILES[kind]
    u = rng.random() * table[-1][0]
    qs = [q for q, _ in table]
    i = max(1, bisect.bisect_right(qs, u))
    (q0, v0), (q1, v1) = table[i - 1], table[i]
    frac = (u - q0) / (q1 - q0)
    return round(math.exp(math.log(v0) + frac * (math.log(v1) - math.log(v0))), 1)


def _positive(params: Mapping[str, Any], key: str, default: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        problem(f"trace.synthetic.{key}: expected a positive number, got {value!r}")
        return default
    return float(value)


# ---------------------------------------------------------------------- expansion


def draw_startup(rng: random.Random) -> float:
    low, high = STARTUP_RANGE
    value = STARTUP_MEDIAN_SECONDS * math.exp(rng.gauss(0.0, STARTUP_SIGMA))
    return round(min(max(value, low), high), 1)


def map_gpus(gpus: int, mapping: str) -> tuple[int, int]:
    """(pods, GPUs per pod) for a job of `gpus` GPUs."""
    if mapping == "pod-per-gpu":
        return gpus, 1
    return math.ceil(gpus / 8), min(gpus, 8)


def _failure(
    job: TraceJob, broken: bool, modes: list[tuple[str, float]], rng: random.Random
) -> str | None:
    """How a never-ready job fails: as its trace says, else drawn from `brokenModes`
    (only then is the stream drawn from, so it stays aligned without them)."""
    if job.failure is not None:
        return job.failure
    if modes and (broken or job.never_ready):
        return rng.choices([m for m, _ in modes], [w for _, w in modes])[0]
    return None


def expand_trace(
    spec: TraceSpec,
    *,
    seed: int,
    gpus_per_node: int,
    nodes: int,
    until: float,
    taken: Collection[str] = (),
) -> tuple[list[WorkloadSpec], list[NodeFaultSpec]]:
    """Workloads (named job-00001, ... in submit order) and node faults for a trace."""
    if spec.path is not None and is_muster_trace(spec.path):
        jobs = load_muster_trace(spec.path, spec.limit)
    elif spec.path is not None:
        jobs = load_philly(spec.path, spec.limit)
    else:
        assert spec.synthetic is not None
        jobs = synthetic_jobs(spec.synthetic, seed=seed, total_gpus=nodes * gpus_per_node)
        if spec.limit is not None:
            jobs = jobs[: spec.limit]
    width = max(5, len(str(len(jobs))))
    broken_rng = seeded(seed, "broken")
    broken = set(broken_rng.sample(range(len(jobs)), round(spec.broken_fraction * len(jobs))))
    startup_rng = seeded(seed, "startup")
    # Its own stream, drawn only for broken jobs: without `brokenModes` nothing is drawn.
    mode_rng = seeded(seed, "broken-modes")
    modes = sorted((spec.broken_modes or {}).items())
    workloads: list[WorkloadSpec] = []
    for i, job in enumerate(jobs):
        if job.pods is not None:  # a Muster trace: the gang as it was
            pods, per_pod = job.pods, max(1, math.ceil(job.gpus / job.pods))
        else:
            pods, per_pod = map_gpus(job.gpus, spec.mapping)
        startup = draw_startup(startup_rng)  # drawn for every job, so the stream stays aligned
        name = f"job-{i + 1:0{width}d}"
        if name in taken:
            raise ScenarioError(f"workloads: the name {name!r} is taken by a trace job")
        workloads.append(
            WorkloadSpec(
                name=name,
                queue=job.queue,
                submit_at=job.submit_at,
                pods=pods,
                gpus_per_pod=per_pod,
                startup_seconds=job.startup if job.startup is not None else startup,
                run_seconds=job.duration,
                priority=job.priority,
                never_ready=i in broken or job.never_ready,
                failure=_failure(job, i in broken, modes, mode_rng),
            )
        )
    faults: list[NodeFaultSpec] = []
    if spec.node_mtbf_hours is not None:
        fault_rng = seeded(seed, "faults")
        mean = spec.node_mtbf_hours * 3600.0
        for n in range(nodes):
            t = fault_rng.expovariate(1.0 / mean)
            while t < until:
                faults.append(NodeFaultSpec(round(t, 3), f"node-{n}", spec.repair_after))
                t += spec.repair_after + fault_rng.expovariate(1.0 / mean)
    return workloads, faults
