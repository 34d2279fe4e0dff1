"""The admission policies' params, rendered from Muster's settings (`muster policy-params`).

The cluster's policies (deploy/kubernetes/admission-policy.yaml) read the ConfigMap
muster-system/muster-policy-params; rendering it from the same `queueAccess` block
the core uses keeps the two from drifting apart: what the API server refuses at
creation is what the control plane would refuse to admit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from muster.core.settings import Settings

PARAMS_NAME = "muster-policy-params"
PARAMS_NAMESPACE = "muster-system"
# The controllers whose children (owned by a JobSet or PyTorchJob) are exempt from
# the "created held" rule: the JobSet and Kubeflow training operator defaults.
DEFAULT_OWNER_CONTROLLERS = (
    "system:serviceaccount:jobset-system:jobset-controller-manager",
    "system:serviceaccount:kubeflow:training-operator",
)


def render(
    settings: Settings, owner_controllers: Sequence[str] = DEFAULT_OWNER_CONTROLLERS
) -> dict[str, Any]:
    """The params ConfigMap (comma-separated lists, as the policies' CEL reads them)."""
    data = {
        "ownerControllers": ",".join(owner_controllers),
        "restrictQueues": "true" if settings.access.restrict else "false",
    }
    for name, grant in sorted(settings.access.queues.items()):
        data[f"queue.{name}.namespaces"] = ",".join(grant.namespaces)
        data[f"queue.{name}.maxPriority"] = str(grant.max_priority)
        if grant.priority_classes is not None:
            data[f"queue.{name}.priorityClasses"] = ",".join(grant.priority_classes)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PARAMS_NAME,
            "namespace": PARAMS_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "muster"},
        },
        "data": data,
    }
