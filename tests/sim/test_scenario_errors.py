"""Bad scenario files: a clear message naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from muster.sim.scenario import load_builtin, load_scenario, parse_scenario_text
from muster.sim.specs import ScenarioError

BASE = "cluster: {nodes: 2, gpusPerNode: 8}\nworkloads: [{name: a, pods: 1}]\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workloads: [{name: a, pods: 1}]", "cluster: missing"),
        (
            "cluster: {nodes: 0}\nworkloads: [{name: a, pods: 1}]",
            "cluster.nodes: must be at least 1",
        ),
        (
            "cluster: {nodes: 2, gpuPerNode: 8}",
            "cluster.gpuPerNode: unknown field; did you mean 'gpusPerNode'?",
        ),
        (
            "cluster: {nodes: 2}\nworkloads: [{name: a, pods: two}]",
            "workloads[0].pods: expected a whole number, got 'two'",
        ),
        ("cluster: {nodes: 2}\nworkloads: [{name: a}]", "workloads[0].pods: missing"),
        (
            "cluster: {nodes: 2}\nworkloads: [{name: a, pods: 1, runSeconds: soon}]",
            "workloads[0].runSeconds:",
        ),
        (
            "cluster: {nodes: 2}\nworkloads: [{name: a, pods: 1}, {name: a, pods: 2}]",
            "workloads[1].name: 'a' is used twice",
        ),
        (
            "cluster: {nodes: 2}\nworkloads: [{name: a, pods: 1, gpusPerPod: 16}]",
            "a: gpusPerPod 16 exceeds cluster.gpusPerNode 8",
        ),
        (BASE + "settings: {timeout: -5s}", "settings.timeout:"),
        (
            BASE + "settings: {requeuingStrategy: {backoffLimitCont: 3}}",
            "settings.requeuingStrategy.backoffLimitCont: unknown setting",
        ),
        (
            BASE + "settings: {gpuQuota: 4}",
            "settings.gpuQuota: set the cluster quota as cluster.gpuQuota",
        ),
        (BASE + "faults: [{at: 10s, node: node-7}]", "faults[0].node: no node 'node-7'"),
        (BASE + "faults: [{node: node-1}]", "faults[0].at: missing"),
        (BASE + "until: forever", "until:"),
        (BASE + "trace: {mapping: pods-of-8}", "trace: give exactly one of 'path'"),
        (
            BASE + "trace: {synthetic: {jobs: 10}, mapping: pods-of-4}",
            "trace.mapping: expected one of pods-of-8, pod-per-gpu",
        ),
        (
            BASE + "trace: {synthetic: {jobs: 10}, brokenFraction: 2}",
            "trace.brokenFraction: expected a number from 0 to 1",
        ),
        (BASE + "trace: {synthetic: {jobs: 0}}", "trace.synthetic.jobs:"),
        (BASE + "trace: {synthetic: {jobs: 5, lod: 1}}", "trace.synthetic.lod: unknown field"),
        (BASE + "trace: {path: nowhere.csv}", "trace.path: nowhere.csv not found"),
        ("[1, 2]", "a scenario must be a mapping"),
        ("cluster: {nodes: [", "not valid YAML"),
    ],
)
def test_bad_scenarios_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_text(text, source="s.yaml")
    assert str(caught.value).startswith("s.yaml: ")
    assert message in str(caught.value)


def test_a_trace_without_philly_columns_is_rejected(tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    csv.write_text("when,gpus\n2017-10-02 00:00:00,1\n")
    sc = tmp_path / "s.yaml"
    sc.write_text("cluster: {nodes: 1}\ntrace: {path: jobs.csv}\n")
    with pytest.raises(
        ScenarioError, match=r"lacks the column\(s\) timestamp, duration, num_gpus, cluster"
    ):
        load_scenario(sc)


def test_missing_file_and_unknown_builtin(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read the scenario"):
        load_scenario(tmp_path / "absent.yaml")
    with pytest.raises(ScenarioError, match="did you mean 'deadlock'"):
        load_builtin("deadlok")


def test_every_mistake_of_a_scenario_is_reported_at_once() -> None:
    # GIVEN a file with mistakes in the cluster, two workloads, the settings and a fault
    text = (
        "cluster: {nodes: 0, gpuPerNode: 8}\n"
        "settings: {timeot: 5m, requeuingStrategy: {backoffJitter: 3}}\n"
        "workloads:\n"
        "  - {name: a, pods: two, runSeconds: soon}\n"
        "  - {name: b, pods: 1, neverReady: maybe}\n"
        "faults: [{node: node-0}]\n"
        "until: forever\n"
    )
    # WHEN it is read
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_text(text, source="s.yaml")
    # THEN one error lists them all, each with the file and the field
    fields = [e.removeprefix("s.yaml: ").split(":")[0] for e in caught.value.errors]
    assert fields == [
        "cluster.gpuPerNode",
        "cluster.nodes",
        "settings.timeot",
        "settings.requeuingStrategy.backoffJitter",
        "until",
        "workloads[0].pods",
        "workloads[0].runSeconds",
        "workloads[1].neverReady",
        "faults[0].at",
    ]
    assert all(e.startswith("s.yaml: ") for e in caught.value.errors)


def test_bad_trace_rows_name_the_line_and_the_field(tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    csv.write_text(
        "timestamp,duration,num_gpus,cluster\n"
        "2017-10-02 00:00:00,60,8,a\n"
        "yesterday,60,8,a\n"
        "2017-10-02 00:01:00,long,eight,a\n"
    )
    sc = tmp_path / "s.yaml"
    sc.write_text("cluster: {nodes: 1}\ntrace: {path: jobs.csv}\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(sc)
    tails = [e.split(" line ", 1)[1] for e in caught.value.errors]
    assert tails == [
        "3: timestamp: expected YYYY-MM-DD HH:MM:SS, got 'yesterday'",
        "4: duration: expected seconds, got 'long'",
        "4: num_gpus: expected a whole number, got 'eight'",
    ]


def test_a_trace_with_a_mistake_on_every_row_lists_the_first_ones(tmp_path: Path) -> None:
    from muster.sim.traces import MAX_ROW_ERRORS, load_philly

    csv = tmp_path / "jobs.csv"
    csv.write_text("timestamp,duration,num_gpus,cluster\n" + "x,1,1,a\n" * 50)
    with pytest.raises(ScenarioError) as caught:
        load_philly(csv)
    assert len(caught.value.errors) == MAX_ROW_ERRORS + 1
    assert caught.value.errors[-1].endswith(f"and {50 - MAX_ROW_ERRORS} more errors like these")


def test_bad_rows_of_a_muster_trace_name_the_field(tmp_path: Path) -> None:
    from muster.sim.history_trace import TRACE_COLUMNS
    from muster.sim.traces import load_muster_trace

    csv = tmp_path / "history.csv"
    header = ",".join(TRACE_COLUMNS)
    good = {c: "" for c in TRACE_COLUMNS} | {
        "submitted": "2026-09-21T14:13:20Z",
        "gangSize": "2",
        "gpus": "16",
        "runSeconds": "60",
        "outcome": "Finished",
    }
    bad = good | {"submitted": "soon", "gangSize": "0", "gpus": "many"}
    rows = [",".join(r[c] for c in TRACE_COLUMNS) for r in (good, bad)]
    csv.write_text("\n".join([header, *rows]) + "\n")
    with pytest.raises(ScenarioError) as caught:
        load_muster_trace(csv)
    assert [e.split(" line ", 1)[1] for e in caught.value.errors] == [
        "3: submitted: expected an ISO 8601 time, got 'soon'",
        "3: gpus: expected a whole number, got 'many'",
        "3: gangSize: must be at least 1, got 0",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "cluster: {nodes: 2}\nworkloads: [{name: a, pods: 1, failure: Segfault}]",
            "workloads[0].failure: expected one of CrashLoopBackOff, ImagePullBackOff, NotReady",
        ),
        (
            "cluster: {nodes: 2}\n"
            "workloads: [{name: a, pods: 1, failure: CrashLoopBackOff, neverReady: false}]",
            "workloads[0].failure: a workload that fails is never ready",
        ),
        (
            BASE + "trace: {synthetic: {jobs: 5}, brokenModes: {Hang: 1}}",
            "trace.brokenModes.Hang: not a failure mode",
        ),
        (
            BASE + "trace: {synthetic: {jobs: 5}, brokenModes: {NotReady: -1}}",
            "trace.brokenModes.NotReady: expected a weight of 0 or more",
        ),
        (
            BASE + "trace: {synthetic: {jobs: 5}, brokenModes: {NotReady: 0}}",
            "trace.brokenModes: the weights add up to 0",
        ),
        (BASE + "trace: {synthetic: {jobs: 5}, brokenModes: most}", "trace.brokenModes: expected"),
        (
            BASE + "settings: {workloadFaults: {evictAfter: 0s}}",
            "settings.workloadFaults.evictAfter: must be greater than 0s",
        ),
    ],
)
def test_failure_modes_are_checked(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario_text(text)
    assert message in str(info.value)


def test_a_failure_makes_a_workload_never_ready_and_broken_modes_draw_from_their_own_stream() -> (
    None
):
    sc = parse_scenario_text(
        "cluster: {nodes: 2}\nworkloads: [{name: a, pods: 1, failure: ImagePullBackOff}]"
    )
    (w,) = sc.workloads
    assert (w.never_ready, w.failure, w.failure_mode) == (
        True,
        "ImagePullBackOff",
        "ImagePullBackOff",
    )
    assert sc.models_failures
    trace = "trace: {synthetic: {jobs: 400}, brokenFraction: 0.25"
    plain = parse_scenario_text(BASE + trace + "}")
    mixed = parse_scenario_text(BASE + trace + ", brokenModes: default}")
    assert not plain.models_failures and mixed.models_failures
    # the same jobs are broken, with the same startup times: only their mode is new
    assert [(w.never_ready, w.startup_seconds) for w in plain.workloads] == [
        (w.never_ready, w.startup_seconds) for w in mixed.workloads
    ]
    modes = [w.failure for w in mixed.workloads if w.never_ready]
    assert {m for m in modes} == {"CrashLoopBackOff", "ImagePullBackOff", "NotReady"}
    assert all(w.failure is None for w in mixed.workloads if not w.never_ready)
    assert modes.count("CrashLoopBackOff") > modes.count("NotReady")
