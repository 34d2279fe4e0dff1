"""Every benchmark runs at a small size in the test command, so none can rot.

Each is run as `make bench` runs it, as a script, with arguments that make it
small, and must end well and print the figures it exists for. Speed is not judged
here; `make bench` runs them at full size.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
PHILLY_WEEK = TRACES / "philly-2017-10-02-week.csv"
NO_TRACES = str(ROOT / "out" / "no-traces")  # a folder that holds no trace: built-ins only

# (script, arguments, what its output must show)
SMALL = [
    ("agent_burst.py", ["--pods", "64"], [r"agent CPU per event: +[\d.]+ us"]),
    (
        "capacity_pass.py",
        ["--pending", "50", "--nodes", "20", "--running", "10"],
        [r"plan_admission, capacityCheck: +[\d.]+ ms", r"capacityCheck: +\d+ read requests"],
    ),
    (
        "faults.py",
        ["--histories", "5", "--plain"],
        [r"histories: 5 ", r"diverged: 0\b", r"events per second"],
    ),
    (
        "faults.py",
        ["--histories", "8"],
        [
            r"histories: 8 ",
            r"diverged: 0\b",
            r"pod group runs again +[1-9]",
            r"pod group members replaced +[1-9]",
            r"workloads sharing a name with another kind +[1-9]",
            r"settings changed: cluster quota lowered +\d+",
            r"releases refused \(403\) +[1-9]",
            r"PutEvents entries throttled +[1-9]",
            r"NotReady delivered after the node's Ready +[1-9]",
            r"admission passes interleaved with other events +[1-9]",
            r"Jobs deleted with their pods still terminating +[1-9]",
            r"Jobs re-created while their orphans run +[1-9]",
            r"events per second",
        ],
    ),
    (
        "faults_aws.py",
        ["--seeds", "1", "--workloads", "8"],
        [
            r"violations +0\b",
            r"unfinished +0\b",
            r"faults injected: conflict \d+",
            r'fault rates per call: .*"refuse_admit": 0.05, "throttle_entry": 0.05\}; pod groups',
        ],
    ),
    (
        "fit_compare.py",
        [NO_TRACES],
        [r"\| deadlock \| `gang\+fit` \|", r"\| synthetic \| `gang` \|"],
    ),
    (
        "ingest_1024.py",
        ["--pods", "16", "--workers", "2"],
        [r"final phase: Running \(16 ready pods, ready count 16\)"],
    ),
    ("layer.py", ["--runs", "1"], [r"ingest +median [\d.]+ ms", r"timer +median [\d.]+ ms"]),
    ("ledger_10k.py", ["--workloads", "50"], [r"ledger items: +\d+"]),
    (
        "tune_month.py",
        ["--workloads", "1500", "--days", "2"],
        [
            r"without pruning: [\d.]+ s wall, [\d.]+ s CPU, 29 runs",
            r"with pruning: +[\d.]+ s wall, [\d.]+ s CPU, \d+ of 28 settings stopped",
            r"the same with and without pruning, on one seed: yes",
        ],
    ),
    (
        "topology_plan.py",
        ["--nodes", "64", "--workloads", "40"],
        [r"required=network-node-layer-3 +admitted +\d+ of 40 on 64 nodes \(\d+ inside"],
    ),
    (
        "scale.py",
        ["--small", "--kinds", "Job"],
        [
            r"== Job gang of 16",
            r"DynamoDB writes / pod event: +[\d.]+ \([\d.]+ WCU\)",
            r"last Ready -> PodsReady: +[\d.]+ s",
            r"admission: passes, reads, longest: +\d+, \d+, [\d.]+ s",
            r"admitted, final phase: +5,",
            r"reconciled / workloads: +40 / 40",
        ],
    ),
]
# Slower: a real local-mode run on moto, or an idle hold measured over real time.
SLOW = [
    ("cost.py", [], [r"per 1,000 pod events +\$[\d.]+", r"AWS requests made by the control plane"]),
    ("hold_idle_cpu.py", ["--window", "1"], [r"idle --hold: [\d.]+ CPU-seconds in [\d.]+ s"]),
]
# On the Philly week: skipped where the traces are absent.
ON_TRACES = [
    (
        "delay_by_size.py",
        ["--jobs", "200", "--weeks", "1"],
        [
            r"### philly-2017-10-02-week, pods of 8 GPUs",
            r"### philly-2017-10-02-week, 5% broken jobs",
            r"\| 1 GPU \(n=[\d,]+\) \|",
            r"\| gang\+fit\+nodePacking p50 \| gang\+fit\+nodePacking p95 \|",
            r"\| workloadFaults\+sizeHandicap 12h p50 \|",
            r"\| all \([\d,]+ evictions, [\d,]+ wasted GPU-h, ",
        ],
    ),
    (
        "simulate.py",
        ["--quick"],
        [
            r"synthetic \(2,000 jobs\) \[gang\]: [\d,]+ simulated events",
            r"philly-week.yaml \[gang\]",
        ],
    ),
    (
        "topology_compare.py",
        ["--weeks", "1", "--limit", "1500"],
        [
            r"\| 2017-10-02 \| `gang\+fit`, none asked \| 1500/1500 \|",
            r"\| 2017-10-02 \| `gang\+fit`, required layer 3 \| 1500/1500 \| \d+ \| \d+ \(\d+\) \| \d+ \| \d+ \| 100% \| 100% \| 100% \|",
        ],
    ),
    (
        "failure_aware.py",
        ["--jobs", "1500"],
        [r"visible failures' wasted GPU-hours", r"healthy jobs deactivated: 0"],
    ),
    (
        "tune.py",
        ["--limit", "500", "--seeds", "1"],
        [
            r"without pruning: [\d.]+ s wall, [\d.]+ s CPU",
            r"with pruning: +[\d.]+ s wall, [\d.]+ s CPU, [1-9] of 9 settings stopped",
            r"dominated at \d+% of the trace",
            r"Distributed Map \(muster:tuner=true\) runs at most 100 items at once",
            r"as on AWS: +[\d.]+ s wall, [\d.]+ s CPU, [1-9] of 9 settings stopped as "
            r"dominated; 2 executions of 2 and 8 items \(1 and 1 waves of at most 100\)",
            r"the same with and without pruning, here and as on AWS: yes",
        ],
    ),
]


def run(script: str, args: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def check(script: str, args: list[str], shows: list[str]) -> None:
    out = run(script, args)
    for pattern in shows:
        assert re.search(pattern, out), f"{script}: no {pattern!r} in:\n{out}"


@pytest.mark.parametrize(("script", "args", "shows"), SMALL, ids=[s[0] for s in SMALL])
def test_a_benchmark_runs_small_and_prints_its_figures(
    script: str, args: list[str], shows: list[str]
) -> None:
    check(script, args, shows)


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args", "shows"), SLOW, ids=[s[0] for s in SLOW])
def test_a_slower_benchmark_runs_and_prints_its_figures(
    script: str, args: list[str], shows: list[str]
) -> None:
    check(script, args, shows)


@pytest.mark.skipif(not PHILLY_WEEK.exists(), reason="the job traces (../shared/traces) are absent")
@pytest.mark.parametrize(("script", "args", "shows"), ON_TRACES, ids=[s[0] for s in ON_TRACES])
def test_a_benchmark_on_the_traces_runs_small_and_prints_its_figures(
    script: str, args: list[str], shows: list[str]
) -> None:
    check(script, args, shows)


def test_every_benchmark_is_run_here() -> None:
    here = {script for script, _, _ in SMALL + SLOW + ON_TRACES}
    assert here == {p.name for p in (ROOT / "benchmarks").glob("*.py")}
