"""How a run plays, apart from what it decides: what it leaves behind."""

from __future__ import annotations

import gc

import pytest
from muster.core import PodObserved
from muster.sim import engine
from muster.sim.engine import latest_reports, simulate
from muster.sim.kube import Wakeup

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


# Reports of a pod created and bound at one instant, not delivered: `good`'s 2 pods
# at 0s, and `bad`'s pod on each of its 2 attempts (admitted once `good` is done).
SAVED = 4


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


def test_a_pod_reported_twice_in_one_batch_is_delivered_once_with_its_latest_state() -> None:
    # GIVEN a batch in which pod a-0 is reported created, then bound, with a wake-up
    # and another pod's report between
    created = PodObserved("a", "a-0", 1, "a-0-u1", "Pending", False, None, False)
    other = PodObserved("b", "b-0", 2, "b-0-u2", "Pending", False, None, False)
    wake = Wakeup(5.0, "ready", "a", "a-0-u1")
    bound = PodObserved("a", "a-0", 3, "a-0-u1", "Running", False, "node-0", False)
    # THEN only the bound report is delivered, at the place of the first
    assert latest_reports([created, other, wake, bound]) == [bound, other, wake]
    # AND a batch without a pod reported twice is left as it is
    batch = [created, wake, other]
    assert latest_reports(batch) is batch


def test_coalescing_a_pods_reports_delivers_fewer_events_and_logs_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the small scenario run as it is, and with every report delivered
    coalesced = simulate(scenario(SMALL), "gang")
    monkeypatch.setattr(engine, "latest_reports", lambda batch: batch)
    every = simulate(scenario(SMALL), "gang")
    # THEN the event logs are the same, but the core decided on fewer events: each
    # pod created and bound at one instant reached it once, bound
    assert coalesced.events == every.events
    saved = every.summary["simulatedEvents"] - coalesced.summary["simulatedEvents"]
    assert saved == SAVED, every.summary["simulatedEvents"]
