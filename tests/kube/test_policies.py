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
    scale_request,
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
    """Params that restrict queues, naming exactly `queues` (as `render` does)."""
    params = copy.deepcopy(shipped_params())
    params["data"]["restrictQueues"] = "true"
    params["data"]["queues"] = ",".join(sorted(queues))
    for queue, keys in queues.items():
        for key, value in keys.items():
            params["data"][f"queue.{queue}.{key}"] = value
    return params


def with_params(**data: str | None) -> dict[str, Any]:
    """The shipped params with keys set (None removes one)."""
    params = copy.deepcopy(shipped_params())
    for key, value in data.items():
        if value is None:
            params["data"].pop(key, None)
        else:
            params["data"][key] = value
    return params


# --------------------------------------------------------------------------- shape


def test_every_expression_parses_and_every_policy_is_bound_to_deny() -> None:
    assert compile_all() > 40
    assert set(policies()) == {
        "muster-created-held",
        "muster-held-after-creation",
        "muster-queue-access",
        "muster-workload-bounds",
        "muster-no-orphaning",
        "muster-no-scale-up",
        "muster-pods-stay-owned",
        "muster-gpu-requires-queue",
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


@pytest.mark.parametrize("queue", ["secret", "Default", "default-x"])
def test_a_queue_no_setting_names_is_refused_as_unknown(queue: str) -> None:
    # GIVEN queues restricted, with only `default` and `premium` named
    params = restricted(default={"namespaces": "*"}, premium={"namespaces": "team-a"})
    # WHEN a workload names another queue (another spelling of a real one too)
    verdict = admitted_by_all(request("CREATE", job(queue=queue)), params)
    # THEN it is refused as unknown, and told which queues there are
    assert verdict.denials == [
        f"queue {queue} is not a Muster queue (the queues are default,premium)"
    ]


NO_QUEUE = (
    "queue default is not a Muster queue: no queue is configured (queueAccess in Muster's settings)"
)


def test_with_no_queue_configured_every_queue_is_refused_when_restricted() -> None:
    verdict = admitted_by_all(request("CREATE", job()), restricted())
    assert verdict.denials == [NO_QUEUE]


def test_a_named_queue_without_a_grant_is_open_to_no_namespace() -> None:
    params = restricted(default={"namespaces": "*"})
    params["data"]["queues"] = "default,spot"  # spot has settings of its own, no grant
    verdict = admitted_by_all(request("CREATE", job(queue="spot")), params)
    assert verdict.denials == ["queue spot is not open to namespace team-a"]


def test_params_without_the_restriction_key_restrict() -> None:
    # A hand-written ConfigMap that leaves restrictQueues out is not an open door.
    params = with_params(restrictQueues=None, queues="default")
    verdict = admitted_by_all(request("CREATE", job()), params)
    assert verdict.denials == ["queue default is not open to namespace team-a"]


def test_params_without_a_queue_list_know_no_queue() -> None:
    verdict = admitted_by_all(request("CREATE", job()), with_params(queues=None))
    assert verdict.denials == [NO_QUEUE]


def test_an_open_configuration_still_refuses_queues_it_does_not_name() -> None:
    # GIVEN queues open to every namespace, but the settings name `spot` (its own quota)
    params = with_params(restrictQueues="false", queues="spot")
    # THEN `spot` is open at any priority, and a made-up name cannot escape its quota
    obj = job(queue="spot", annotations={"muster.io/priority": "999999999"})
    assert admitted_by_all(request("CREATE", obj), params).allowed
    verdict = admitted_by_all(request("CREATE", job(queue="made-up")), params)
    assert verdict.denials == ["queue made-up is not a Muster queue (the queues are spot)"]


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
    verdict = admitted_by_all(request("CREATE", obj), params)
    assert verdict.denials == ["muster.io/priority on queue default may be at most 0"]


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


@pytest.mark.parametrize(
    ("klass", "value"),
    [("system-node-critical", 2000001000), ("system-cluster-critical", 2000000000)],
)
def test_a_system_class_above_the_queue_bound_is_refused(klass: str, value: int) -> None:
    # GIVEN a restricted queue with maxPriority 0 and no class list
    params = restricted(default={"namespaces": "*", "maxPriority": "0"})
    # WHEN a workload runs its pods at a system class
    verdict = admitted_by_all(request("CREATE", job(priority_class=klass)), params)
    # THEN the class's value is bounded like the annotation
    assert verdict.denials == [
        f"PriorityClass {klass} (priority {value}) is above queue default's bound 0"
    ]


def test_a_system_class_passes_where_the_queue_allows_it() -> None:
    listed = restricted(default={"namespaces": "*", "priorityClasses": "system-node-critical"})
    high = restricted(default={"namespaces": "*", "maxPriority": "2000001000"})
    for params in (listed, high):
        review = request("CREATE", jobset(priority_class="system-node-critical"))
        assert admitted_by_all(review, params).allowed


def test_pod_group_pods_are_checked_against_the_queue() -> None:
    params = restricted(default={"namespaces": "team-b"})
    verdict = admitted_by_all(request("CREATE", pod()), params)
    assert verdict.denials == ["queue default is not open to namespace team-a"]


def test_the_default_params_open_every_queue_and_priority() -> None:
    # The default settings name no queue and do not restrict: nothing to escape.
    obj = job(queue="anything", annotations={"muster.io/priority": "1000000"})
    assert admitted_by_all(request("CREATE", obj)).allowed


# --------------------------------------------------------------------------- growth

GROWTH = (
    "a workload Muster has released cannot grow: parallelism, completions and replicas "
    "may go down but not up while it is not suspended (its GPUs were counted at admission)"
)


def jobset_with(*, suspend: bool = True, replicas: int = 2, parallelism: int = 4) -> Any:
    out = jobset(suspend=suspend)
    out["spec"]["replicatedJobs"][0]["replicas"] = replicas
    out["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = parallelism
    return out


def pytorchjob_with(*, suspend: bool = True, workers: int | None = 1, **more: int) -> Any:
    out = pytorchjob(suspend=suspend)
    specs = out["spec"]["pytorchReplicaSpecs"]
    if workers is None:
        specs["Worker"].pop("replicas")
    else:
        specs["Worker"]["replicas"] = workers
    for kind, replicas in more.items():
        specs[kind] = copy.deepcopy(specs["Worker"]) | {"replicas": replicas}
    return out


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(
            job(suspend=False),
            changed(job(suspend=False), spec__parallelism=64),
            id="job-parallelism",
        ),
        pytest.param(
            job(suspend=False),
            changed(job(suspend=False), spec__completions=64),
            id="job-completions",
        ),
        pytest.param(
            changed(job(suspend=False), spec__completions=1, spec__parallelism=8),
            changed(job(suspend=False), spec__completions=None, spec__parallelism=8),
            id="job-completions-unset",
        ),
        pytest.param(
            jobset_with(suspend=False), jobset_with(suspend=False, replicas=3), id="jobset-replicas"
        ),
        pytest.param(
            jobset_with(suspend=False),
            jobset_with(suspend=False, parallelism=5),
            id="jobset-parallelism",
        ),
        pytest.param(
            pytorchjob_with(suspend=False),
            pytorchjob_with(suspend=False, workers=63),
            id="pytorchjob-workers",
        ),
        pytest.param(
            pytorchjob_with(suspend=False, workers=None),
            pytorchjob_with(suspend=False, workers=2),
            id="pytorchjob-workers-unset",
        ),
    ],
)
def test_a_released_workload_cannot_grow(old: Any, new: Any) -> None:
    verdict = update(old, new)
    assert verdict.denials == [GROWTH]


