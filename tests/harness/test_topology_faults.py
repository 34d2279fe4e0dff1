"""The fault harness with topology on: a required-topology gang's pods are never
bound across domains, whatever faults the control plane runs under."""

from __future__ import annotations

import pytest
from muster.core.topology import request_of
from muster.harness import FaultPlan
from muster.harness.driver import Harness
from muster.harness.model_cluster import ModelCluster

from tests.harness.test_aws_faults import ALL_FAULTS, ROOMY


def required_gangs(harness: Harness) -> list[str]:
    return [
        key
        for key, spec in harness.cluster.specs.items()
        if (r := request_of(spec.topology)) is not None and r.required
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_with_topology_no_required_gang_is_bound_across_domains(seed: int) -> None:
    # GIVEN nodes in blocks of 4 (others' pods on some), gangs asking for one block,
    # and every fault injected
    harness = Harness(
        FaultPlan(seed=seed, **ALL_FAULTS),
        workloads=40,
        seed=seed,
        capacity=True,
        topology=True,
        settings=ROOMY,
    )
    asking = required_gangs(harness)
    assert len(asking) >= 5
    # WHEN they all run
    report = harness.run()
    # THEN after every delivery every bound gang that asked is inside one block,
    # nothing is lost or stuck, and the healthy gangs that asked did run
    assert report.violations == []
    assert report.domain_checks > 100
    assert report.unfinished == []
    assert report.quarantined == 0
    healthy = [key for key in asking if not harness.cluster.specs[key].broken]
    assert healthy
    assert all(harness.cluster.runs_done[key] == 1 for key in healthy)


def test_the_invariant_is_not_hollow(monkeypatch: pytest.MonkeyPatch) -> None:
    # A cluster that ignores the domain (no node selector) binds gangs across blocks.
    monkeypatch.setattr(ModelCluster, "_selected", lambda self, key: list(self.free))
    harness = Harness(
        FaultPlan(seed=1), workloads=40, seed=1, capacity=True, topology=True, settings=ROOMY
    )
    report = harness.run()
    assert any(v.startswith("across domains") for v in report.violations)
