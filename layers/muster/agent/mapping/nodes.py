"""Nodes: readiness, HyperPod health, allocatable GPUs, and whether new pods may land."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from muster.agent.mapping.objects import TOLERATED_TAINTS, labels
from muster.core.topology import Topology, node_topology
from muster.kube.conventions import NODE_HEALTH_LABEL
from muster.kube.resources import node_gpus

# HyperPod's health label values on which new pods may still land.
SCHEDULABLE_HEALTH = frozenset({"Schedulable", "SchedulablePreferred"})


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a `Node Observed` event says of a node (the foreign GPUs are the agent's sum)."""

    ready: bool
    health: str | None
    gpus: int = 0  # allocatable GPUs (`muster.kube.resources`)
    unschedulable: str | None = None  # why new pods may not land on it; None: they may
    topology: Topology = ()  # its topology labels (`muster.core.topology`), widest first


def node_view(node: Mapping[str, Any], tolerated: frozenset[str] | None = None) -> NodeView:
    """Ready, the HyperPod health label, allocatable GPUs, and whether new pods may land.

    New pods may not land on a cordoned node, a NotReady one, one whose HyperPod
    health label says it is unschedulable, or one with a NoSchedule or NoExecute
    taint that Muster's workloads do not tolerate (`tolerated`, by default
    `TOLERATED_TAINTS`).
    """
    known = TOLERATED_TAINTS if tolerated is None else tolerated
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    health = labels(node).get(NODE_HEALTH_LABEL)
    spec = node.get("spec") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    why: str | None = None
    if spec.get("unschedulable") is True:
        why = "cordoned"
    elif not ready:
        why = "NotReady"
    elif health is not None and health not in SCHEDULABLE_HEALTH:
        why = f"health {health}"
    else:
        for taint in spec.get("taints") or []:
            effect = (taint or {}).get("effect")
            key = (taint or {}).get("key")
            if effect in ("NoSchedule", "NoExecute") and key not in known:
                value = taint.get("value")
                why = f"taint {key}{'=' + str(value) if value else ''}:{effect}"
                break
    return NodeView(ready, health, node_gpus(allocatable), why, node_topology(labels(node)))
