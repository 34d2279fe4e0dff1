"""From Kubernetes objects to what Muster needs to know about them (pure functions).

One module per kind of object (`workloads`, `pods`, `nodes`); `objects` holds
what they all read. What a pod asks for (quantities, which resources are GPUs,
the scheduler's sum) is `muster.kube.resources`, which the Kubernetes adapter
reads too (a pod group's release never lifts the gate of a pod asking for more
GPUs than the group is charged for each).
"""

from muster.agent.mapping.nodes import SCHEDULABLE_HEALTH, NodeView, node_view
from muster.agent.mapping.objects import (
    TOLERATED_TAINTS,
    labels,
    meta,
    notes_of,
    object_key,
    parse_k8s_time,
    workload_object_key,
)
from muster.agent.mapping.pods import (
    PodView,
    compact_pod,
    orphaned_from,
    pod_owner,
    pod_view,
    pod_workload,
)
from muster.agent.mapping.workloads import (
    FINISHED_CONDITIONS,
    PriorityClasses,
    WorkloadView,
    placement_rules,
    pod_group_view,
    pod_shape_of,
    with_priority_class,
    workload_view,
)
from muster.kube.resources import (
    GPU_RESOURCE_PREFIXES,
    GPU_RESOURCES,
    QuantityError,
    is_gpu_resource,
    node_gpus,
    parse_quantity,
    pod_gpus,
)

__all__ = [
    "FINISHED_CONDITIONS",
    "GPU_RESOURCES",
    "GPU_RESOURCE_PREFIXES",
    "SCHEDULABLE_HEALTH",
    "TOLERATED_TAINTS",
    "NodeView",
    "PodView",
    "PriorityClasses",
    "QuantityError",
    "WorkloadView",
    "compact_pod",
    "is_gpu_resource",
    "labels",
    "meta",
    "node_gpus",
    "node_view",
    "notes_of",
    "object_key",
    "orphaned_from",
    "parse_k8s_time",
    "parse_quantity",
    "placement_rules",
    "pod_gpus",
    "pod_group_view",
    "pod_owner",
    "pod_shape_of",
    "pod_view",
    "pod_workload",
    "with_priority_class",
    "workload_object_key",
    "workload_view",
]
