"""How a run plays, apart from what it decides: what it leaves behind."""

from __future__ import annotations

import gc

import pytest
from muster.sim.engine import simulate

from tests.sim.conftest import scenario

SMALL = """
cluster: {nodes: 1, gpusPerNode: 8}
settings: {timeout: 30s, requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 10}}
until: 10m
workloads:
  - {name: good, queue: q, submitAt: 0s, pods: 2, gpusPerPod: 4, startupSeconds: 5, runSeconds: 60}
  - {name: bad, queue: q, submitAt: 1s, pods: 1, gpusPerPod: 8, startupSeconds: 5, runSeconds: 60, neverReady: true}
"""


@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_leaves_the_garbage_collector_as_it_found_it(enabled: bool):
    # GIVEN the cyclic collector on (or off)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        # WHEN a scenario runs to its end
        result = simulate(scenario(SMALL), "gang")
        # THEN the collector is as it was, and the run played out
        assert gc.isenabled() is enabled
        assert result.summary["finished"] == 1 and result.summary["deactivated"] == 1
    finally:
        (gc.enable if was else gc.disable)()


def test_a_run_without_a_record_has_the_same_summary_and_makes_no_log() -> None:
    # GIVEN the same scenario run with its record and without
    recorded = simulate(scenario(SMALL), "gang")
    bare = simulate(scenario(SMALL), "gang", record=False)
    # THEN the summaries agree but for the wall time, and so do the workloads' tracks
    assert {k: v for k, v in bare.summary.items() if k != "wallSeconds"} == {
        k: v for k, v in recorded.summary.items() if k != "wallSeconds"
    }
    assert bare.tracking == recorded.tracking
    assert recorded.tracking["good"].finished is not None and recorded.tracking["bad"].deactivated
    # AND the bare run made neither log entries nor GPU-use samples past the first
    assert recorded.events and len(recorded.samples) > 1
    assert bare.events == [] and len(bare.samples) == 1
