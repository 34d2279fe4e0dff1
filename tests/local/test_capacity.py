"""The local mode's cluster model reports node capacity, and the check runs against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from muster.agent.sender import Entry
from muster.core import Outcome
from muster.local.cluster import LocalCluster
from muster.runtime.memory import (
    MemoryBus,
    MemoryMessages,
    MemoryMetrics,
    MemoryStore,
    MemoryTimers,
)
from muster.runtime.ports import ClusterActions
from muster.runtime.service import ControlPlane
from muster.schema import NODE_OBSERVED, parse_agent_detail
from muster.sim.scenario import load_builtin


class Recorded:
    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def send(self, entries: Sequence[Entry]) -> None:
        self.entries.extend(entries)


def play(capacity: bool) -> tuple[MemoryBus, list[Entry]]:
    """The deadlock scenario through the local cluster model and the control plane, in steps of 1 s."""
    scenario = load_builtin("deadlock")
    scenario = replace(scenario, settings=replace(scenario.settings, capacity_check=capacity))
    now = [0.0]
    sender = Recorded()
    local = LocalCluster(scenario, sender, clock=lambda: now[0])
    bus = MemoryBus()
    actions: ClusterActions = local
    plane = ControlPlane(
        store=MemoryStore(),
        timers=MemoryTimers(),
        messages=MemoryMessages(),
        bus=bus,
        metrics=MemoryMetrics(),
        cluster=actions,
        settings=lambda: scenario.settings,
        clock=lambda: now[0],
        inline_admission=True,
    )
    local.start()
    seen: list[Entry] = []
    for second in range(0, 400):
        now[0] = float(second)
        local.step()
        local.flush(everything=True)
        while sender.entries:
            batch, sender.entries = sender.entries, []
            seen += batch
            for entry in batch:
                _, event = parse_agent_detail(entry.detail_type, entry.detail)
                assert all(o is not Outcome.UNKNOWN_WORKLOAD for o in plane.handle(event))
            wanted, _ = plane.take_admission_request()
            if wanted:
                plane.admission_pass()
            local.step()
            local.flush(everything=True)
    return bus, seen


def test_the_local_cluster_reports_each_nodes_gpus_and_the_check_avoids_the_deadlock() -> None:
    # GIVEN the deadlock scenario (two gangs of 3 x 8 GPUs, 4 nodes of 8) with capacityCheck
    bus, sent = play(capacity=True)
    # THEN the local cluster reported every node's GPUs, as an agent does when it starts
    nodes = [e.detail for e in sent if e.detail_type == NODE_OBSERVED]
    assert sorted((d["node"], d["gpus"], d["foreignGpus"]) for d in nodes) == [
        (f"node-{i}", 8, 0) for i in range(4)
    ]
    # AND the second gang was admitted only once the first had finished: both
    # finished, with no eviction
    assert lifecycle(bus).index(("Admitted", "default/b")) > lifecycle(bus).index(
        ("Finished", "default/a")
    )
    assert bus.names("default/a").count("Finished") == 1
    assert bus.names("default/b").count("Finished") == 1
    assert "Evicted" not in bus.names()


def lifecycle(bus: MemoryBus) -> list[tuple[str, str]]:
    return [(str(e[0]), e[1]) for e in bus.events]


def test_without_the_check_both_gangs_are_admitted_on_quota_at_once() -> None:
    bus, sent = play(capacity=False)
    assert not [e for e in sent if e.detail_type == NODE_OBSERVED]
    assert lifecycle(bus).index(("Admitted", "default/b")) < lifecycle(bus).index(
        ("Finished", "default/a")
    )
