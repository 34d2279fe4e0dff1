"""Nodes in network blocks: the scenario's `cluster.topology`, the node reports, a gang
kept inside its domain by the simulated cluster, and the summary's topology figures."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from muster.core import NodeObserved
from muster.core.topology import request_of
from muster.sim.blocks import BlockCluster
from muster.sim.engine import Simulation, simulate
from muster.sim.kube import JobSpec
from muster.sim.report import summary_table
from muster.sim.specs import ScenarioError
from muster.sim.topology import across_domains, node_topology

from tests.sim.conftest import REPO, scenario

L2, L3 = "network-node-layer-2", "network-node-layer-3"


def blocks_doc(workloads: list[dict[str, Any]], **cluster: Any) -> dict[str, Any]:
    return {
        "cluster": {"nodes": 16, "gpusPerNode": 8, "topology": {L2: 8, L3: 4}} | cluster,
        "settings": {"topologyLevels": [L2, L3]},
        "until": "1d",
        "workloads": workloads,
    }


# ------------------------------------------------------------------ the scenario


def test_layout_labels_each_node_with_its_block_at_every_level() -> None:
    sc = scenario(blocks_doc([{"name": "a", "pods": 2, "topology": f"required={L3}"}]))
    assert sc.topology == ((L2, 8), (L3, 4))
    assert sc.node_topology(0) == ((L2, "nn2-0"), (L3, "nn3-0"))
    assert sc.node_topology(13) == ((L2, "nn2-1"), (L3, "nn3-3"))
    assert sc.workloads[0].topology == f"required={L3}"
    # The levels are read as the capacity check reads them; the check stays off.
    assert sc.settings.defaults.topology_levels == (L2, L3)
    assert sc.settings.capacity_check is False


def test_label_keys_name_levels_too_and_order_does_not_matter() -> None:
    doc = blocks_doc([{"name": "a", "pods": 1}])
    doc["cluster"]["topology"] = {
        "topology.k8s.aws/network-node-layer-3": 2,
        "network-node-layer-1": 16,
    }
    sc = scenario(doc)
    assert sc.topology == (("network-node-layer-1", 16), (L3, 2))


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({L2: 8, L3: 3}, f"cluster.topology.{L3}: 3 nodes per block does not divide"),
        ({L2: 6}, f"cluster.topology.{L2}: 6 nodes per block does not divide cluster.nodes (16)"),
        ({"network-node-layer-9": 4}, "cluster.topology.network-node-layer-9: unknown topology"),
        ({L3: 0}, f"cluster.topology.{L3}: expected a whole number of nodes per block"),
        ({L3: True}, f"cluster.topology.{L3}: expected a whole number"),
        ([4], "cluster.topology: expected a mapping of level -> nodes per block"),
        (
            {L3: 4, "topology.k8s.aws/network-node-layer-3": 4},
            f"{L3} is given twice",
        ),
    ],
)
def test_a_wrong_layout_is_a_clear_error(topology: Any, message: str) -> None:
    doc = blocks_doc([{"name": "a", "pods": 1}])
    doc["cluster"]["topology"] = topology
    with pytest.raises(ScenarioError) as err:
        scenario(doc)
    assert message in str(err.value)


def test_every_wrong_topology_field_is_reported_at_once() -> None:
    doc = blocks_doc(
        [
            {"name": "a", "topology": "needed=network-node-layer-3"},
            {"name": "b", "topology": "required=network-node-layer-33"},
        ]
    )
    doc["cluster"]["topology"] = {L3: 5}
    with pytest.raises(ScenarioError) as err:
        scenario(doc)
    text = str(err.value)
    assert "workloads[0].topology: expected required=<level> or preferred=<level>" in text
    assert "workloads[1].topology: unknown topology level 'network-node-layer-33'" in text
    assert "cluster.topology.network-node-layer-3: 5 nodes per block does not divide" in text


def test_trace_topology_goes_on_the_multi_node_gangs_that_fit_one_block() -> None:
    doc = blocks_doc([], gpusPerNode=1)  # blocks of 4 GPUs at layer 3
    doc["trace"] = {
        "synthetic": {"jobs": 400, "load": 0.5, "maxRunSeconds": "2h"},
        "mapping": "pod-per-gpu",
        "topology": f"required={L3}",
    }
    sc = scenario(doc)
    asked = [w for w in sc.workloads if w.topology]
    assert asked, "no synthetic gang asked for the topology"
    assert all(1 < w.gpus <= 4 for w in asked)
    assert all(not w.topology for w in sc.workloads if w.gpus == 1 or w.gpus > 4)
    assert any(w.gpus > 4 for w in sc.workloads)  # larger than a block: left without it
    doc["trace"]["topology"] = f"preferred={L3}"  # preferred: on every multi-node gang
    assert {w.name for w in scenario(doc).workloads if w.topology} == {
        w.name for w in sc.workloads if w.gpus > 1
    }


def test_trace_topology_needs_blocks_of_its_level() -> None:
    doc = blocks_doc([])
    doc["cluster"]["topology"] = {L2: 8}
    doc["trace"] = {"synthetic": {"jobs": 20}, "topology": f"required={L3}"}
    with pytest.raises(ScenarioError, match=f"trace.topology: the cluster has no {L3} blocks"):
        scenario(doc)


# ------------------------------------------------------------------ the cluster


def test_node_reports_carry_each_nodes_labels_with_the_capacity_check() -> None:
    sim = Simulation(scenario(blocks_doc([{"name": "a", "pods": 1}])), "gang+fit")
    event = sim._node_event("node-5", True)
    assert isinstance(event, NodeObserved)
    assert event.topology == ((L2, "nn2-0"), (L3, "nn3-1"))
    assert event.gpus == 8


def test_block_cluster_binds_a_gangs_pods_only_inside_its_domain() -> None:
    labels = [node_topology(((L3, 2),), i) for i in range(4)]
    kube = BlockCluster(4, 8, labels)
    kube.add_job(JobSpec("big", 3, 8, 1.0, 10.0))
    kube.unsuspend("big", f"{L3}=nn3-1")
    kube.reconcile()
    assert kube.bind_pending(0.0) == 2  # nodes 2 and 3; the third pod waits
    assert kube.free_gpus == (8, 8, 0, 0)
    kube.suspend("big", 1.0)
    assert kube.spans == [("big", frozenset({2, 3}), False)]
    kube.unsuspend("big")  # placed anywhere this time
    kube.reconcile()
    assert kube.bind_pending(2.0) == 3
    assert kube.free_gpus == (0, 0, 0, 8)


def test_a_required_gang_runs_inside_one_block_and_the_summary_says_so() -> None:
    workloads = [
        {"name": "filler", "pods": 2, "runSeconds": 600},
        {"name": "tight", "pods": 4, "runSeconds": 600, "topology": f"required={L3}"},
    ]
    sc = scenario(blocks_doc(workloads))
    sim = Simulation(sc, "gang+fit")
    summary = sim.run().summary
    spans = {job: nodes for job, nodes, whole in sim.kube.spans if whole}  # type: ignore[attr-defined]
    assert spans["tight"] == frozenset({4, 5, 6, 7})  # the first free block, whole
    topo = summary["topology"]
    assert topo["multiNodeGangs"] == 2 and topo["asked"] == 1
    assert topo["placements"] == 2
    assert topo["withinOneBlock"] == {L2: 1.0, L3: 1.0}
    # Under quota alone the request is not honoured: the gangs' pods interleave.
    plain = simulate(sc, "gang").summary["topology"]
    assert plain["withinOneBlock"][L3] < 1.0


def test_a_required_gang_larger_than_every_free_block_waits() -> None:
    workloads = [
        {"name": "holder", "pods": 13, "gpusPerPod": 5, "runSeconds": 600},
        {"name": "tight", "pods": 4, "submitAt": "1s", "topology": f"required={L3}"},
    ]
    result = simulate(scenario(blocks_doc(workloads)), "gang+fit")
    admitted = [e for e in result.events if e["event"] == "Admitted" and e["workload"] == "tight"]
    # The holder's 5-GPU pods take one each of nodes 0-12: no block of 4 whole nodes
    # is free until it finishes.
    assert admitted and admitted[0]["t"] >= 600
    # Three of them fit the free nodes 13-15, inside block nn3-3: admitted at once.
    preferred = [dict(w) for w in workloads]
    preferred[1]["topology"] = f"preferred={L3}"
    preferred[1]["pods"] = 3
    result = simulate(scenario(blocks_doc(preferred)), "gang+fit")
    admitted = [e for e in result.events if e["event"] == "Admitted" and e["workload"] == "tight"]
    assert admitted[0]["t"] == 1


def test_without_topology_the_summary_has_no_topology_part() -> None:
    doc = blocks_doc([{"name": "a", "pods": 2}])
    with_blocks = summary_table([simulate(scenario(doc), "gang+fit")])
    assert f"in one {L2} block" in with_blocks.splitlines()[-4]
    assert f"in one {L3} block" in with_blocks.splitlines()[-3]
    del doc["cluster"]["topology"]
    del doc["settings"]
    result = simulate(scenario(doc), "gang+fit")
    assert "topology" not in result.summary
    assert "multi-node" not in summary_table([result])


# ------------------------------------------------------------------ the property


@st.composite
def layouts_and_gangs(draw: st.DrawFn) -> dict[str, Any]:
    l3 = draw(st.sampled_from([1, 2, 4]))
    l2 = l3 * draw(st.sampled_from([1, 2]))
    nodes = l2 * draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([2, 4, 8]))
    gangs = draw(st.integers(2, 10))
    workloads = []
    for i in range(gangs):
        level = draw(st.sampled_from([L2, L3]))
        mode = draw(st.sampled_from(["required", "required", "preferred", ""]))
        workloads.append(
            {
                "name": f"w{i}",
                "pods": draw(st.integers(1, l2 + 1)),
                "gpusPerPod": draw(st.integers(1, per_node)),
                "submitAt": draw(st.integers(0, 300)),
                "runSeconds": draw(st.integers(60, 900)),
                "startupSeconds": draw(st.sampled_from([0, 10, 30])),
                "topology": f"{mode}={level}" if mode else "",
            }
        )
    faults = []
    if draw(st.booleans()):
        faults.append(
            {"at": draw(st.integers(1, 600)), "node": f"node-{draw(st.integers(0, nodes - 1))}"}
        )
        faults[0]["repairAfter"] = draw(st.integers(30, 600))
    return {
        "cluster": {"nodes": nodes, "gpusPerNode": per_node, "topology": {L2: l2, L3: l3}},
        "settings": {"topologyLevels": [L2, L3], "timeout": "5m"},
        "until": "6h",
        "seed": draw(st.integers(0, 5)),
        "workloads": workloads,
        "faults": faults,
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts_and_gangs())
def test_no_required_gangs_pods_are_ever_bound_across_domains(doc: dict[str, Any]) -> None:
    sc = scenario(doc)
    sim = Simulation(sc, "gang+fit")
    sim.run()
    kube = sim.kube
    assert isinstance(kube, BlockCluster)
    required = {
        w.name: r.level
        for w in sc.workloads
        if (r := request_of(w.topology)) is not None and r.required
    }
    assert across_domains(kube.spans, sc.topology, required) == []
    # Not vacuous: every required gang that fits one block of its level had its pods
    # bound, inside one.
    blocks = dict(sc.topology)
    bound = {job for job, nodes, _ in kube.spans if nodes}
    for w in sc.workloads:
        if w.name in required and w.pods <= blocks[required[w.name]]:
            assert w.name in bound, f"{w.name} never ran"


def test_the_docs_example_of_blocks_reads_as_it_says() -> None:
    doc = (REPO / "docs" / "simulator.md").read_text()
    block = doc.split("### Nodes in network blocks (topology)", 1)[1].split("```yaml", 1)[1]
    example = yaml.safe_load(block.split("```", 1)[0])
    example["trace"] = {k: v for k, v in example["trace"].items() if k != "path"}
    example["trace"]["synthetic"] = {"jobs": 5000}
    sc = scenario(example)
    assert sc.topology == (("network-node-layer-1", 32), (L2, 16), (L3, 4))
    assert sc.node_topology(37) == (("network-node-layer-1", "nn1-1"), (L2, "nn2-2"), (L3, "nn3-9"))
    assert any(w.topology == f"required={L3}" for w in sc.workloads)
