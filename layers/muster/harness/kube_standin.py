"""A Kubernetes API stand-in for the cluster adapter, in-process: no API server runs here.

`muster.kube.adapter.KubernetesCluster` calls five methods of its `api` (`get`,
`list`, `merge_patch`, `create`, `delete`); this object answers them from a dict
of objects (workload objects by path, pods with their labels and scheduling
gates), applies merge patches as JSON merge patch does (a `resourceVersion` in
the patch must match, else 409), counts every call by verb, and answers 429 to
the next `throttle(n)` calls, as a busy API server does. It is a stand-in for
counting and refusing calls at scale; the adapter's HTTP client is tested against
the repository's fake API server elsewhere (tests/kube).

`on_change(path, obj)` is told of every patch, so a cluster model can start the
pods of a released Job or of an ungated pod.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from muster.core.model import Kind
from muster.kube.conventions import (
    POD_GROUP_LABEL,
    POD_RESOURCE,
    RESOURCES,
    SCHEDULING_GATE,
    split_key,
)
from muster.kube.http import ApiException


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch: None removes a key, objects merge, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class KubeStandIn:
    """The adapter's `api`, answered in-process (see the module docstring)."""

    def __init__(self, on_change: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()
        self.refused = 0
        self._throttle = 0
        self._versions = itertools.count(1)
        self.on_change = on_change

    # ------------------------------------------------------------------ the cluster's side

    def add_workload(self, kind: Kind, key: str, *, uid: str = "", suspended: bool = True) -> str:
        namespace, name = split_key(key)
        path = RESOURCES[kind].item(namespace, name)
        spec: dict[str, Any] = {}
        node = spec
        suspend_path = RESOURCES[kind].suspend_path
        for part in suspend_path[:-1]:
            node = node.setdefault(part, {})
        node[suspend_path[-1]] = suspended
        metadata = {"name": name, "namespace": namespace, "uid": uid}
        self._put(path, {"metadata": metadata, "spec": spec})
        return path

    def add_pod(self, namespace: str, name: str, *, uid: str = "", group: str | None = None) -> str:
        """A pod (of a pod group, gated by Muster's scheduling gate, when `group`)."""
        path = POD_RESOURCE.item(namespace, name)
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "labels": {}}
        spec: dict[str, Any] = {}
        if group is not None:
            metadata["labels"][POD_GROUP_LABEL] = group
            spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
        self._put(path, {"metadata": metadata, "spec": spec})
        return path

    def throttle(self, calls: int) -> None:
        """Answer the next `calls` calls with 429 Too Many Requests."""
        self._throttle += calls

    def total(self) -> int:
        return sum(self.calls.values())

    def _put(self, path: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["uid"] = obj["metadata"].get("uid") or f"uid-{path}"
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[path] = obj

    # ------------------------------------------------------------------ the API

    def _enter(self, verb: str) -> None:
        self.calls[verb] += 1
        if self._throttle > 0:
            self._throttle -= 1
            self.refused += 1
            raise ApiException(429, "Too Many Requests", '{"message": "rate limited"}')

    def _find(self, path: str) -> dict[str, Any]:
        if path not in self.objects:
            raise ApiException(404, "Not Found", '{"message": "not found"}')
        return self.objects[path]

    def get(self, path: str) -> dict[str, Any]:
        self._enter("get")
        return copy.deepcopy(self._find(path))

    def list(self, path: str, *, label_selector: str | None = None) -> dict[str, Any]:
        self._enter("list")
        label, _, value = (label_selector or "").partition("=")
        prefix = path.rstrip("/") + "/"
        items = [
            copy.deepcopy(o)
            for p, o in self.objects.items()
            if p.startswith(prefix)
            and "/" not in p[len(prefix) :]
            and (not label or (o["metadata"].get("labels") or {}).get(label) == value)
        ]
        return {"items": items, "metadata": {"resourceVersion": str(next(self._versions))}}

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._enter("merge_patch")
        obj = self._find(path)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != obj["metadata"]["resourceVersion"]:
            raise ApiException(409, "Conflict", '{"message": "the object has been modified"}')
        merge(obj, body)
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        if self.on_change is not None:
            self.on_change(path, obj)
        return copy.deepcopy(obj)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._enter("create")
        return dict(body)  # Events: kept nowhere

    def delete(self, path: str) -> dict[str, Any]:
        self._enter("delete")
        self._find(path)
        return self.objects.pop(path)
