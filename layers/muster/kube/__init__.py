"""The Kubernetes adapter the Lambdas use, and what it shares with the agent (`muster.agent`)."""

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
