"""`muster trace cut`, and the examples' traces found where they were put."""

from __future__ import annotations

import io
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from muster.cli import main
from muster.sim.scenario import load_scenario
from muster.sim.specs import ScenarioError
from muster.sim.trace_cut import cut

from tests.sim.conftest import REPO, TRACES

PHILLY = (
    "timestamp,duration,num_gpus,gpu_time,cluster\r\n"
    "2017-10-03 00:00:00,60.0,1,60.0,b\r\n"
    "2017-10-01 23:59:59,60.0,1,60.0,a\r\n"
    "2017-10-02 12:00:00,60.0,8,480.0,a\r\n"
    "2017-10-02 00:00:00,60.0,2,120.0,c\r\n"
)


def test_a_cut_keeps_the_window_sorted_with_the_header() -> None:
    out = io.StringIO()
    kept = cut(
        io.StringIO(PHILLY),
        out,
        datetime(2017, 10, 2, tzinfo=UTC),
        datetime(2017, 10, 3, tzinfo=UTC),
    )
    assert kept == 2
    assert out.getvalue() == (
        "timestamp,duration,num_gpus,gpu_time,cluster\r\n"
        "2017-10-02 00:00:00,60.0,2,120.0,c\r\n"
        "2017-10-02 12:00:00,60.0,8,480.0,a\r\n"
    )


def test_a_muster_trace_is_cut_on_its_submission_time(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "workload,queue,submitted,gangSize,gpus,priority,startupSeconds,runSeconds,outcome,attempts,evictions\n"
        "a/x,q,2026-09-21T10:00:00Z,2,16,0,30,600,Succeeded,1,0\n"
        "a/y,q,2026-09-29T10:00:00Z,2,16,0,30,600,Succeeded,1,0\n"
    )
    out = tmp_path / "week.csv"
    assert main(["trace", "cut", str(trace), "--from", "2026-09-21", "-o", str(out)]) == 0
    assert [line.split(",")[0] for line in out.read_text().splitlines()] == ["workload", "a/x"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from", "Monday"], "--from: expected a date such as 2017-10-02"),
        (["--from", "2017-10-02", "--days", "0"], "--days: expected a positive number"),
        (["--from", "2017-10-02", "--to", "2017-10-01"], "--to: 2017-10-01 is not after"),
        (["--from", "2017-10-02", "--to", "2017-10-03", "--days", "1"], "not both"),
    ],
)
def test_bad_arguments_are_named(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "p.csv"
    trace.write_text(PHILLY)
    assert main(["trace", "cut", str(trace), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_row_and_a_foreign_file_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-02,1,1,1,a\n")
    assert main(["trace", "cut", str(bad), "--from", "2017-10-02"]) == 2
    assert "line 2: timestamp: not a time: '2017-10-02'" in capsys.readouterr().err
    other = tmp_path / "other.csv"
    other.write_text("when,what\n1,2\n")
    assert main(["trace", "cut", str(other), "--from", "2017-10-02"]) == 2
    assert "neither a Philly trace" in capsys.readouterr().err


def test_cutting_the_first_day_of_the_week_gives_the_day_trace(tmp_path: Path) -> None:
    week, day = TRACES / "philly-2017-10-02-week.csv", TRACES / "philly-2017-10-02-day.csv"
    if not (week.is_file() and day.is_file()):
        pytest.skip(f"job traces not found at {TRACES}")
    out = tmp_path / "day.csv"
    assert (
        main(["trace", "cut", str(week), "--from", "2017-10-02", "--days", "1", "-o", str(out)])
        == 0
    )
    assert out.read_bytes() == day.read_bytes()


# --------------------------------------------------------------------------- the examples


def tiny_week(folder: Path) -> None:
    """The examples' trace file name, holding the first jobs of a week only."""
    folder.mkdir()
    lines = PHILLY.splitlines(keepends=True)
    (folder / "philly-2017-10-02-week.csv").write_text("".join(lines))


@pytest.mark.parametrize("example", ["philly-week.yaml", "philly-week-contended.yaml"])
def test_the_examples_find_their_trace_in_muster_traces(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_week(tmp_path / "traces")
    monkeypatch.setenv("MUSTER_TRACES", str(tmp_path / "traces"))
    monkeypatch.chdir(tmp_path)
    scenario = load_scenario(REPO / "examples" / example)
    assert len(scenario.workloads) == 4
    assert main(["simulate", str(REPO / "examples" / example), "--no-picture"]) == 0


def test_an_example_without_its_trace_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSTER_TRACES", str(tmp_path / "empty"))
    examples = tmp_path / "examples"
    shutil.copytree(REPO / "examples", examples)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(examples / "philly-week.yaml")
    message = str(caught.value)
    assert "trace.path: philly-2017-10-02-week.csv not found" in message
    assert f"MUSTER_TRACES={tmp_path / 'empty'}" in message
    assert "muster trace cut" in message


def test_a_trace_beside_the_scenario_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSTER_TRACES", str(tmp_path / "nowhere"))
    examples = tmp_path / "examples"
    shutil.copytree(REPO / "examples", examples)
    (examples / "philly-2017-10-02-week.csv").write_text(PHILLY)
    assert len(load_scenario(examples / "philly-week.yaml").workloads) == 4
