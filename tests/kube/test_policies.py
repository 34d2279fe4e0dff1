"""The shipped admission policies, evaluated on admission requests built as the API
server builds them: every bypass a tenant could try is refused, every legitimate
change passes, and objects Muster does not manage are left alone.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("celpy")

from tests.kube.admission import (
    CONTROL_PLANE,
    JOB_CONTROLLER,
    JOBSET_CONTROLLER,
    ROOT,
    TENANT,
    admitted_by_all,
    bindings,
    compile_all,
    evaluate,
    policies,
    request,
    shipped_params,
)

NS = "team-a"


def job(
    *,
    suspend: bool = True,
    queue: str | None = "default",
    annotations: dict[str, str] | None = None,
    owner: str | None = None,
    namespace: str = NS,
    priority_class: str | None = None,
) -> dict[str, Any]:
    labels = {"app": "trainer"} | ({"muster.io/queue": queue} if queue else {})
    meta: dict[str, Any] = {"name": "llama", "namespace": namespace, "labels": labels}
    if annotations is not None:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": owner,
                "name": "pretrain",
                "uid": "0d7f2a8e-0000-4000-8000-000000000001",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": "registry.example/trainer:1"}],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "suspend": suspend,
            "parallelism": 4,
            "completions": 4,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": pod_spec},
        },
    }


def jobset(*, suspend: bool = True, priority_class: str | None = None) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "w", "image": "registry.example/w:1"}]}
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pretrain", "namespace": NS, "labels": {"muster.io/queue": "default"}},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 4, "template": {"spec": pod_spec}}},
                }
            ],
        },
    }


def pytorchjob(*, suspend: bool = True) -> dict[str, Any]:
    replica = {
        "replicas": 1,
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "r.example/p:1"}]}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": NS, "labels": {"muster.io/queue": "default"}},
        "spec": {
            "runPolicy": {"suspend": suspend},
            "pytorchReplicaSpecs": {"Master": replica, "Worker": copy.deepcopy(replica)},
        },
    }


def pod(
    *,
    gates: tuple[str, ...] = ("muster.io/admission",),
    group: str | None = "ddp-smoke",
    queue: str | None = "default",
    image: str = "registry.example/w:1",
    namespace: str = NS,
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if group:
        labels["muster.io/pod-group"] = group
    if queue:
        labels["muster.io/queue"] = queue
    spec: dict[str, Any] = {"containers": [{"name": "w", "image": image}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "ddp-smoke-0",
            "namespace": namespace,
            "labels": labels,
            "annotations": {"muster.io/min-available": "2"},
        },
        "spec": spec,
    }


def changed(obj: dict[str, Any], **paths: Any) -> dict[str, Any]:
    """A copy with dotted paths set (double underscores stand for dots in keys)."""
    out = copy.deepcopy(obj)
    for dotted, value in paths.items():
        keys = dotted.split("__")
        target = out
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        if value is None:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = value
    return out


def with_label(obj: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    labels = out["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    return out


def with_annotation(obj: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    annotations = out["metadata"].setdefault("annotations", {})
    if value is None:
        annotations.pop(key, None)
    else:
        annotations[key] = value
    return out


def update(old: dict[str, Any], new: dict[str, Any], user: dict[str, Any] = TENANT) -> Any:
    return admitted_by_all(request("UPDATE", new, old, user=user))


def restricted(**queues: dict[str, str]) -> dict[str, Any]:
    params = copy.deepcopy(shipped_params())
    params["data"]["restrictQueues"] = "true"
    for queue, keys in queues.items():
        for key, value in keys.items():
            params["data"][f"queue.{queue}.{key}"] = value
    return params


# --------------------------------------------------------------------------- shape


def test_every_expression_parses_and_every_policy_is_bound_to_deny() -> None:
    assert compile_all() > 40
    assert set(policies()) == {
        "muster-created-held",
        "muster-held-after-creation",
        "muster-queue-access",
        "muster-controlplane-scope",
    }
    for name, binding in bindings().items():
        assert binding["spec"]["validationActions"] == ["Deny"], name
        if "paramKind" in policies()[name]["spec"]:
            assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"


# --------------------------------------------------------------------------- bypasses


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(job(), job(suspend=False), id="job-unsuspended"),
        pytest.param(jobset(), jobset(suspend=False), id="jobset-unsuspended"),
        pytest.param(pytorchjob(), pytorchjob(suspend=False), id="pytorchjob-unsuspended"),
        pytest.param(job(suspend=False), job(suspend=True), id="job-suspended-by-hand"),
    ],
)
def test_a_tenant_cannot_move_the_suspend_flag(old: dict[str, Any], new: dict[str, Any]) -> None:
    verdict = update(old, new)
    assert verdict.matched and not verdict.allowed
    assert any("suspend flag" in d for d in verdict.denials)


def test_a_tenant_cannot_remove_the_scheduling_gate() -> None:
    verdict = update(pod(), pod(gates=()))
    assert any("scheduling gate" in d for d in verdict.denials)


def test_a_tenant_cannot_remove_the_gate_while_keeping_another() -> None:
    verdict = update(pod(gates=("muster.io/admission", "other")), pod(gates=("other",)))
    assert any("scheduling gate" in d for d in verdict.denials)


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(job(queue=None), id="label-removed"),
        pytest.param(job(queue="premium"), id="queue-changed"),
    ],
)
def test_a_workload_cannot_leave_muster_or_change_queue(new: dict[str, Any]) -> None:
    verdict = update(job(), new)
    assert any("muster.io/queue is fixed" in d for d in verdict.denials)


def test_a_held_workload_leaving_muster_and_starting_in_one_edit_is_refused() -> None:
    verdict = update(job(), job(queue=None, suspend=False))
    assert len(verdict.denials) == 2


def test_an_unmanaged_job_cannot_join_a_queue_after_creation() -> None:
    verdict = update(job(queue=None, suspend=False), job(suspend=False))
    assert any("muster.io/queue is fixed" in d for d in verdict.denials)


def test_a_pod_cannot_leave_its_pod_group() -> None:
    verdict = update(pod(), with_label(pod(), "muster.io/pod-group", None))
    assert any("muster.io/pod-group is fixed" in d for d in verdict.denials)


@pytest.mark.parametrize(
    ("key", "before", "after"),
    [
        pytest.param("muster.io/admitted-attempt", "3", "999999", id="forged-fencing-mark"),
        pytest.param("muster.io/evicted-attempt", None, "1", id="added-eviction-mark"),
        pytest.param("muster.io/phase", "Requeued", None, id="view-removed"),
        pytest.param("muster.io/priority", "10", "1000", id="priority-raised"),
        pytest.param("muster.io/timeout", None, "24h", id="timeout-added"),
        pytest.param("muster.io/min-available", "4", "1", id="gang-shrunk"),
    ],
)
def test_a_tenant_cannot_write_muster_annotations(
    key: str, before: str | None, after: str | None
) -> None:
    old = with_annotation(job(suspend=False), key, before)
    verdict = update(old, with_annotation(old, key, after))
    assert any("muster.io/* annotations are Muster's" in d for d in verdict.denials)


def test_a_tenant_cannot_forge_annotations_on_pod_group_pods() -> None:
    old = with_annotation(pod(gates=()), "muster.io/admitted-attempt", "2")
    verdict = update(old, with_annotation(old, "muster.io/admitted-attempt", "999999"))
    assert any("muster.io/* annotations" in d for d in verdict.denials)


def test_a_fake_jobset_owner_does_not_exempt_creation_unsuspended() -> None:
    verdict = admitted_by_all(request("CREATE", job(suspend=False, owner="JobSet")))
    assert any("created with spec.suspend: true" in d for d in verdict.denials)


def test_a_fake_jobset_owner_does_not_let_a_tenant_unsuspend() -> None:
    verdict = update(job(owner="JobSet"), job(owner="JobSet", suspend=False))
    assert any("suspend flag" in d for d in verdict.denials)


def test_a_controller_identity_without_an_owner_is_not_exempt() -> None:
    verdict = admitted_by_all(request("CREATE", job(suspend=False), user=JOBSET_CONTROLLER))
    assert not verdict.allowed


def test_priority_classes_are_fixed_after_creation() -> None:
    verdict = update(jobset(), jobset(priority_class="system-cluster-critical"))
    assert any("priority class" in d for d in verdict.denials)


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(job(suspend=False), id="job"),
        pytest.param(jobset(suspend=False), id="jobset"),
        pytest.param(pytorchjob(suspend=False), id="pytorchjob"),
        pytest.param(pod(gates=()), id="pod-without-gate"),
        pytest.param(changed(pod(), metadata__annotations={}), id="pod-without-gang-size"),
    ],
)
def test_workloads_must_be_created_held(obj: dict[str, Any]) -> None:
    assert not admitted_by_all(request("CREATE", obj)).allowed


# --------------------------------------------------------------------------- queues


def test_a_queue_not_open_to_the_namespace_is_refused_with_its_name() -> None:
    params = restricted(premium={"namespaces": "team-b"}, default={"namespaces": "*"})
    verdict = admitted_by_all(request("CREATE", job(queue="premium")), params)
    assert verdict.denials == ["queue premium is not open to namespace team-a"]


def test_a_queue_nobody_configured_is_refused_when_queues_are_restricted() -> None:
    verdict = admitted_by_all(request("CREATE", job(queue="secret")), restricted())
    assert verdict.denials == ["queue secret is not open to namespace team-a"]


def test_a_queue_open_to_the_namespace_is_accepted() -> None:
    params = restricted(premium={"namespaces": "team-b,team-a", "maxPriority": "100"})
    obj = job(queue="premium", annotations={"muster.io/priority": "100"})
    assert admitted_by_all(request("CREATE", obj), params).allowed


def test_priority_above_the_queue_bound_is_refused() -> None:
    params = restricted(default={"namespaces": "*", "maxPriority": "10"})
    obj = job(annotations={"muster.io/priority": "11"})
    verdict = admitted_by_all(request("CREATE", obj), params)
    assert verdict.denials == ["muster.io/priority on queue default may be at most 10"]


def test_priority_is_bounded_at_zero_when_the_queue_names_no_bound() -> None:
    params = restricted(default={"namespaces": "*"})
    obj = job(annotations={"muster.io/priority": "1"})
    assert not admitted_by_all(request("CREATE", obj), params).allowed


def test_a_priority_that_is_not_a_number_is_refused() -> None:
    obj = job(annotations={"muster.io/priority": "urgent"})
    assert admitted_by_all(request("CREATE", obj)).denials == [
        "muster.io/priority must be a whole number"
    ]


def test_priority_classes_not_allowed_on_the_queue_are_refused() -> None:
    params = restricted(default={"namespaces": "*", "priorityClasses": "batch-low,batch-high"})
    assert admitted_by_all(request("CREATE", job(priority_class="batch-high")), params).allowed
    verdict = admitted_by_all(request("CREATE", jobset(priority_class="critical")), params)
    assert verdict.denials == [
        "queue default allows only the priority classes batch-low,batch-high"
    ]


def test_pod_group_pods_are_checked_against_the_queue() -> None:
    params = restricted(default={"namespaces": "team-b"})
    assert not admitted_by_all(request("CREATE", pod()), params).allowed


def test_without_restriction_every_queue_and_priority_is_open() -> None:
    obj = job(queue="anything", annotations={"muster.io/priority": "1000000"})
    assert admitted_by_all(request("CREATE", obj)).allowed


# --------------------------------------------------------------------------- legitimate


def test_the_control_plane_unsuspends_and_records_its_view() -> None:
    old = job()
    new = with_annotation(job(suspend=False), "muster.io/admitted-attempt", "1")
    new = with_annotation(new, "muster.io/phase", "Admitted")
    verdict = update(old, new, CONTROL_PLANE)
    assert verdict.allowed
    assert evaluate(
        "muster-controlplane-scope", request("UPDATE", new, old, user=CONTROL_PLANE)
    ).matched


def test_the_control_plane_suspends_every_kind() -> None:
    for held, running in [(job(), job(suspend=False)), (jobset(), jobset(suspend=False))]:
        assert update(running, held, CONTROL_PLANE).allowed
    assert update(pytorchjob(suspend=False), pytorchjob(), CONTROL_PLANE).allowed


def test_the_control_plane_removes_only_its_gate() -> None:
    old = pod(gates=("muster.io/admission", "other.io/gate"))
    assert update(old, pod(gates=("other.io/gate",)), CONTROL_PLANE).allowed
    assert not update(old, pod(gates=()), CONTROL_PLANE).allowed


def test_the_control_plane_deletes_pod_group_pods_and_records_events() -> None:
    assert admitted_by_all(request("DELETE", None, pod(gates=()), user=CONTROL_PLANE)).allowed
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "llama.1", "namespace": NS},
        "involvedObject": {"kind": "Job", "name": "llama", "namespace": NS},
        "reason": "EvictedDueToPodsReadyTimeout",
    }
    assert admitted_by_all(request("CREATE", event, user=CONTROL_PLANE)).allowed


def test_the_job_controller_creates_and_updates_a_jobs_pods() -> None:
    job_pod = pod(group=None, gates=())  # a Job's pod: the template's queue label, no group
    job_pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "llama"
    assert admitted_by_all(request("CREATE", job_pod, user=JOB_CONTROLLER)).allowed
    finalized = changed(job_pod, metadata__finalizers=["batch.kubernetes.io/job-tracking"])
    assert update(finalized, job_pod, JOB_CONTROLLER).allowed


def test_the_jobset_controller_creates_and_releases_its_jobs() -> None:
    child = job(suspend=False, owner="JobSet")
    assert admitted_by_all(request("CREATE", child, user=JOBSET_CONTROLLER)).allowed
    assert update(job(owner="JobSet"), child, JOBSET_CONTROLLER).allowed


def test_owner_controllers_are_configurable() -> None:
    params = copy.deepcopy(shipped_params())
    params["data"]["ownerControllers"] = "system:serviceaccount:ops:my-jobset"
    child = job(suspend=False, owner="JobSet")
    assert not admitted_by_all(request("CREATE", child, user=JOBSET_CONTROLLER), params).allowed
    ours = {"username": "system:serviceaccount:ops:my-jobset", "groups": []}
    assert admitted_by_all(request("CREATE", child, user=ours), params).allowed


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(with_label(job(), "team", "vision"), id="own-label"),
        pytest.param(with_annotation(job(), "owner", "alice"), id="own-annotation"),
        pytest.param(changed(job(), spec__parallelism=8), id="parallelism"),
        pytest.param(changed(job(), spec__activeDeadlineSeconds=3600), id="deadline"),
    ],
)
def test_a_tenant_edits_what_muster_does_not_own(new: dict[str, Any]) -> None:
    assert update(job(), new).allowed


def test_a_tenant_creates_a_held_workload_of_every_kind() -> None:
    for obj in (job(), jobset(), pytorchjob(), pod()):
        verdict = admitted_by_all(request("CREATE", obj))
        assert verdict.matched and verdict.allowed, obj["kind"]


# --------------------------------------------------------------------------- unmanaged


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(job(queue=None), job(queue=None, suspend=False), id="job-unsuspended"),
        pytest.param(
            pod(group=None, queue=None), pod(group=None, queue=None, gates=()), id="pod-ungated"
        ),
    ],
)
def test_tenants_objects_outside_muster_are_not_matched(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    verdict = update(old, new)
    assert not verdict.matched and verdict.allowed


def test_unmanaged_objects_created_running_are_not_matched() -> None:
    verdict = admitted_by_all(request("CREATE", job(queue=None, suspend=False)))
    assert not verdict.matched


# --------------------------------------------------------------------------- control plane scope


@pytest.mark.parametrize(
    "review",
    [
        pytest.param(
            request("UPDATE", job(queue=None, suspend=False), job(queue=None), user=CONTROL_PLANE),
            id="unmanaged-job",
        ),
        pytest.param(
            request("DELETE", None, pod(group=None, queue=None), user=CONTROL_PLANE),
            id="unmanaged-pod-deleted",
        ),
        pytest.param(
            request("UPDATE", pod(image="evil.example/miner:1"), pod(), user=CONTROL_PLANE),
            id="pod-image",
        ),
        pytest.param(
            request(
                "UPDATE",
                changed(job(), spec__template__spec__containers=[{"name": "x", "image": "evil"}]),
                job(),
                user=CONTROL_PLANE,
            ),
            id="job-template",
        ),
        pytest.param(
            request("UPDATE", changed(job(), spec__parallelism=64), job(), user=CONTROL_PLANE),
            id="job-parallelism",
        ),
        pytest.param(
            request("UPDATE", jobset(priority_class="x"), jobset(), user=CONTROL_PLANE),
            id="jobset-replicas",
        ),
        pytest.param(
            request(
                "UPDATE", with_label(job(), "muster.io/queue", None), job(), user=CONTROL_PLANE
            ),
            id="queue-label",
        ),
        pytest.param(
            request("UPDATE", with_annotation(job(), "note", "x"), job(), user=CONTROL_PLANE),
            id="foreign-annotation",
        ),
        pytest.param(
            request(
                "UPDATE", changed(job(), metadata__finalizers=["x/y"]), job(), user=CONTROL_PLANE
            ),
            id="finalizer",
        ),
        pytest.param(
            request("UPDATE", job(suspend=False), job(), user=CONTROL_PLANE, sub_resource="status"),
            id="status-subresource",
        ),
        pytest.param(request("CREATE", pod(), user=CONTROL_PLANE), id="creates-a-pod"),
        pytest.param(request("DELETE", None, job(), user=CONTROL_PLANE), id="deletes-a-job"),
        pytest.param(
            request("DELETE", None, pod(gates=(), namespace="kube-system"), user=CONTROL_PLANE),
            id="kube-system-pod",
        ),
        pytest.param(
            request(
                "UPDATE",
                job(suspend=False, namespace="kube-system"),
                job(namespace="kube-system"),
                user=CONTROL_PLANE,
            ),
            id="kube-system-job",
        ),
        pytest.param(
            request(
                "UPDATE",
                {"kind": "ConfigMap", "metadata": {"name": "aws-auth", "namespace": "kube-system"}},
                {"kind": "ConfigMap", "metadata": {"name": "aws-auth", "namespace": "kube-system"}},
                user=CONTROL_PLANE,
            ),
            id="aws-auth",
        ),
    ],
)
def test_the_control_plane_is_refused_outside_its_scope(review: dict[str, Any]) -> None:
    verdict = evaluate("muster-controlplane-scope", review)
    assert verdict.matched and not verdict.allowed, verdict


def test_the_scope_policy_leaves_everyone_else_alone() -> None:
    review = request("UPDATE", pod(image="registry.example/w:2"), pod(), user=TENANT)
    assert not evaluate("muster-controlplane-scope", review).matched


def test_the_install_page_says_what_each_policy_enforces() -> None:
    readme = (ROOT / "docs" / "install.md").read_text()
    for name in policies():
        assert f"`{name}`" in readme, name


# --------------------------------------------------------------------------- params from settings


def test_the_shipped_params_are_those_rendered_from_default_settings() -> None:
    from muster.core.settings import DEFAULT_SETTINGS
    from muster.kube.policy_params import render

    assert render(DEFAULT_SETTINGS) == shipped_params()


@pytest.mark.parametrize(
    ("namespace", "queue", "priority"),
    [
        ("team-a", "premium", 0),
        ("team-a", "premium", 100),
        ("team-a", "premium", 101),
        ("team-b", "premium", 0),
        ("team-b", "default", 0),
        ("team-b", "default", 1),
        ("team-b", "unlisted", 0),
    ],
)
def test_the_policy_and_the_core_refuse_the_same_workloads(
    namespace: str, queue: str, priority: int
) -> None:
    from muster.core import parse_settings
    from muster.kube.policy_params import render

    settings = parse_settings(
        {
            "queueAccess": {
                "restrict": True,
                "queues": {
                    "premium": {"namespaces": ["team-a", "team-c"], "maxPriority": 100},
                    "default": {"namespaces": ["*"]},
                },
            }
        }
    )
    obj = job(namespace=namespace, queue=queue, annotations={"muster.io/priority": str(priority)})
    policy_allows = admitted_by_all(request("CREATE", obj), render(settings)).allowed
    core_allows = settings.access.refusal(queue, f"{namespace}/llama", priority) is None
    assert policy_allows == core_allows


def test_policy_params_command_prints_the_configmap(tmp_path: Any, capsys: Any) -> None:
    import yaml
    from muster.cli import main

    path = tmp_path / "settings.yaml"
    path.write_text("queueAccess: {restrict: true, queues: {gpu: {namespaces: [ml]}}}\n")
    assert main(["policy-params", "--settings", str(path)]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["data"]["queue.gpu.namespaces"] == "ml"
    assert doc["data"]["restrictQueues"] == "true"
    path.write_text("queueAccess: {restrict: maybe}\n")
    assert main(["policy-params", "--settings", str(path)]) == 2
    assert "queueAccess.restrict" in capsys.readouterr().err
