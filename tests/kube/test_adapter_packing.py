"""The Kubernetes adapter keeps a gang packed onto one node (`nodePacking`) there."""

from __future__ import annotations

from typing import Any

import pytest
from muster.agent.mapping import placement_rules
from muster.core.model import Admit, Kind, Phase
from muster.kube.adapter import KubernetesCluster

from tests.kube.test_adapter import (  # noqa: F401 (fixtures)
    JOBS,
    PODS,
    cluster,
    job,
    k8s,
    pod,
    recorded,
    requests,
    sleeps,
)

pytest.importorskip("kmock")

HOST, PACKED = "kubernetes.io/hostname", "muster.io/packed-node"


def placed(kind: Kind, key: str, domain: str) -> Admit:
    recorded(key, 1, Phase.ADMITTED, kind)
    return Admit(key, 1, kind, "", domain=domain)


def test_a_packed_job_is_unsuspended_onto_its_node_and_marked_in_the_same_patch(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    # GIVEN a suspended Job with a selector of its owner's
    held = job()
    held["spec"]["template"] = {"spec": {"nodeSelector": {"gpu": "h100"}}}
    k8s.objects[JOBS, "ml", "train"] = held
    # WHEN it is admitted packed onto node-7
    cluster.admit(placed(Kind.JOB, "ml/train", "hostname=node-7"))
    # THEN one patch unsuspends it, pins its pods to node-7 and names the node
    patch = requests(k8s)[1][2]
    assert patch["spec"] == {
        "suspend": False,
        "template": {"spec": {"nodeSelector": {HOST: "node-7"}}},
    }
    assert patch["metadata"]["annotations"] == {PACKED: "node-7"}
    stored = k8s.objects[JOBS, "ml", "train"]["spec"]["template"]["spec"]["nodeSelector"]
    assert stored == {HOST: "node-7", "gpu": "h100"}


def test_placed_anywhere_after_being_packed_the_node_is_forgotten(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    # GIVEN a Job an earlier attempt packed onto node-7
    held = job()
    held["metadata"].setdefault("annotations", {})[PACKED] = "node-7"
    held["spec"]["template"] = {"spec": {"nodeSelector": {HOST: "node-7"}}}
    k8s.objects[JOBS, "ml", "train"] = held
    # WHEN it is admitted anywhere
    cluster.admit(placed(Kind.JOB, "ml/train", ""))
    # THEN the hostname selector and the mark are removed
    patch = requests(k8s)[1][2]
    assert patch["spec"]["template"] == {"spec": {"nodeSelector": {HOST: None}}}
    assert patch["metadata"]["annotations"] == {PACKED: None}


def test_an_owners_hostname_selector_is_left_alone_when_muster_never_packed_it(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    held = job()
    held["spec"]["template"] = {"spec": {"nodeSelector": {HOST: "node-3"}}}
    k8s.objects[JOBS, "ml", "train"] = held
    cluster.admit(placed(Kind.JOB, "ml/train", ""))
    assert requests(k8s)[1][2] == {"spec": {"suspend": False}}


def test_a_gated_pod_is_released_onto_its_node(
    k8s: Any,  # noqa: F811
    cluster: KubernetesCluster,  # noqa: F811
) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    cluster.admit(placed(Kind.POD_GROUP, "ml/grp", "hostname=node-2"))
    patch = requests(k8s)[1][2]
    assert patch["spec"] == {"schedulingGates": [], "nodeSelector": {HOST: "node-2"}}
    assert patch["metadata"]["annotations"] == {PACKED: "node-2"}


def test_the_agent_takes_the_hostname_selector_of_the_packed_node_as_musters() -> None:
    ours = {"spec": {"nodeSelector": {HOST: "node-7"}}}
    assert placement_rules([ours], packed="node-7") == ""
    assert placement_rules([ours]) == "nodeSelector"  # the owner's
    assert (
        placement_rules([ours], packed="node-8") == "nodeSelector"
    )  # not the node it was packed onto
    mixed = {"spec": {"nodeSelector": {HOST: "node-7", "gpu": "h100"}}}
    assert placement_rules([mixed], packed="node-7") == "nodeSelector"


def test_the_admitted_event_on_the_workload_names_its_node() -> None:
    from muster.core.model import LogEvent
    from muster.kube.events import describe

    detail = {"attempt": 1, "deadline": 0, "timeoutSeconds": 300, "node": "node-7"}
    shown = describe(LogEvent.ADMITTED, detail, "ml/train")
    assert shown is not None and shown.message.endswith("; packed onto node node-7")
