"""What the mapping of every kind of object reads: metadata, times, counts (GPUs: `resources`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from muster.core.keys import workload_key
from muster.core.model import Kind
from muster.kube.conventions import GPU_RESOURCE


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def notes_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def object_key(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))


def workload_object_key(kind: Kind, obj: Mapping[str, Any]) -> str:
    """The workload key of a Job / JobSet / PyTorchJob object: the kind is part of it,
    so that a Job and a PyTorchJob of one name are two workloads (`muster.core.keys`)."""
    m = meta(obj)
    return workload_key(kind, str(m.get("namespace")), str(m.get("name")))


def parse_k8s_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# Taints a GPU pod tolerates as a matter of course: the capacity check treats nodes
# with only these as open to Muster's workloads, and tolerations of only these keys
# as nothing to evaluate. The agent's `--tolerated-taints` adds a cluster's own.
TOLERATED_TAINTS = frozenset({GPU_RESOURCE})


def count_of(value: Any, default: int) -> int:
    """A count from an object (never below 0); `default` when absent or not a number."""
    if value is None:
        return default
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return default
