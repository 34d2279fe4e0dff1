"""The Kubernetes adapter keeps an admitted gang's pods inside its topology domain."""

from __future__ import annotations

from typing import Any

import pytest
from muster.core.model import Admit, Kind, Phase
from muster.kube.adapter import KubernetesCluster

from tests.kube.test_adapter import (  # noqa: F401 (fixtures)
    JOBS,
    PODS,
    PYTORCHJOBS,
    cluster,
    job,
    k8s,
    pod,
    recorded,
    requests,
    sleeps,
)

pytest.importorskip("kmock")

L2, L3 = "topology.k8s.aws/network-node-layer-2", "topology.k8s.aws/network-node-layer-3"
BLOCK = "network-node-layer-2=s1,network-node-layer-3=b2"
ASKS = "required=network-node-layer-3"


def placed(kind: Kind, key: str, domain: str, topology: str = ASKS) -> Admit:
    recorded(key, 1, Phase.ADMITTED, kind)
    return Admit(key, 1, kind, "", domain=domain, topology=topology)


def test_a_job_is_unsuspended_with_its_domains_selector_in_the_same_patch(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    # GIVEN a suspended Job whose template kept an earlier attempt's block and its own key
    held = job()
    selector = {L3: "b1", "node.kubernetes.io/instance-type": "p5.48xlarge"}
    held["spec"]["template"] = {"spec": {"nodeSelector": selector}}
    k8s.objects[JOBS, "ml", "train"] = held
    # WHEN it is admitted into block b2
    cluster.admit(placed(Kind.JOB, "ml/train", BLOCK))
    # THEN one patch unsuspends it and sets the block's labels, the owner's key kept
    patch = requests(k8s)[1][2]
    assert patch == {
        "spec": {
            "suspend": False,
            "template": {"spec": {"nodeSelector": {L2: "s1", L3: "b2"}}},
        }
    }
    stored = k8s.objects[JOBS, "ml", "train"]["spec"]["template"]["spec"]["nodeSelector"]
    assert stored == {L2: "s1", L3: "b2", "node.kubernetes.io/instance-type": "p5.48xlarge"}


def test_placed_anywhere_the_earlier_domain_is_removed_and_without_topology_nothing_is(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    held = job()
    held["spec"]["template"] = {"spec": {"nodeSelector": {L3: "b1"}}}
    k8s.objects[JOBS, "ml", "train"] = held
    cluster.admit(placed(Kind.JOB, "ml/train", "", "preferred=network-node-layer-3"))
    assert requests(k8s)[1][2]["spec"]["template"] == {"spec": {"nodeSelector": {L3: None}}}
    k8s.objects[JOBS, "ml", "plain"] = job("plain")
    cluster.admit(placed(Kind.JOB, "ml/plain", "", ""))
    assert [d for m, _, d in requests(k8s) if m == "PATCH"][-2] == {"spec": {"suspend": False}}


def test_a_pytorchjobs_replica_templates_each_get_the_selector(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    replica = {"replicas": 1, "template": {"spec": {"containers": []}}}
    k8s.objects[PYTORCHJOBS, "ml", "pt"] = {
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {"Master": replica, "Worker": dict(replica)},
        },
    }
    cluster.admit(placed(Kind.PYTORCHJOB, "ml/pt", BLOCK))
    roles = k8s.objects[PYTORCHJOBS, "ml", "pt"]["spec"]["pytorchReplicaSpecs"]
    assert {r: s["template"]["spec"]["nodeSelector"] for r, s in roles.items()} == {
        "Master": {L2: "s1", L3: "b2"},
        "Worker": {L2: "s1", L3: "b2"},
    }
    assert k8s.objects[PYTORCHJOBS, "ml", "pt"]["spec"]["runPolicy"]["suspend"] is False


def test_a_gated_pod_gets_the_selector_in_the_patch_that_releases_it(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    cluster.admit(placed(Kind.POD_GROUP, "ml/grp", BLOCK))
    assert requests(k8s)[1][2] == {
        "spec": {"schedulingGates": [], "nodeSelector": {L2: "s1", L3: "b2"}}
    }


def test_the_admitted_event_on_the_workload_names_its_domain() -> None:
    from muster.core.model import LogEvent
    from muster.kube.events import describe

    detail = {"attempt": 1, "deadline": 0, "timeoutSeconds": 300, "domain": BLOCK}
    shown = describe(LogEvent.ADMITTED, detail, "ml/train")
    assert shown is not None and shown.message.endswith(f"; placed in {BLOCK}")
    plain = describe(LogEvent.ADMITTED, {**detail, "domain": None}, "ml/train")
    assert plain is not None and "placed in" not in plain.message