def test_a_running_workload_cannot_add_a_replicated_job_or_replica_type() -> None:
    old = jobset_with(suspend=False)
    new = copy.deepcopy(old)
    extra = copy.deepcopy(new["spec"]["replicatedJobs"][0]) | {"name": "more"}
    new["spec"]["replicatedJobs"].append(extra)
    # (the list of the templates' priority classes grows too)
    assert GROWTH in update(old, new).denials
    old = pytorchjob_with(suspend=False)
    assert GROWTH in update(old, pytorchjob_with(suspend=False, Evaluator=1)).denials


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(
            job(suspend=False), changed(job(suspend=False), spec__parallelism=2), id="job-shrinks"
        ),
        pytest.param(
            jobset_with(suspend=False), jobset_with(suspend=False, replicas=1), id="jobset-shrinks"
        ),
        pytest.param(
            pytorchjob_with(suspend=False, workers=4),
            pytorchjob_with(suspend=False, workers=2),
            id="pytorchjob-shrinks",
        ),
        pytest.param(
            pytorchjob_with(workers=1), pytorchjob_with(workers=8), id="suspended-pytorchjob-grows"
        ),
        pytest.param(jobset_with(), jobset_with(replicas=8), id="suspended-jobset-grows"),
    ],
)
def test_a_workload_may_shrink_or_grow_while_suspended(old: Any, new: Any) -> None:
    assert update(old, new).allowed


