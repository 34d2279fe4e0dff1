"""Muster's Kubernetes vocabulary: labels, annotations and where each kind lives.

The queue label, the min-available/timeout/priority annotations and the scheduling
gate are defined in `muster.schema` (the agent and the control plane share them);
this module adds what only the cluster side needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from muster.core.keys import parse_workload_key
from muster.core.model import Kind
from muster.schema import (
    MIN_AVAILABLE_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    SCHEDULING_GATE,
    TIMEOUT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)

# A plain pod group is the set of pods in one namespace that carry this label with
# the same value; the value is the workload's name ("namespace/<value>@podgroup").
POD_GROUP_LABEL = "muster.io/pod-group"

# Muster's view of a workload, written by the control plane for `kubectl` users:
# each field of the recorded view becomes a `muster.io/<field>` annotation.
ANNOTATION_PREFIX = "muster.io/"
# Fencing marks: a late admit must not undo a newer eviction, nor the reverse.
ADMITTED_ATTEMPT_ANNOTATION = "muster.io/admitted-attempt"
EVICTED_ATTEMPT_ANNOTATION = "muster.io/evicted-attempt"
# The node a workload was packed onto (`nodePacking`): its pod templates' hostname
# selector is then Muster's, not a placement rule of the owner's.
PACKED_NODE_ANNOTATION = "muster.io/packed-node"

GPU_RESOURCE = "nvidia.com/gpu"

# Labels the workload controllers put on the pods they create.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
# ... and the uid of the object that owns them, where the controller labels it.
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"

# HyperPod health monitoring's label on a node; the agent sends its value as the
# node's health, and the core knows which values mean "being replaced".
NODE_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"

__all__ = [
    "ADMITTED_ATTEMPT_ANNOTATION",
    "ANNOTATION_PREFIX",
    "EVENT_RESOURCE",
    "EVICTED_ATTEMPT_ANNOTATION",
    "GPU_RESOURCE",
    "JOBSET_NAME_LABEL",
    "JOBSET_RESOURCE",
    "JOBSET_UID_LABEL",
    "JOB_NAME_LABELS",
    "JOB_RESOURCE",
    "JOB_UID_LABELS",
    "KUBEFLOW_JOB_NAME_LABEL",
    "LEASE_RESOURCE",
    "MIN_AVAILABLE_ANNOTATION",
    "NODE_HEALTH_LABEL",
    "NODE_RESOURCE",
    "PACKED_NODE_ANNOTATION",
    "POD_GROUP_LABEL",
    "POD_RESOURCE",
    "PRIORITYCLASS_RESOURCE",
    "PRIORITY_ANNOTATION",
    "PYTORCHJOB_RESOURCE",
    "QUEUE_LABEL",
    "RESOURCES",
    "SCHEDULING_GATE",
    "TIMEOUT_ANNOTATION",
    "TOPOLOGY_ANNOTATION",
    "Resource",
    "split_key",
]


@dataclass(frozen=True, slots=True)
class Resource:
    """A Kubernetes resource type and how to reach it over the API."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    # Path of the suspend flag inside `spec`, for kinds held by suspension.
    suspend_path: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self, namespace: str | None = None) -> str:
        if namespace and self.namespaced:
            return f"{self.base()}/namespaces/{namespace}/{self.plural}"
        return f"{self.base()}/{self.plural}"

    def item(self, namespace: str | None, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"


JOB_RESOURCE = Resource("batch", "v1", "jobs", "Job", suspend_path=("suspend",))
JOBSET_RESOURCE = Resource(
    "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", suspend_path=("suspend",)
)
PYTORCHJOB_RESOURCE = Resource(
    "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", suspend_path=("runPolicy", "suspend")
)
POD_RESOURCE = Resource("", "v1", "pods", "Pod")
NODE_RESOURCE = Resource("", "v1", "nodes", "Node", namespaced=False)
LEASE_RESOURCE = Resource("coordination.k8s.io", "v1", "leases", "Lease")
EVENT_RESOURCE = Resource("", "v1", "events", "Event")
PRIORITYCLASS_RESOURCE = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)

# The workload object of each kind held by suspension (pod groups have none).
RESOURCES: dict[Kind, Resource] = {
    Kind.JOB: JOB_RESOURCE,
    Kind.JOBSET: JOBSET_RESOURCE,
    Kind.PYTORCHJOB: PYTORCHJOB_RESOURCE,
}


def split_key(workload: str) -> tuple[str, str]:
    """("namespace", "name") of the object a workload key names (without its kind's
    marker: `ns/train@pytorchjob` is the PyTorchJob `train`); a clear error otherwise."""
    try:
        namespace, name, _ = parse_workload_key(workload)
    except ValueError as exc:
        raise ValueError(f"workload: {exc}, got {workload!r}") from None
    return namespace, name
