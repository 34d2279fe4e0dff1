"""The admission policies' params, rendered from Muster's settings (`muster policy-params`).

The cluster's policies (deploy/kubernetes/admission-policy.yaml) read the ConfigMap
muster-system/muster-policy-params; rendering it from the same settings the core
uses keeps the two from drifting apart: what the API server refuses at creation is
what the control plane would refuse to admit.

Queue access is denied by default: the policy admits a queue only when the params
name it (`queues`), and restricts it to the namespaces and priorities of its
`queue.<name>.*` keys unless `restrictQueues` is "false". Every queue the settings
name (`queues` or `queueAccess.queues`) is listed; `"*"` (any name) is rendered only
while the settings name no queue at all and do not restrict queues, when no queue
has settings of its own that another name could escape.
"""

from __future__ import annotations

import re
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
# The controllers that create the pods of workloads the policies already checked
# (a Job's, a PyTorchJob's): the opt-in muster-gpu-requires-queue leaves their pods
# alone.
DEFAULT_POD_CONTROLLERS = (
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kubeflow:training-operator",
)
# The extended resources that count as accelerators for muster-gpu-requires-queue
# (the policy adds every `nvidia.com/mig-*` slice itself).
DEFAULT_ACCELERATOR_RESOURCES = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "aws.amazon.com/neurondevice",
)
# The most pods one workload may run at once (the design's largest gang).
MAX_WORKLOAD_PODS = 4096
# The most bytes a managed object's annotations may take (keys and values): half of
# the API server's 256 KiB, so Muster's own annotations always fit beside them.
MAX_ANNOTATION_BYTES = 128 * 1024

# A queue name a workload can carry (a label value); no other can be used at all.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def known_queues(settings: Settings) -> list[str]:
    """Every queue the control plane takes (`Settings.named_queues`), as the policy lists them."""
    return sorted(n for n in settings.named_queues if _LABEL_VALUE.match(n))


def render(
    settings: Settings,
    owner_controllers: Sequence[str] = DEFAULT_OWNER_CONTROLLERS,
    *,
    pod_controllers: Sequence[str] = DEFAULT_POD_CONTROLLERS,
    accelerator_resources: Sequence[str] = DEFAULT_ACCELERATOR_RESOURCES,
    max_pods: int = MAX_WORKLOAD_PODS,
    max_annotation_bytes: int = MAX_ANNOTATION_BYTES,
) -> dict[str, Any]:
    """The params ConfigMap (comma-separated lists, as the policies' CEL reads them)."""
    restrict = settings.access.restrict
    queues = known_queues(settings)
    data = {
        "ownerControllers": ",".join(owner_controllers),
        "podControllers": ",".join(pod_controllers),
        "acceleratorResources": ",".join(accelerator_resources),
        "maxPods": str(max_pods),
        "maxAnnotationBytes": str(max_annotation_bytes),
        "restrictQueues": "true" if restrict else "false",
        "queues": ",".join(queues) if queues or restrict else "*",
    }
    for name, grant in sorted(settings.access.queues.items()):
        if not _LABEL_VALUE.match(name):
            continue
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