def test_an_unmanaged_job_grows_as_it_likes() -> None:
    old = job(queue=None, suspend=False)
    assert update(old, changed(old, spec__parallelism=64)).allowed


SCALE_UP = (
    "scaling up through /scale is refused, as the policy cannot see there whether Muster "
    "manages the workload: edit its spec instead"
)


def test_scaling_a_pytorchjob_up_through_its_scale_subresource_is_refused() -> None:
    # GIVEN a running PyTorchJob with one worker
    running = pytorchjob_with(suspend=False)
    # WHEN a tenant runs `kubectl scale pytorchjob ddp --replicas=63`
    verdict = admitted_by_all(scale_request(running, 1, 63))
    # THEN the only policy that sees it refuses, and shrinking passes
    assert verdict.denials == [SCALE_UP]
    assert admitted_by_all(scale_request(pytorchjob_with(workers=4), 4, 2)).allowed


# --------------------------------------------------------------------------- bounds


def pods_message(asked: int | None) -> str:
    tail = f" (this one asks for {asked})" if asked is not None else ""
    return f"a workload Muster manages may run at most 4096 pods at once{tail}"


@pytest.mark.parametrize(
    ("obj", "asked"),
    [
        pytest.param(
            changed(job(), spec__parallelism=2147483647, spec__completions=None),
            None,
            id="job-int32",
        ),
        pytest.param(
            changed(job(), spec__parallelism=4097, spec__completions=5000), 4097, id="job-4097"
        ),
        pytest.param(
            changed(job(), spec__parallelism=1000001, spec__completions=None),
            None,
            id="job-beyond-counting",
        ),
        pytest.param(jobset_with(replicas=2, parallelism=2049), 4098, id="jobset-product"),
        pytest.param(
            jobset_with(replicas=2147483647, parallelism=2147483647), None, id="jobset-overflow"
        ),
        pytest.param(pytorchjob_with(workers=4096), 4097, id="pytorchjob-sum"),
        pytest.param(
            with_annotation(pod(), "muster.io/min-available", "99999999999"),
            None,
            id="pod-group-gang",
        ),
    ],
)
def test_a_workload_asking_for_too_many_pods_is_refused(obj: Any, asked: int | None) -> None:
    verdict = admitted_by_all(request("CREATE", obj))
    assert verdict.denials == [pods_message(asked)]


def test_the_largest_gang_passes_and_completions_beyond_it_are_fine() -> None:
    for obj in (
        changed(job(), spec__parallelism=4096, spec__completions=100000),
        jobset_with(replicas=512, parallelism=8),
        pytorchjob_with(workers=4095),
    ):
        assert admitted_by_all(request("CREATE", obj)).allowed, obj["kind"]


def test_a_held_workload_cannot_be_grown_past_the_bound_either() -> None:
    verdict = update(job(), changed(job(), spec__parallelism=100000, spec__completions=None))
    assert verdict.denials == [pods_message(100000)]


