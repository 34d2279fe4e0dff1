"""Nodes in network blocks: the scenario's `cluster.topology`, and where gangs landed.

`cluster: {nodes: 64, gpusPerNode: 8, topology: {network-node-layer-1: 32,
network-node-layer-2: 16, network-node-layer-3: 4}}` gives, per level, how many
nodes one domain of it holds: node i is in block i // 4 of layer 3, i // 16 of
layer 2 and i // 32 of layer 1, and reports the labels of those blocks
(`topology.k8s.aws/network-node-layer-3: nn3-1`, ...) with its capacity, as the
agent reports an EKS node's. Each level's block size divides the next wider
one's, and the widest divides the cluster's nodes, so a block lies inside one
block of each wider level, as on EC2.

Where gangs land is measured on the simulated cluster (`SimulatedCluster.spans`,
the nodes each release of a job had pods bound on), not taken from the core's
choice: the summary's `topology` part says, of the multi-node gangs (more GPUs
than one node has) that became whole, the share whose pods were all inside one
block at each level, and their queue delay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from muster.core.fields import problem
from muster.core.topology import LEVELS, Topology, common_domain, level_name, parse_request
from muster.sim.specs import ScenarioError, WorkloadSpec

Layout = tuple[tuple[str, int], ...]  # (level, nodes per block), widest level first
_PREFIX = {
    "zone": "zone",
    "network-node-layer-1": "nn1",
    "network-node-layer-2": "nn2",
    "network-node-layer-3": "nn3",
}


def parse_layout(raw: Any, nodes: int) -> Layout:
    """`cluster.topology`: level -> nodes per block; every wrong entry is a mistake of its own."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        problem(
            "cluster.topology: expected a mapping of level -> nodes per block, e.g. "
            "{network-node-layer-2: 16, network-node-layer-3: 4}"
        )
        return ()
    sizes: dict[str, int] = {}
    for key, size in raw.items():
        path = f"cluster.topology.{key}"
        level = level_name(str(key))
        if level is None:
            problem(f"{path}: unknown topology level (known: {', '.join(LEVELS)})")
        elif level in sizes:
            problem(f"{path}: {level} is given twice")
        elif isinstance(size, bool) or not isinstance(size, int) or size < 1:
            problem(f"{path}: expected a whole number of nodes per block (1 or more), got {size!r}")
        else:
            sizes[level] = size
    layout = tuple((level, sizes[level]) for level in LEVELS if level in sizes)
    wider, wider_size = "cluster.nodes", nodes
    for level, size in layout:
        if wider_size % size:
            problem(
                f"cluster.topology.{level}: {size} nodes per block does not divide "
                f"{wider} ({wider_size}): a block must lie inside one block of each wider level"
            )
            return ()
        wider, wider_size = f"cluster.topology.{level}", size
    return layout


def node_topology(layout: Layout, index: int) -> Topology:
    """The topology labels of node `index` (widest level first)."""
    return tuple((level, f"{_PREFIX[level]}-{index // size}") for level, size in layout)


def request(raw: Any, path: str) -> str:
    """A `topology` field of a workload or a trace: its request, canonical ("" for none)."""
    if raw is None or raw == "":
        return ""
    try:
        return str(parse_request(raw if isinstance(raw, str) else repr(raw)))
    except ValueError as exc:
        problem(f"{path}: {exc}")
        return ""


def block_nodes(layout: Layout, level: str) -> int | None:
    """How many nodes one block of `level` holds (None: the layout has no such level)."""
    return dict(layout).get(level)


def spans_blocks(
    spans: Sequence[tuple[str, frozenset[int], bool]],
    layout: Layout,
    multi_node: set[str],
) -> dict[str, Any]:
    """Of the multi-node gangs' releases that became whole: how many, and the share
    inside one block at each level of `layout`."""
    whole = [nodes for job, nodes, was_whole in spans if was_whole and job in multi_node]
    share: dict[str, float | None] = {}
    for level, _ in layout:
        inside = sum(1 for nodes in whole if _one_domain(layout, nodes, level))
        share[level] = round(inside / len(whole), 4) if whole else None
    return {"placements": len(whole), "withinOneBlock": share}


def across_domains(
    spans: Sequence[tuple[str, frozenset[int], bool]],
    layout: Layout,
    required: Mapping[str, str],
) -> list[str]:
    """Releases of a required-topology gang whose pods were bound in more than one
    domain of its level (the invariant: none ever is)."""
    found: list[str] = []
    for job, nodes, _ in spans:
        level = required.get(job)
        if level is not None and nodes and not _one_domain(layout, nodes, level):
            found.append(f"{job}: pods bound on nodes {sorted(nodes)}, not one {level} domain")
    return found


def _one_domain(layout: Layout, nodes: frozenset[int], level: str) -> bool:
    """Whether every node of `nodes` (by index) lies inside one domain of `level`."""
    labels = {str(n): node_topology(layout, n) for n in nodes}
    return common_domain(labels, labels, level) is not None


def trace_requests(
    workloads: Sequence[WorkloadSpec], text: str, layout: Layout, gpus_per_node: int
) -> list[WorkloadSpec]:
    """`trace.topology` on the trace's multi-node gangs (more GPUs than one node has).
    A `required` one only on those that fit one block of its level: a gang larger
    than a block could never be admitted inside one; a `preferred` one on all."""
    wanted = parse_request(text)
    size = block_nodes(layout, wanted.level)
    if size is None:
        raise ScenarioError(
            f"trace.topology: the cluster has no {wanted.level} blocks "
            "(name them in cluster.topology)"
        )
    room = size * gpus_per_node if wanted.required else math.inf
    return [replace(w, topology=text) if gpus_per_node < w.gpus <= room else w for w in workloads]


__all__ = [
    "Layout",
    "across_domains",
    "block_nodes",
    "node_topology",
    "parse_layout",
    "request",
    "spans_blocks",
    "trace_requests",
]
