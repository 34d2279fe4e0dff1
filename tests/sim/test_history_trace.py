"""A running Muster's history as a trace: rows from history entries, read back by the simulator."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from muster.core import Publish
from muster.sim.engine import simulate
from muster.sim.history_trace import TraceRow, format_time, parse_time, trace_rows, write_trace
from muster.sim.runlog import RunLog
from muster.sim.specs import ScenarioError
from muster.sim.tune_grid import parse_grid, run_grid

from tests.sim.conftest import scenario

T0 = 1_790_000_000.0


def entry(event: str, at: float, version: int = 0, **detail: object) -> dict[str, object]:
    return {"event": event, "at": T0 + at, "version": version, "detail": detail}


HISTORIES = {
    # ready on its second attempt, then finished
    "team/good": [
        entry("Submitted", 0, queue="q", gangSize=4, gpus=32, priority=1),
        entry("Admitted", 5, attempt=1),
        entry("Evicted", 305, reason="PodsReadyTimeout", cause="WaitForStart"),
        entry("Requeued", 305, count=1),
        entry("BackoffFinished", 365, count=1),
        entry("Admitted", 370, attempt=2),
        entry("PodsReady", 400, reason="Started", secondsSinceAdmission=30),
        entry("WaitForRecovery", 500),
        entry("PodsReady", 510, reason="Recovered"),
        entry("Finished", 4000, reason="Succeeded"),
    ],
    # never ready, deactivated (entries handed over out of order; the last eviction and
    # the deactivation share an instant, their versions order them)
    "team/bad": [
        entry("Deactivated", 700, version=7, reason="RequeuingLimitExceeded", count=1),
        entry("Submitted", 10, queue="q", gangSize=2, gpus=2),
        entry("Admitted", 10, attempt=1),
        entry("Evicted", 310, reason="PodsReadyTimeout"),
        entry("Admitted", 400, attempt=2),
        entry("Evicted", 700, version=6, reason="PodsReadyTimeout"),
    ],
    # still running at the export
    "team/long": [
        entry("Submitted", 20, queue="other", gangSize=1, gpus=8),
        entry("Admitted", 20, attempt=1),
        entry("PodsReady", 80, reason="Started", secondsSinceAdmission=60),
    ],
    # submitted before the window: its Submitted entry is not in what was read
    "team/old": [entry("Finished", 50, reason="Succeeded")],
    # submitted before `since`
    "team/early": [entry("Submitted", -100, queue="q", gangSize=1, gpus=1)],
}


def test_each_workload_becomes_one_row_with_what_was_observed():
    rows = trace_rows(HISTORIES, since=T0 - 10, now=T0 + 5000)
    assert [r.workload for r in rows] == ["team/good", "team/bad", "team/long"]
    good, bad, long = rows
    assert good == TraceRow(
        "team/good", "q", T0, 4, 32, 1, startup_seconds=30.0, run_seconds=3600.0,
        outcome="Succeeded", attempts=2, evictions=1,
    )  # fmt: skip
    assert (bad.startup_seconds, bad.run_seconds, bad.outcome, bad.evictions) == (
        None,
        None,
        "Deactivated",
        2,
    )
    assert (long.outcome, long.startup_seconds, long.run_seconds) == ("Running", 60.0, 4920.0)


def test_the_csv_round_trips_times_and_empty_fields():
    buffer = io.StringIO()
    assert write_trace(trace_rows(HISTORIES, T0 - 10, T0 + 5000), buffer) == 3
    lines = buffer.getvalue().splitlines()
    assert lines[0] == (
        "workload,queue,submitted,gangSize,gpus,priority,startupSeconds,runSeconds,"
        "outcome,attempts,evictions,failureClass,failureReason"
    )
    assert lines[2] == f"team/bad,q,{format_time(T0 + 10)},2,2,0,,,Deactivated,2,2,,"
    assert parse_time(format_time(T0 + 0.25)) == T0 + 0.25


def test_the_simulator_replays_a_muster_trace(tmp_path: Path):
    # GIVEN an exported trace
    path = tmp_path / "trace.csv"
    with path.open("w") as handle:
        write_trace(trace_rows(HISTORIES, T0 - 10, T0 + 5000), handle)
    # WHEN a scenario reads it
    sc = scenario(
        {"cluster": {"nodes": 4, "gpusPerNode": 8}, "trace": {"path": str(path)}, "until": "2h"}
    )
    # THEN every workload keeps its gang, GPUs, observed startup and run time
    good, bad, long = sc.workloads
    assert (good.pods, good.gpus_per_pod, good.startup_seconds, good.run_seconds) == (
        4,
        8,
        30.0,
        3600.0,
    )
    assert (good.submit_at, good.priority, good.queue) == (0.0, 1, "q")
    # AND the deactivated one that was never Ready is replayed as never Ready
    assert (bad.submit_at, bad.pods, bad.gpus_per_pod, bad.never_ready) == (10.0, 2, 1, True)
    assert not good.never_ready and long.run_seconds == 4920.0


def test_a_muster_trace_with_a_bad_value_names_the_line(tmp_path: Path):
    path = tmp_path / "trace.csv"
    path.write_text(
        "workload,queue,submitted,gangSize,gpus,priority,startupSeconds,runSeconds,outcome\n"
        "a,q,2026-12-01T00:00:00Z,two,8,0,10,60,Succeeded\n"
    )
    with pytest.raises(ScenarioError, match="line 2: gangSize: expected a whole number, got 'two'"):
        scenario({"cluster": {"nodes": 1}, "trace": {"path": str(path)}})


def test_export_refuses_a_bad_since_before_calling_aws(capsys: pytest.CaptureFixture[str]):
    from muster.cli import main

    assert main(["history", "export", "--since", "last tuesday"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("muster history export: --since: expected a duration like 7d")


def test_since_takes_a_duration_or_a_time():
    from muster.cli.history import since_epoch

    assert since_epoch("7d", now=T0) == T0 - 7 * 86400
    assert since_epoch(format_time(T0), now=0) == T0


# A cluster's week in small: a healthy gang, and one whose image cannot be pulled,
# deactivated after its second eviction (Kueue's defaults beside a backoff limit).
CLUSTER = """
cluster: {nodes: 2, gpusPerNode: 8}
settings: {timeout: 5m, requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 10}}
until: 2h
workloads:
  - {name: good, pods: 2, gpusPerPod: 4, startupSeconds: 30, runSeconds: 900}
  - {name: no-image, submitAt: 5s, pods: 2, gpusPerPod: 4, failure: ImagePullBackOff}