def test_an_edit_of_a_workload_already_over_the_bound_passes_if_it_does_not_grow() -> None:
    old = changed(job(), spec__parallelism=10000, spec__completions=10000)
    assert update(old, with_label(old, "team", "vision")).allowed
    assert not update(old, changed(old, spec__parallelism=10001, spec__completions=10001)).allowed


def test_the_pod_bound_is_a_param() -> None:
    params = with_params(maxPods="8")
    verdict = admitted_by_all(request("CREATE", jobset_with(replicas=2, parallelism=5)), params)
    assert verdict.denials == [
        "a workload Muster manages may run at most 8 pods at once (this one asks for 10)"
    ]


def annotation_bytes(obj: Any) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in obj["metadata"]["annotations"].items())


def annotations_message(size: int) -> str:
    return (
        "the annotations of a workload Muster manages may take at most 131072 bytes in all "
        f"(these take {size}), so that Muster's own always fit"
    )


def test_annotation_padding_is_refused_at_creation_in_bytes() -> None:
    # GIVEN padding of 40,000 four-byte characters: 160,000 bytes, 40,000 characters
    padded = with_annotation(job(), "pad", "\U0001f600" * 40000)
    verdict = admitted_by_all(request("CREATE", padded))
    assert verdict.denials == [annotations_message(3 + 160000)]
    # AND just under the bound passes
    fits = with_annotation(job(), "pad", "x" * (131072 - 3))
    assert admitted_by_all(request("CREATE", fits)).allowed


def test_annotation_padding_added_later_is_refused_on_every_kind() -> None:
    for obj in (job(suspend=False), jobset(), pytorchjob(suspend=False), pod(gates=())):
        padded = with_annotation(obj, "pad", "x" * 200000)
        verdict = update(obj, padded)
        assert verdict.denials == [annotations_message(annotation_bytes(padded))], obj["kind"]


def test_muster_still_writes_onto_an_object_padded_before_the_bound() -> None:
    # An object padded before the policy existed: the tenant may only shrink it, and
    # the control plane's eviction marks are not this policy's business.
    old = with_annotation(job(suspend=False), "pad", "x" * 200000)
    assert update(old, with_annotation(old, "pad", "x" * 100)).allowed
    assert not update(old, with_annotation(old, "more", "y")).allowed
    marked = with_annotation(job(), "pad", "x" * 200000)
    marked = with_annotation(marked, "muster.io/evicted-attempt", "1")
    assert update(old, marked, CONTROL_PLANE).allowed


def test_the_jobset_controllers_jobs_carry_what_their_jobset_was_allowed() -> None:
    # A child Job gets its JobSet's annotations and the controller's own on top.
    child = with_annotation(job(suspend=False, owner="JobSet"), "pad", "x" * 131072)
    assert admitted_by_all(request("CREATE", child, user=JOBSET_CONTROLLER)).allowed
    assert not admitted_by_all(request("CREATE", child)).allowed


# --------------------------------------------------------------------------- orphaning

ORPHANING = (
    "a workload Muster manages is deleted only with its pods: delete it with "
    "propagationPolicy Background or Foreground (kubectl delete's default cascade), not Orphan"
)


def delete(obj: Any, **options: Any) -> Any:
    return admitted_by_all(request("DELETE", None, obj, options=options))


@pytest.mark.parametrize(
    ("obj", "options"),
    [
        pytest.param(job(suspend=False), {"propagationPolicy": "Orphan"}, id="cascade-orphan"),
        pytest.param(jobset(suspend=False), {"propagationPolicy": "Orphan"}, id="jobset-orphan"),
        pytest.param(pytorchjob(suspend=False), {"orphanDependents": True}, id="orphan-dependents"),
        pytest.param(job(suspend=False), {}, id="job-through-the-api-without-a-policy"),
        pytest.param(
            changed(jobset(suspend=False), metadata__finalizers=["orphan"]),
            {},
            id="orphan-finalizer",
        ),
    ],
)
def test_an_orphaning_delete_of_a_managed_workload_is_refused(obj: Any, options: Any) -> None:
    assert delete(obj, **options).denials == [ORPHANING]


