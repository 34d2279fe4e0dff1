"""Trace loaders, mappings, the synthetic generator and seeded draws."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from muster.sim.specs import TraceSpec
from muster.sim.traces import (
    SINGLE_GPU_SHARE,
    STARTUP_RANGE,
    expand_trace,
    load_philly,
    map_gpus,
    synthetic_jobs,
)

from .conftest import scenario

CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-02 00:10:00,50.0,12,600.0,vcB
2017-10-02 00:00:00,100.0,1,100.0,vcA
2017-10-02 00:00:30,10.0,0,0.0,vcA
"""


def test_mappings():
    assert map_gpus(1, "pods-of-8") == (1, 1)
    assert map_gpus(4, "pods-of-8") == (1, 4)
    assert map_gpus(12, "pods-of-8") == (2, 8)
    assert map_gpus(16, "pods-of-8") == (2, 8)
    assert map_gpus(12, "pod-per-gpu") == (12, 1)


def test_philly_loader_sorts_by_submit_skips_gpuless_rows_and_makes_times_relative(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    jobs = load_philly(path)
    assert [(j.submit_at, j.gpus, j.duration, j.queue) for j in jobs] == [
        (0.0, 1, 100.0, "vcA"),
        (600.0, 12, 50.0, "vcB"),
    ]


def test_expansion_names_maps_and_marks_broken_by_seed(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    spec = TraceSpec(path=path, mapping="pods-of-8", broken_fraction=0.5)
    workloads, faults = expand_trace(spec, seed=3, gpus_per_node=8, nodes=2, until=3600)
    assert [(w.name, w.queue, w.pods, w.gpus_per_pod, w.run_seconds) for w in workloads] == [
        ("job-00001", "vcA", 1, 1, 100.0),
        ("job-00002", "vcB", 2, 8, 50.0),
    ]
    assert sum(w.never_ready for w in workloads) == 1
    low, high = STARTUP_RANGE
    assert all(low <= w.startup_seconds <= high for w in workloads)
    assert faults == []
    again, _ = expand_trace(spec, seed=3, gpus_per_node=8, nodes=2, until=3600)
    assert again == workloads


def test_node_faults_follow_the_mtbf():
    spec = TraceSpec(synthetic={"jobs": 5}, node_mtbf_hours=10, repair_after=600)
    _, faults = expand_trace(spec, seed=1, gpus_per_node=8, nodes=20, until=1000 * 3600)
    # 20 nodes x 1000 h / (10 h + 10 min) per cycle: about 1967 faults
    assert 1800 < len(faults) < 2150
    assert all(f.repair_after == 600 and f.at < 1000 * 3600 for f in faults)


def test_synthetic_jobs_follow_the_philly_shape_and_the_offered_load():
    jobs = synthetic_jobs(
        {"jobs": 5000, "load": 0.5, "maxRunSeconds": "1d"}, seed=11, total_gpus=256
    )
    assert len(jobs) == 5000
    single = sum(1 for j in jobs if j.gpus == 1) / len(jobs)
    assert abs(single - SINGLE_GPU_SHARE) < 0.03
    assert {j.gpus for j in jobs} <= {1, 2, 4, 8, 16, 32}
    assert max(j.duration for j in jobs) <= 86400
    assert jobs[0].submit_at == 0 and all(
        a.submit_at <= b.submit_at for a, b in itertools.pairwise(jobs)
    )
    work = sum(j.gpus * j.duration for j in jobs)
    span = jobs[-1].submit_at
    assert 0.4 < work / (256 * span) < 0.6
    # bursty: many jobs arrive within seconds of the previous one
    gaps = [b.submit_at - a.submit_at for a, b in itertools.pairwise(jobs)]
    assert sum(1 for g in gaps if g <= 60) / len(gaps) > 0.5


def test_the_philly_day_slice(traces_dir: Path):
    sc = scenario(
        {
            "cluster": {"nodes": 10},
            "trace": {
                "path": str(traces_dir / "philly-2017-10-02-day.csv"),
                "mapping": "pod-per-gpu",
                "brokenFraction": 0.1,
            },
        }
    )
    assert len(sc.workloads) == 1353
    assert sc.workloads[0].submit_at == 0
    assert sum(w.never_ready for w in sc.workloads) == 135
    assert all(w.gpus_per_pod == 1 for w in sc.workloads)


@pytest.mark.slow
def test_the_philly_week_slice(traces_dir: Path):
    jobs = load_philly(traces_dir / "philly-2017-10-02-week.csv")
    assert len(jobs) == 11386
    assert sum(j.gpus for j in jobs) == 13859
