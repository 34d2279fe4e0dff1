"""The cluster side: the Kubernetes adapter the Lambdas use, and the in-cluster agent."""

from muster.kube.adapter import (
    ClusterActionError,
    ClusterUnavailable,
    KubernetesCluster,
    for_cluster,
    from_environment,
)

__all__ = [
    "ClusterActionError",
    "ClusterUnavailable",
    "KubernetesCluster",
    "for_cluster",
    "from_environment",
]