@pytest.mark.parametrize(
    ("obj", "options"),
    [
        pytest.param(job(suspend=False), {"propagationPolicy": "Background"}, id="kubectl-delete"),
        pytest.param(job(), {"propagationPolicy": "Foreground"}, id="foreground"),
        pytest.param(job(), {"orphanDependents": False}, id="orphan-dependents-false"),
        pytest.param(jobset(suspend=False), {}, id="custom-resource-defaults-to-background"),
        pytest.param(
            changed(pytorchjob(), metadata__finalizers=["orphan"]),
            {"propagationPolicy": "Background"},
            id="explicit-policy-wins",
        ),
        pytest.param(
            job(queue=None, suspend=False), {"propagationPolicy": "Orphan"}, id="unmanaged"
        ),
    ],
)
def test_deletes_that_take_the_pods_along_pass(obj: Any, options: Any) -> None:
    assert delete(obj, **options).allowed


# --------------------------------------------------------------------------- pods stay owned

DETACHED = (
    "a pod of a Job or PyTorchJob keeps its controller's owner reference and the labels it "
    "is selected by: without them its controller starts another pod in its place"
)
GC = {"username": "system:serviceaccount:kube-system:generic-garbage-collector", "groups": []}


def job_pod() -> Any:
    """A running pod of the Job `llama`, as the Job controller creates it."""
    out = pod(group=None, queue=None, gates=())
    out["metadata"]["labels"] |= {
        "batch.kubernetes.io/controller-uid": "0d7f2a8e-0000-4000-8000-000000000009",
        "controller-uid": "0d7f2a8e-0000-4000-8000-000000000009",
        "batch.kubernetes.io/job-name": "llama",
        "job-name": "llama",
    }
    out["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "llama",
            "uid": "0d7f2a8e-0000-4000-8000-000000000009",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return out


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(
            with_label(job_pod(), "batch.kubernetes.io/controller-uid", None),
            id="selector-label-removed",
        ),
        pytest.param(with_label(job_pod(), "controller-uid", "other"), id="legacy-label-changed"),
        pytest.param(changed(job_pod(), metadata__ownerReferences=[]), id="owner-removed"),
    ],
)
def test_a_tenant_cannot_detach_a_pod_from_its_job(new: Any) -> None:
    # (the Job controller would release it and start a replacement: one pod more)
    assert update(job_pod(), new).denials == [DETACHED]


def test_pods_may_be_edited_otherwise_and_released_by_their_controllers() -> None:
    assert update(job_pod(), with_label(job_pod(), "debug", "yes")).allowed
    released = changed(job_pod(), metadata__ownerReferences=[])
    assert update(job_pod(), released, JOB_CONTROLLER).allowed
    assert update(job_pod(), released, GC).allowed  # an unmanaged Job deleted with Orphan
    bare = pod(group=None, queue=None, gates=())
    assert not evaluate("muster-pods-stay-owned", request("UPDATE", bare, bare)).matched


