"""What an admission is made of: a workload's spec, as reported and as held.

A workload changes what it asks for only while it holds nothing on the cluster,
so the lifecycle compares specs and an eviction applies the one that waited.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.core.copying import replace
from muster.core.model import Workload, WorkloadObserved


def priority_of(e: WorkloadObserved) -> dict[str, Any]:
    """The priority that orders the queue: the class's value when the pods have a
    PriorityClass, else the `muster.io/priority` annotation."""
    if e.priority_class is None:
        return {"priority": e.priority, "priority_class": None, "priority_class_missing": False}
    return {
        "priority": e.class_priority if e.class_priority is not None else e.priority,
        "priority_class": e.priority_class,
        "priority_class_missing": e.class_priority is None,
    }


def spec_of(x: WorkloadObserved | Workload) -> dict[str, Any]:
    """What an admission is made of: as the cluster reports it, or as a workload holds it."""
    spec = {
        "queue": x.queue,
        "gangSize": x.gang_size,
        "gpus": x.gpus,
        "timeoutOverride": x.timeout_override,
    }
    return spec | _placement_spec(x.shape, x.placement, x.topology)


def _placement_spec(
    shape: tuple[tuple[int, int], ...], placement: str, topology: str
) -> dict[str, Any]:
    """What the capacity check reads, only when reported (older specs compare equal)."""
    return (
        ({"shape": [list(g) for g in shape]} if shape else {})
        | ({"placement": placement} if placement else {})
        | ({"topology": topology} if topology else {})
    )


def with_spec(w: Workload, spec: Mapping[str, Any]) -> Workload:
    """`w` asking for `spec` (a `spec_of` mapping), no change waiting any more."""
    return replace(
        w,
        queue=spec["queue"],
        gang_size=spec["gangSize"],
        gpus=spec["gpus"],
        timeout_override=spec["timeoutOverride"],
        shape=tuple((int(n), int(g)) for n, g in spec.get("shape") or ()),
        placement=str(spec.get("placement") or ""),
        topology=str(spec.get("topology") or ""),
        next_spec=None,
    )
