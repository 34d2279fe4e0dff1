"""The local mode reports node faults: the cluster hands them over, the live view prints them."""

from __future__ import annotations

import io
from typing import Any

from muster.local.cluster import LocalCluster
from muster.local.run import print_event
from muster.sim.kube import node_line

from tests.sim.conftest import scenario

STORY = """
cluster: {nodes: 2, gpusPerNode: 8}
workloads: [{name: a, pods: 1, gpusPerPod: 8, runSeconds: 600}]
faults: [{at: 5s, node: node-1, repairAfter: 10s}]
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sent:
    def __init__(self) -> None:
        self.entries: list[Any] = []

    def send(self, entries: Any) -> None:
        self.entries.extend(entries)


def test_the_cluster_hands_over_each_failure_and_repair_once() -> None:
    clock, sent = Clock(), Sent()
    cluster = LocalCluster(scenario(STORY), sent, clock=clock)
    cluster.start()
    # WHEN the steps come round a second after the failure and the repair are due
    clock.now = 6.0
    cluster.step()
    # THEN each is handed over once, at its time in the scenario (5 s, 15 s)
    assert cluster.take_node_changes() == [(5.0, "node-1", True)]
    assert cluster.take_node_changes() == []
    clock.now = 16.0
    cluster.step()
    assert cluster.take_node_changes() == [(15.0, "node-1", False)]
    # and the agent's view of the node went to the bus as well
    assert any(getattr(e, "key", "") == "node:node-1" for e in sent.entries)


def test_the_live_view_prints_a_node_line() -> None:
    out = io.StringIO()
    show = print_event(out)
    show(node_line(50.0, "node-1", failed=True))
    show({"t": 50.0, "workload": "a", "event": "WaitForRecovery"})
    first, second = out.getvalue().splitlines()
    assert "node-1" in first and "NodeFailed" in first and "(node)" in first
    assert "a" in second and "WaitForRecovery" in second