# --------------------------------------------------------------------------- control plane: spec


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("elasticPolicy", {"minReplicas": 1, "maxReplicas": 64}),
        ("nprocPerNode", "8"),
        ("runPolicy", {"suspend": False, "cleanPodPolicy": "None"}),
        ("runPolicy", {"suspend": False, "ttlSecondsAfterFinished": 1}),
        ("runPolicy", {"suspend": False, "schedulingPolicy": {"queue": "x", "minAvailable": 1}}),
    ],
)
def test_the_control_plane_changes_nothing_of_a_pytorchjob_but_its_suspend_flag(
    field: str, value: Any
) -> None:
    old = pytorchjob()
    new = copy.deepcopy(pytorchjob(suspend=False))
    new["spec"][field] = value
    verdict = evaluate("muster-controlplane-scope", request("UPDATE", new, old, user=CONTROL_PLANE))
    assert verdict.denials == [
        "Muster's control plane may change only the suspend flag, its scheduling gate, "
        "muster.io/* annotations and the topology labels of node selectors"
    ]
    assert update(old, pytorchjob(suspend=False), CONTROL_PLANE).allowed


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(
            changed(jobset(suspend=False), spec__successPolicy={"operator": "Any"}),
            id="jobset-success-policy",
        ),
        pytest.param(
            changed(jobset(suspend=False), spec__network={"enableDNSHostnames": False}),
            id="jobset-network",
        ),
        pytest.param(
            changed(job(suspend=False), spec__podFailurePolicy={"rules": []}),
            id="job-pod-failure-policy",
        ),
        pytest.param(
            changed(job(suspend=False), spec__managedBy="x.example/controller"), id="job-managed-by"
        ),
        pytest.param(changed(pod(gates=()), spec__priority=1000000), id="pod-priority"),
    ],
)
def test_the_control_plane_changes_no_other_spec_field_of_any_kind(new: Any) -> None:
    old = {"JobSet": jobset(), "Job": job(), "Pod": pod()}[new["kind"]]
    review = request("UPDATE", new, old, user=CONTROL_PLANE)
    assert not evaluate("muster-controlplane-scope", review).allowed


# --------------------------------------------------------------------------- opt-in: GPUs need a queue

OPTED_IN = {"muster.io/require-queue": "true", "kubernetes.io/metadata.name": NS}


def gpus(
    obj: Any, amount: Any = "8", resource: str = "nvidia.com/gpu", *, init: bool = False
) -> Any:
    """`obj` with its first container (or a sidecar) asking for `amount` of `resource`."""
    out = copy.deepcopy(obj)
    spec = {
        "Job": lambda o: o["spec"]["template"]["spec"],
        "JobSet": lambda o: o["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"],
        "PyTorchJob": lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"],
        "Pod": lambda o: o["spec"],
    }[out["kind"]](out)
    if init:
        container = {"name": "c", "image": "registry.example/c:1", "restartPolicy": "Always"}
        spec["initContainers"] = [container]
    else:
        container = spec["containers"][0]
    container["resources"] = {"limits": {resource: amount}}
    return out


def opted_in(review: Any, params: Any = None) -> Any:
    return admitted_by_all(review, params, namespace_labels=OPTED_IN)


def require_message(what: str) -> str:
    how = (
        "give the pod the labels muster.io/queue and muster.io/pod-group, the scheduling "
        "gate muster.io/admission and muster.io/min-available"
        if what == "Pod"
        else "label it muster.io/queue and create it suspended"
    )
    return f"namespace {NS} runs GPU workloads only through Muster: {how}"


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(gpus(pod(group=None, queue=None, gates=())), id="bare-pod"),
        pytest.param(gpus(pod(group=None, gates=())), id="pod-with-a-queue-but-no-group"),
        pytest.param(gpus(job(queue=None, suspend=False)), id="job"),
        pytest.param(gpus(jobset(suspend=False), "1", "nvidia.com/mig-1g.5gb"), id="jobset-mig"),
        pytest.param(
            gpus(pytorchjob(suspend=False), "0.008k", "aws.amazon.com/neuron"),
            id="pytorchjob-neuron",
        ),
        pytest.param(gpus(job(queue=None, suspend=False), 1, init=True), id="sidecar"),
    ],
)
def test_an_opted_in_namespace_refuses_gpu_work_outside_muster(obj: Any) -> None:
    unlabelled = with_label(obj, "muster.io/queue", None) if obj["kind"] != "Pod" else obj
    verdict = opted_in(request("CREATE", unlabelled))
    assert verdict.denials == [require_message(obj["kind"])]
    # AND by default (a namespace not opted in) nothing changes
    assert admitted_by_all(request("CREATE", unlabelled)).allowed


def test_an_opted_in_namespace_takes_muster_workloads_held() -> None:
    for obj in (gpus(job()), gpus(jobset()), gpus(pytorchjob()), gpus(pod())):
        assert opted_in(request("CREATE", obj)).allowed, obj["kind"]
    # a labelled workload that is not held is refused by muster-created-held
    verdict = opted_in(request("CREATE", gpus(job(suspend=False))))
    assert verdict.denials == [
        "a Job labelled muster.io/queue must be created with spec.suspend: true"
    ]


