"""`muster describe`'s view: one workload's state and history, or "why was my job evicted?"."""

from __future__ import annotations

from typing import Any

from muster.admin.deployment import Deployment, workload_key
from muster.admin.errors import AdminError
from muster.admin.render import ordered
from muster.core import Phase


def describe_view(deployment: Deployment, workload: str) -> dict[str, Any]:
    """The workload's state and its history oldest first; an `AdminError` if there is none."""
    from muster.runtime.views import describe

    store = deployment.store()
    doc = describe(store, workload_key(store, workload))
    if doc is None:
        raise AdminError(
            f"no workload {workload} in cluster {deployment.config.cluster_name} "
            f"(workloads are named namespace/name, other kinds than Jobs namespace/name@kind "
            f"such as team/train@pytorchjob; `muster status` lists them)"
        )
    doc["history"] = ordered(doc["history"])
    if doc["phase"] == Phase.PENDING.value:
        from muster.admin.status import admission_outlook

        why = admission_outlook(store, deployment.settings(store).effective())["waiting"]
        if doc["workload"] in why:
            doc["waiting"] = why[doc["workload"]]
    return doc
