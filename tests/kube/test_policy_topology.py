"""The control plane's policy scope, widened for topology: the node selector's topology
labels of an admitted gang's pod templates (a gated pod's own), and nothing else.

The updates are the adapter's own merge patches (`muster.kube.placement`) applied to
the old object, then judged by the shipped policies.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("celpy")

from muster.core.model import Kind
from muster.kube.placement import pod_placement, spec_placement

from tests.kube.admission import CONTROL_PLANE, TENANT, evaluate, request
from tests.kube.test_policies import job, jobset, pod, pytorchjob, update

L3 = "topology.k8s.aws/network-node-layer-3"
L2 = "topology.k8s.aws/network-node-layer-2"
BLOCK = "network-node-layer-2=s1,network-node-layer-3=b2"
SPINE = "network-node-layer-2=s1"
SCOPE = "muster-controlplane-scope"


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies `merge_patch`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


KINDS = {"Job": Kind.JOB, "JobSet": Kind.JOBSET, "PyTorchJob": Kind.PYTORCHJOB}


def admitted(old: dict[str, Any], domain: str) -> dict[str, Any]:
    """`old` after the adapter's admission patch into `domain`."""
    kind = KINDS[old["kind"]]
    held = {"runPolicy": {"suspend": False}} if kind is Kind.PYTORCHJOB else {"suspend": False}
    return merge(old, {"spec": held | spec_placement(kind, old["spec"], domain)})


def selectors(obj: dict[str, Any]) -> list[dict[str, str]]:
    spec = obj["spec"]
    templates = {
        "Job": lambda: [spec["template"]],
        "JobSet": lambda: [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]],
        "PyTorchJob": lambda: [r["template"] for r in spec["pytorchReplicaSpecs"].values()],
    }[obj["kind"]]()
    return [t["spec"].get("nodeSelector", {}) for t in templates]