def test_an_opted_in_namespace_leaves_cpu_work_and_zero_gpus_alone() -> None:
    assert opted_in(request("CREATE", job(queue=None, suspend=False))).allowed
    for zero in ("0", "0.0", "0m", 0):
        obj = gpus(pod(group=None, queue=None, gates=()), zero)
        assert opted_in(request("CREATE", obj)).allowed, zero


def test_pods_of_checked_workloads_are_their_controllers() -> None:
    job_pod = gpus(pod(group=None, queue=None, gates=()))
    assert opted_in(request("CREATE", job_pod, user=JOB_CONTROLLER)).allowed
    child = gpus(job(suspend=False, owner="JobSet"))
    child = with_label(child, "muster.io/queue", None)
    assert opted_in(request("CREATE", child, user=JOBSET_CONTROLLER)).allowed
    # a tenant's forged owner exempts nothing
    assert not opted_in(request("CREATE", child)).allowed


def test_adding_gpus_to_an_unmanaged_workload_later_is_refused() -> None:
    old = with_label(pytorchjob(suspend=False), "muster.io/queue", None)
    verdict = opted_in(request("UPDATE", gpus(old), old))
    assert verdict.denials == [require_message("PyTorchJob")]
    # one that already had them (created before the namespace opted in) may be edited
    assert opted_in(request("UPDATE", with_label(gpus(old), "team", "a"), gpus(old))).allowed


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
        ("team-a", "Default", 0),
        ("team-a", "spot", 0),
    ],
)
def test_the_policy_and_the_core_refuse_the_same_workloads(
    namespace: str, queue: str, priority: int
) -> None:
    from muster.core import parse_settings
    from muster.kube.policy_params import render

    settings = parse_settings(
        {
            "queues": {"spot": {"gpuQuota": 8}},
            "queueAccess": {
                "restrict": True,
                "queues": {
                    "premium": {"namespaces": ["team-a", "team-c"], "maxPriority": 100},
                    "default": {"namespaces": ["*"]},
                },
            },
        }
    )
    obj = job(namespace=namespace, queue=queue, annotations={"muster.io/priority": str(priority)})
    policy_allows = admitted_by_all(request("CREATE", obj), render(settings)).allowed
    core_allows = settings.access.refusal(queue, f"{namespace}/llama", priority) is None
    assert policy_allows == core_allows


def test_the_params_name_every_queue_the_settings_name() -> None:
    from muster.core import parse_settings
    from muster.kube.policy_params import render

    # GIVEN no restriction, but a queue with settings (and a quota) of its own
    data = render(parse_settings({"queues": {"spot": {"gpuQuota": 8}}}))["data"]
    # THEN only that queue (and default, as the control plane takes it) is known: another
    # name cannot escape its quota
    assert (data["restrictQueues"], data["queues"]) == ("false", "default,spot")
    # AND restricted, the queues of both blocks are known, each with only its grant
    doc = {
        "queues": {"spot": {"gpuQuota": 8}, "not a label": {}},
        "queueAccess": {"restrict": True, "queues": {"gpu": {"namespaces": ["ml"]}}},
    }
    data = render(parse_settings(doc))["data"]
    assert data["queues"] == "default,gpu,spot"
    assert data["queue.gpu.namespaces"] == "ml" and "queue.spot.namespaces" not in data
    # AND restricted with no queue at all, nothing is known
    data = render(parse_settings({"queueAccess": {"restrict": True}}))["data"]
    assert data["queues"] == ""
    # AND with neither, any name (the default settings)
    assert render(parse_settings({}))["data"]["queues"] == "*"


def test_the_bounds_are_params() -> None:
    from muster.core import parse_settings
    from muster.kube.policy_params import render

    data = render(parse_settings({}), max_pods=8, max_annotation_bytes=1024)["data"]
    assert (data["maxPods"], data["maxAnnotationBytes"]) == ("8", "1024")


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
