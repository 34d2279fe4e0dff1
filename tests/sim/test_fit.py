"""The simulator's `gang+fit` policy: the capacity check against its cluster model."""

from __future__ import annotations

from muster.sim.engine import simulate
from muster.sim.scenario import load_builtin


def test_the_deadlocking_gangs_both_finish_with_no_eviction() -> None:
    # GIVEN two gangs of 3 x 8 GPUs on 4 nodes of 8, under a quota that admits both
    scenario = load_builtin("deadlock")
    # WHEN the capacity check admits them (blockAdmission stays off)
    result = simulate(scenario, "gang+fit")
    # THEN the second waits for room instead of splitting the nodes: both finish, no eviction
    assert result.summary["finished"] == 2
    assert result.summary["evictions"] == 0
    admitted = [e["t"] for e in result.events if e["event"] == "Admitted"]
    finished = [e["t"] for e in result.events if e["event"] == "Finished"]
    assert admitted[1] >= finished[0]
    # AND on quota alone the same gangs time out together
    assert simulate(scenario, "gang").summary["finished"] == 0


def test_no_healthy_gang_of_the_synthetic_scenario_is_deactivated() -> None:
    scenario = load_builtin("synthetic")
    broken = {w.name for w in scenario.workloads if w.never_ready}

    def healthy_deactivated(policy: str) -> list[str]:
        events = simulate(scenario, policy).events
        return [
            e["workload"]
            for e in events
            if e["event"] == "Deactivated" and e["workload"] not in broken
        ]

    assert healthy_deactivated("gang+fit") == []
    assert len(healthy_deactivated("gang")) > 0  # what the check prevents