def own_selector(obj: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """`obj` with `selector` on every pod template (the owner's own rules)."""
    out = copy.deepcopy(obj)
    spec = out["spec"]
    templates = {
        "Job": lambda: [spec["template"]],
        "JobSet": lambda: [r["template"]["spec"]["template"] for r in spec["replicatedJobs"]],
        "PyTorchJob": lambda: [r["template"] for r in spec["pytorchReplicaSpecs"].values()],
    }[obj["kind"]]()
    for t in templates:
        t["spec"]["nodeSelector"] = dict(selector)
    return out


WORKLOADS = [
    pytest.param(job, id="job"),
    pytest.param(jobset, id="jobset"),
    pytest.param(pytorchjob, id="pytorchjob"),
]


@pytest.mark.parametrize("make", WORKLOADS)
def test_the_control_plane_unsuspends_into_a_domain_keeping_the_owners_selector(make) -> None:  # type: ignore[no-untyped-def]
    old = own_selector(make(), {"node.kubernetes.io/instance-type": "p5.48xlarge"})
    new = admitted(old, BLOCK)
    assert selectors(new)[0] == {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        L2: "s1",
        L3: "b2",
    }
    assert evaluate(SCOPE, request("UPDATE", new, old, user=CONTROL_PLANE)).allowed
    assert update(old, new, CONTROL_PLANE).allowed


@pytest.mark.parametrize("make", WORKLOADS)
def test_a_readmission_replaces_the_earlier_domain_and_anywhere_removes_it(make) -> None:  # type: ignore[no-untyped-def]
    earlier = admitted(make(), BLOCK)
    old = merge(earlier, {"spec": {"suspend": True}}) if make is not pytorchjob else earlier
    if make is pytorchjob:
        old = merge(earlier, {"spec": {"runPolicy": {"suspend": True}}})
    wider = admitted(old, SPINE)
    assert all(s == {L2: "s1"} for s in selectors(wider))
    assert update(old, wider, CONTROL_PLANE).allowed
    anywhere = admitted(old, "")
    assert all(s == {} for s in selectors(anywhere))
    assert update(old, anywhere, CONTROL_PLANE).allowed


def _edits() -> list[Any]:
    def job_other_key(new: dict[str, Any]) -> None:
        new["spec"]["template"]["spec"]["nodeSelector"]["gpu"] = "a100"

    def job_affinity(new: dict[str, Any]) -> None:
        new["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {}}

    def job_image(new: dict[str, Any]) -> None:
        new["spec"]["template"]["spec"]["containers"][0]["image"] = "evil.example/x:1"

    def job_template_label(new: dict[str, Any]) -> None:
        new["spec"]["template"]["metadata"]["labels"]["app"] = "other"

    def jobset_replicas(new: dict[str, Any]) -> None:
        new["spec"]["replicatedJobs"][0]["replicas"] = 3

    def jobset_parallelism(new: dict[str, Any]) -> None:
        new["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 8

    def jobset_added_job(new: dict[str, Any]) -> None:
        extra = copy.deepcopy(new["spec"]["replicatedJobs"][0]) | {"name": "more"}
        new["spec"]["replicatedJobs"].append(extra)

    def jobset_image(new: dict[str, Any]) -> None:
        spec = new["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        spec["containers"][0]["image"] = "evil.example/x:1"

    def pytorch_replicas(new: dict[str, Any]) -> None:
        new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 9

    def pytorch_role(new: dict[str, Any]) -> None:
        new["spec"]["pytorchReplicaSpecs"]["Extra"] = new["spec"]["pytorchReplicaSpecs"]["Worker"]

    def pytorch_tolerations(new: dict[str, Any]) -> None:
        template = new["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
        template["spec"]["tolerations"] = [{"operator": "Exists"}]

    return [
        pytest.param(job, job_other_key, id="job-other-selector-key"),
        pytest.param(job, job_affinity, id="job-affinity"),
        pytest.param(job, job_image, id="job-image"),
        pytest.param(job, job_template_label, id="job-template-label"),
        pytest.param(jobset, jobset_replicas, id="jobset-replicas"),
        pytest.param(jobset, jobset_parallelism, id="jobset-parallelism"),
        pytest.param(jobset, jobset_added_job, id="jobset-added-job"),
        pytest.param(jobset, jobset_image, id="jobset-image"),
        pytest.param(pytorchjob, pytorch_replicas, id="pytorchjob-replicas"),
        pytest.param(pytorchjob, pytorch_role, id="pytorchjob-added-role"),
        pytest.param(pytorchjob, pytorch_tolerations, id="pytorchjob-tolerations"),
    ]


@pytest.mark.parametrize(("make", "edit"), _edits())
def test_the_control_plane_changes_nothing_else_of_a_template(make, edit) -> None:  # type: ignore[no-untyped-def]
    old = make()
    new = admitted(old, BLOCK)
    edit(new)
    assert not evaluate(SCOPE, request("UPDATE", new, old, user=CONTROL_PLANE)).allowed


@pytest.mark.parametrize("make", WORKLOADS)
def test_a_tenant_cannot_do_the_control_planes_admission(make) -> None:  # type: ignore[no-untyped-def]
    old = make()
    assert not update(old, admitted(old, BLOCK), TENANT).allowed


def ungated(old: dict[str, Any], domain: str) -> dict[str, Any]:
    """A gated pod after the adapter's release into `domain`."""
    gates = [
        g for g in old["spec"].get("schedulingGates", []) if g["name"] != "muster.io/admission"
    ]
    return merge(old, {"spec": {"schedulingGates": gates} | pod_placement(domain)})


def test_a_gated_pod_is_released_into_its_domain() -> None:
    old = pod()
    new = ungated(old, BLOCK)
    assert new["spec"]["nodeSelector"] == {L2: "s1", L3: "b2"}
    assert update(old, new, CONTROL_PLANE).allowed


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({}, {L3: "b2", "gpu": "a100"}, id="a-key-not-of-topology"),
        pytest.param({L3: "b1"}, {L3: "b2"}, id="a-changed-value"),
        pytest.param({L3: "b1", "gpu": "a100"}, {L3: "b1"}, id="a-removed-key"),
    ],
)
def test_a_pods_selector_only_gains_topology_labels(
    before: dict[str, str], after: dict[str, str]
) -> None:
    old = pod()
    if before:
        old["spec"]["nodeSelector"] = before
    new = merge(ungated(old, ""), {"spec": {"nodeSelector": None}})
    new["spec"]["nodeSelector"] = after
    assert not evaluate(SCOPE, request("UPDATE", new, old, user=CONTROL_PLANE)).allowed


def test_a_released_pods_selector_cannot_be_changed_and_a_tenant_cannot_release_one() -> None:
    running = pod(gates=())
    moved = merge(running, {"spec": {"nodeSelector": {L3: "b2"}}})
    assert not evaluate(SCOPE, request("UPDATE", moved, running, user=CONTROL_PLANE)).allowed
    assert not update(pod(), ungated(pod(), BLOCK), TENANT).allowed


@pytest.mark.parametrize("make", WORKLOADS)
def test_the_control_plane_may_pack_a_workload_onto_a_node_and_unpack_it(make) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a workload admitted packed onto node-7 (`nodePacking`), with its mark
    old = make()
    kind = KINDS[old["kind"]]
    held = {"runPolicy": {"suspend": False}} if kind is Kind.PYTORCHJOB else {"suspend": False}
    mark = {"metadata": {"annotations": {"muster.io/packed-node": "node-7"}}}
    packed = merge(
        old, {"spec": held | spec_placement(kind, old["spec"], "hostname=node-7")} | mark
    )
    assert selectors(packed)[0] == {"kubernetes.io/hostname": "node-7"}
    assert evaluate(SCOPE, request("UPDATE", packed, old, user=CONTROL_PLANE)).allowed
    # AND placed anywhere at a later admission, the hostname label is removed
    spec = spec_placement(kind, packed["spec"], "", packed=True)
    unpacked = merge(
        packed, {"spec": spec, "metadata": {"annotations": {"muster.io/packed-node": None}}}
    )
    assert selectors(unpacked)[0] == {}
    assert evaluate(SCOPE, request("UPDATE", unpacked, packed, user=CONTROL_PLANE)).allowed
    # AND a tenant may not do it
    assert not update(old, packed, TENANT).allowed