"""


def histories_of(doc: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """The history entries a deployment would store for the scenario: every event the
    core publishes, with its detail as published (what the state table keeps)."""
    found: dict[str, list[dict[str, Any]]] = {}
    published = RunLog.published

    def keep(self: RunLog, effect: Publish, now: float) -> None:
        entry = {"event": effect.event.value, "at": now, "detail": dict(effect.detail)}
        found.setdefault(effect.workload, []).append(entry)
        published(self, effect, now)

    monkeypatch.setattr(RunLog, "published", keep)
    simulate(scenario(doc), "gang")
    monkeypatch.setattr(RunLog, "published", published)
    return found


def test_an_image_pull_failure_is_exported_and_replayed_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the history of a job deactivated after its pods could not pull their image
    histories = histories_of(CLUSTER, monkeypatch)
    assert histories["no-image"][-1]["event"] == "Deactivated"
    # WHEN it is exported
    trace = tmp_path / "trace.csv"
    with trace.open("w") as handle:
        write_trace(trace_rows(histories, since=0, now=7200), handle)
    rows = {r["workload"]: r for r in csv.DictReader(trace.open())}
    # THEN its row says what the diagnosis knew
    bad = rows["no-image"]
    assert (bad["outcome"], bad["failureClass"], bad["failureReason"]) == (
        "Deactivated",
        "WorkloadFault",
        "ImagePullBackOff",
    )
    assert (rows["good"]["failureClass"], rows["good"]["outcome"]) == ("", "Succeeded")
    # AND the simulator replays it as an image pull failure, not a plain hang
    replay = tmp_path / "replay.yaml"
    replay.write_text(
        "cluster: {nodes: 2, gpusPerNode: 8}\n"
        "settings: {timeout: 5m, requeuingStrategy: {backoffLimitCount: 3}}\n"
        f"until: 2h\ntrace: {{path: {trace}}}\n"
    )
    from muster.sim.scenario import load_scenario

    replayed = load_scenario(replay)
    failing = [w for w in replayed.workloads if w.never_ready]
    assert [(w.pods, w.failure_mode) for w in failing] == [(2, "ImagePullBackOff")]
    # AND two workloadFaults settings give two different rows: evicted a minute after
    # the failure shows and retried no more, it wastes less than a full timeout each time
    tuning = run_grid(replayed, parse_grid(["workloadFaults.evictAfter=unset,1m"]))
    off, on = (r for r in tuning.runs if r.in_grid)
    assert on.wasted < off.wasted
    # AND a limit on such evictions stops the retries: fewer evictions
    tuning = run_grid(replayed, parse_grid(["workloadFaults.limitCount=unset,0"]))
    off, on = (r for r in tuning.runs if r.in_grid)
    assert on.evictions < off.evictions
    assert on.summary["deactivatedByReason"] == {"WorkloadFaults": 1}


def test_a_pending_job_failing_on_its_own_is_replayed_and_a_capacity_wait_is_not(
    tmp_path: Path,
) -> None:
    # GIVEN two jobs never Ready and still pending at the export: one whose pods crash,
    # one waiting for room on the cluster
    def evicted(at: float, cls: str, reason: str) -> dict[str, object]:
        pods = [{"pod": "p-0", "class": cls, "reason": reason}]
        return entry(
            "Evicted", at, reason="PodsReadyTimeout", diagnosis={"class": cls, "pods": pods}
        )

    histories = {
        "team/crash": [
            entry("Submitted", 0, queue="q", gangSize=1, gpus=8),
            entry("Admitted", 1, attempt=1),
            evicted(301, "WorkloadFault", "CrashLoopBackOff"),
        ],
        "team/wait": [
            entry("Submitted", 0, queue="q", gangSize=1, gpus=8),
            entry("Admitted", 1, attempt=1),
            evicted(301, "Capacity", "Unschedulable"),
        ],
    }
    trace = tmp_path / "trace.csv"
    with trace.open("w") as handle:
        write_trace(trace_rows(histories, since=T0 - 1, now=T0 + 400), handle)
    sc = scenario({"cluster": {"nodes": 1}, "trace": {"path": str(trace)}, "until": "1h"})
    # THEN the crash loop is replayed, failing as it did; the wait has nothing to replay
    assert [(w.never_ready, w.failure_mode) for w in sc.workloads] == [(True, "CrashLoopBackOff")]
