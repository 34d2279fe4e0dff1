"""A running Muster's history as a trace: rows from history entries, read back by the simulator."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from muster.sim.history_trace import TraceRow, format_time, parse_time, trace_rows, write_trace
from muster.sim.specs import ScenarioError

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
        "outcome,attempts,evictions"
    )
    assert lines[2] == f"team/bad,q,{format_time(T0 + 10)},2,2,0,,,Deactivated,2,2"
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
