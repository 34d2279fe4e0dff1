"""The Kubernetes adapter against an API server over real HTTP (kmock's emulator).

The emulator has no resourceVersion, ignores label selectors and stores a patch
even when a test reaction answers it with an error; the tests therefore assert
the exact requests sent and script concurrent writers inside reactions.
"""

from __future__ import annotations

from typing import Any

import pytest
from muster.core.model import Admit, Evict, Kind, Phase, Reason, Workload
from muster.kube.adapter import ClusterActionError, ClusterUnavailable, KubernetesCluster
from muster.kube.http import KubeApi
from muster.runtime.ports import WorkloadGone

kmock = pytest.importorskip("kmock")

JOBS = "batch/v1/jobs"
JOBSETS = "jobset.x-k8s.io/v1alpha2/jobsets"
PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"
PODS = "v1/pods"


@pytest.fixture()
def k8s(apiserver: Any) -> Any:
    h = apiserver.handler
    h.resources[JOBS] = {"kind": "Job", "namespaced": True}
    h.resources[JOBSETS] = {"kind": "JobSet", "namespaced": True}
    h.resources[PYTORCHJOBS] = {"kind": "PyTorchJob", "namespaced": True}
    h.resources[PODS] = {"kind": "Pod", "namespaced": True}
    return h


@pytest.fixture()
def sleeps() -> list[float]:
    return []


# The control plane's committed record of each workload: the fencing authority.
RECORDS: dict[str, Workload] = {}


@pytest.fixture(autouse=True)
def _fresh_records() -> Any:
    RECORDS.clear()
    yield
    RECORDS.clear()


def recorded(key: str, attempt: int, phase: Phase, kind: Kind = Kind.JOB) -> None:
    RECORDS[key] = Workload(key, "q", 1, kind=kind, attempt=attempt, phase=phase)


@pytest.fixture()
def cluster(apiserver: Any, sleeps: list[float]) -> KubernetesCluster:
    return KubernetesCluster(
        KubeApi.for_host(apiserver.url, token="t0ken"), records=RECORDS.get, sleep=sleeps.append
    )


def requests(h: Any) -> list[tuple[str, str, Any]]:
    return [(str(r.method).split(".")[-1].upper(), r.url.path, r.data) for r in h]


def job(name: str = "train", suspend: bool = True, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", **metadata},
        "spec": {"suspend": suspend, "parallelism": 4},
    }


def pod(name: str, group: str = "grp", gates: list[str] | None = None) -> dict[str, Any]:
    gate_list = ["muster.io/admission"] if gates is None else gates
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"muster.io/pod-group": group, "muster.io/queue": "q"},
        },
        "spec": {"schedulingGates": [{"name": g} for g in gate_list], "containers": []},
    }


def admit(
    kind: Kind, attempt: int = 1, key: str = "ml/train", *, record: bool = True, size: int = 2
) -> Admit:
    """The admit effect, with the record the core committed before it (unless told not to);
    a pod group's for a gang of `size`."""
    if record:
        recorded(key, attempt, Phase.ADMITTED, kind)
    return Admit(key, attempt, kind, size=size if kind is Kind.POD_GROUP else 0)


def evict(kind: Kind, attempt: int = 1, key: str = "ml/train", *, record: bool = True) -> Evict:
    if record:
        recorded(key, attempt, Phase.REQUEUED, kind)
    return Evict(key, attempt, kind, Reason.PODS_READY_TIMEOUT, Reason.WAIT_FOR_START)


# --------------------------------------------------------------------------- suspend kinds


def test_admit_job_reads_then_unsuspends_with_a_fencing_mark(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a suspended Job
    k8s.objects[JOBS, "ml", "train"] = job()
    # WHEN it is admitted for attempt 1
    cluster.admit(admit(Kind.JOB))
    # THEN one GET, a merge patch of the suspend flag alone, then one of the attempt's mark
    assert requests(k8s) == [
        ("GET", "/apis/batch/v1/namespaces/ml/jobs/train", None),
        ("PATCH", "/apis/batch/v1/namespaces/ml/jobs/train", {"spec": {"suspend": False}}),
        (
            "PATCH",
            "/apis/batch/v1/namespaces/ml/jobs/train",
            {"metadata": {"annotations": {"muster.io/admitted-attempt": "1"}}},
        ),
    ]
    assert k8s[0].headers["Authorization"] == "Bearer t0ken"
    assert k8s[1].headers["Content-Type"] == "application/merge-patch+json"
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is False


def test_admit_sends_the_resource_version_as_a_precondition(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    k8s.objects[JOBS, "ml", "train"] = job(resourceVersion="812")
    cluster.admit(admit(Kind.JOB))
    assert k8s[1].data["metadata"]["resourceVersion"] == "812"


def test_jobset_and_pytorchjob_use_their_own_paths_and_suspend_fields(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    k8s.objects[JOBSETS, "ml", "js"] = {
        "metadata": {"name": "js", "namespace": "ml"},
        "spec": {"suspend": True},
    }
    k8s.objects[PYTORCHJOBS, "ml", "pt"] = {
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {"runPolicy": {"suspend": False}},
    }
    cluster.admit(admit(Kind.JOBSET, key="ml/js"))
    cluster.evict(evict(Kind.PYTORCHJOB, attempt=2, key="ml/pt"))
    patches = [(p, d) for m, p, d in requests(k8s) if m == "PATCH"]
    jobset = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/js"
    pytorchjob = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/pt"
    assert patches == [
        (jobset, {"spec": {"suspend": False}}),
        (jobset, {"metadata": {"annotations": {"muster.io/admitted-attempt": "1"}}}),
        (pytorchjob, {"spec": {"runPolicy": {"suspend": True}}}),
        (pytorchjob, {"metadata": {"annotations": {"muster.io/evicted-attempt": "2"}}}),
    ]


def test_evict_suspends_the_job(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[JOBS, "ml", "train"] = job(
        suspend=False, annotations={"muster.io/admitted-attempt": "3"}
    )
    cluster.evict(evict(Kind.JOB, attempt=3))
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is True
    assert (
        k8s.objects[JOBS, "ml", "train"]["metadata"]["annotations"]["muster.io/evicted-attempt"]
        == "3"
    )


def test_a_redelivered_admit_changes_nothing(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[JOBS, "ml", "train"] = job(
        suspend=False, annotations={"muster.io/admitted-attempt": "2"}
    )
    cluster.admit(admit(Kind.JOB, attempt=2))
    assert [m for m, _, _ in requests(k8s)] == ["GET"]


def test_a_late_admit_does_not_undo_a_newer_eviction(k8s: Any, cluster: KubernetesCluster) -> None:
    # GIVEN the record says attempt 2 was evicted (the Job's annotations say nothing)
    k8s.objects[JOBS, "ml", "train"] = job()
    recorded("ml/train", 2, Phase.REQUEUED)
    # WHEN the admit of attempt 2 is delivered again late
    cluster.admit(admit(Kind.JOB, attempt=2, record=False))
    # THEN the Job stays suspended
    assert [m for m, _, _ in requests(k8s)] == ["GET"]
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is True


def test_a_late_eviction_does_not_withdraw_a_newer_attempt(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    k8s.objects[JOBS, "ml", "train"] = job(suspend=False)
    recorded("ml/train", 4, Phase.ADMITTED)
    cluster.evict(evict(Kind.JOB, attempt=3, record=False))
    assert [m for m, _, _ in requests(k8s)] == ["GET"]


def test_a_forged_admitted_attempt_does_not_stop_an_eviction(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN the Job's owner wrote a huge admitted-attempt mark on it
    k8s.objects[JOBS, "ml", "train"] = job(
        suspend=False, annotations={"muster.io/admitted-attempt": "999999"}
    )
    # WHEN the control plane, whose record holds attempt 3, evicts attempt 3
    cluster.evict(evict(Kind.JOB, attempt=3))
    # THEN the Job is suspended all the same, and the view says which attempt was evicted
    obj = k8s.objects[JOBS, "ml", "train"]
    assert obj["spec"]["suspend"] is True
    assert obj["metadata"]["annotations"]["muster.io/evicted-attempt"] == "3"


def test_a_forged_evicted_attempt_does_not_stop_an_admission(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    k8s.objects[JOBS, "ml", "train"] = job(annotations={"muster.io/evicted-attempt": "999999"})
    cluster.admit(admit(Kind.JOB, attempt=1))
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is False


def test_an_admit_with_no_record_is_not_carried_out(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[JOBS, "ml", "train"] = job()
    cluster.admit(admit(Kind.JOB, record=False))
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is True


def test_a_stale_admit_leaves_a_pod_group_gated(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    recorded("ml/grp", 1, Phase.REQUEUED, Kind.POD_GROUP)
    cluster.admit(admit(Kind.POD_GROUP, attempt=1, key="ml/grp", record=False))
    assert [m for m, _, _ in requests(k8s)] == ["GET"]


def test_a_stale_eviction_deletes_no_replacement_pods(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0", gates=[])
    recorded("ml/grp", 2, Phase.ADMITTED, Kind.POD_GROUP)
    cluster.evict(evict(Kind.POD_GROUP, attempt=1, key="ml/grp", record=False))
    assert [m for m, _, _ in requests(k8s)] == ["GET"]


def test_a_deleted_workload_is_reported_gone(k8s: Any, cluster: KubernetesCluster) -> None:
    with pytest.raises(WorkloadGone) as gone:
        cluster.admit(admit(Kind.JOB, key="ml/vanished"))
    assert gone.value.workload == "ml/vanished"


def test_a_conflict_is_retried_on_a_fresh_read(k8s: Any, cluster: KubernetesCluster) -> None:
    # GIVEN another writer changes the Job between our read and our patch
    k8s.objects[JOBS, "ml", "train"] = job(resourceVersion="1")

    def concurrent_writer(request: Any) -> None:
        if request.data["metadata"].get("resourceVersion") == "1":
            k8s.objects[JOBS, "ml", "train"] = job(resourceVersion="2", labels={"team": "a"})
            raise kmock.KubernetesError(
                status=409, reason="Conflict", message="object was modified"
            )

    k8s["patch /apis/batch/v1/namespaces/ml/jobs/train"] << concurrent_writer
    # WHEN it is admitted
    cluster.admit(admit(Kind.JOB))
    # THEN the second patch carries the fresh resourceVersion, and the other writer's
    # change survives (the mark after it needs none: it is a view)
    assert [
        (m, (d or {}).get("metadata", {}).get("resourceVersion")) for m, _, d in requests(k8s)
    ] == [
        ("GET", None),
        ("PATCH", "1"),
        ("GET", None),
        ("PATCH", "2"),
        ("PATCH", None),
    ]
    stored = k8s.objects[JOBS, "ml", "train"]
    assert stored["spec"]["suspend"] is False
    assert stored["metadata"]["labels"] == {"team": "a"}


def test_server_errors_are_retried_with_backoff_then_succeed(
    k8s: Any, cluster: KubernetesCluster, sleeps: list[float]
) -> None:
    k8s.objects[JOBS, "ml", "train"] = job()
    failures = [503, 500]

    def flaky(request: Any) -> None:
        if failures:
            raise kmock.KubernetesError(
                status=failures.pop(0), reason="ServerError", message="etcd"
            )

    k8s["patch /apis/batch/v1/namespaces/ml/jobs/train"] << flaky
    cluster.admit(admit(Kind.JOB))
    assert [m for m, _, _ in requests(k8s)] == ["GET", "PATCH", "PATCH", "PATCH", "PATCH"]
    assert sleeps == [0.2, 0.4]


def test_persistent_server_errors_are_left_to_the_queue(
    k8s: Any, cluster: KubernetesCluster, sleeps: list[float]
) -> None:
    k8s.objects[JOBS, "ml", "train"] = job()
    k8s["get /apis/batch/v1/namespaces/ml/jobs/train"] << 503
    with pytest.raises(ClusterUnavailable, match="ml/train"):
        cluster.admit(admit(Kind.JOB))
    assert len(k8s) == 4  # bounded
    assert sleeps == [0.2, 0.4, 0.8]


def test_forbidden_is_not_retried_and_says_why(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[JOBS, "ml", "train"] = job()

    def forbidden(request: Any) -> None:
        raise kmock.KubernetesError(
            status=403, reason="Forbidden", message='jobs.batch "train" is forbidden'
        )

    k8s["patch /apis/batch/v1/namespaces/ml/jobs/train"] << forbidden
    with pytest.raises(ClusterActionError, match=r"403.*forbidden"):
        cluster.admit(admit(Kind.JOB))
    assert len(k8s) == 2


def test_connection_refused_is_transient(sleeps: list[float]) -> None:
    cluster = KubernetesCluster(
        KubeApi.for_host("http://127.0.0.1:9", request_timeout=1),
        records=RECORDS.get,
        sleep=sleeps.append,
    )
    with pytest.raises(ClusterUnavailable):
        cluster.evict(evict(Kind.JOB))
    assert len(sleeps) == 3


# --------------------------------------------------------------------------- pod groups


def test_admit_pod_group_removes_only_musters_gate(k8s: Any, cluster: KubernetesCluster) -> None:
    # GIVEN a two-pod group, one pod also gated by another controller, and an unrelated pod
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    k8s.objects[PODS, "ml", "grp-1"] = pod(
        "grp-1", gates=["example.com/quota", "muster.io/admission"]
    )
    k8s.objects[PODS, "ml", "other"] = pod("other", group="other")
    # WHEN the group is admitted
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp"))
    # THEN the list used the group label, and each of its pods lost only Muster's gate
    reqs = requests(k8s)
    assert reqs[0][:2] == ("GET", "/api/v1/namespaces/ml/pods")
    assert dict(k8s[0].params) == {"labelSelector": "muster.io/pod-group=grp"}
    mark = {"metadata": {"annotations": {"muster.io/admitted-attempt": "1"}}}
    assert reqs[1:] == [
        ("PATCH", "/api/v1/namespaces/ml/pods/grp-0", {"spec": {"schedulingGates": []}}),
        ("PATCH", "/api/v1/namespaces/ml/pods/grp-0", mark),
        (
            "PATCH",
            "/api/v1/namespaces/ml/pods/grp-1",
            {"spec": {"schedulingGates": [{"name": "example.com/quota"}]}},
        ),
        ("PATCH", "/api/v1/namespaces/ml/pods/grp-1", mark),
    ]
    assert k8s.objects[PODS, "ml", "other"]["spec"]["schedulingGates"] == [
        {"name": "muster.io/admission"}
    ]


def test_admit_pod_group_skips_pods_already_released(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0", gates=[])
    k8s.objects[PODS, "ml", "grp-1"] = pod("grp-1")
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp"))
    assert [(m, p) for m, p, _ in requests(k8s)][1:] == [
        ("PATCH", "/api/v1/namespaces/ml/pods/grp-1"),
        ("PATCH", "/api/v1/namespaces/ml/pods/grp-1"),
    ]


def test_admit_pod_group_releases_its_gang_size_and_no_more(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a group admitted for a gang of 2 whose owner created 5 pods
    for i in range(5):
        k8s.objects[PODS, "ml", f"grp-{i}"] = pod(f"grp-{i}")
    # WHEN its admission is carried out
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp", size=2))
    # THEN only the first two by name lost the gate; the others stay held
    gated = {
        i: k8s.objects[PODS, "ml", f"grp-{i}"]["spec"]["schedulingGates"] != [] for i in range(5)
    }
    assert gated == {0: False, 1: False, 2: True, 3: True, 4: True}
    # AND carried out again (a redelivery, a pod added meanwhile) it releases nothing more
    k8s.objects[PODS, "ml", "grp-5"] = pod("grp-5")
    before = len(requests(k8s))
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp", size=2))
    assert [m for m, _, _ in requests(k8s)[before:]] == ["GET"]


def test_admit_pod_group_releases_only_replacements_of_lost_members(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a released gang of 3: one member failed, one is terminating, one runs,
    # and its controller made two gated replacements beside two extra gated pods
    failed, terminating = pod("a-0", gates=[]), pod("a-1", gates=[])
    failed["status"] = {"phase": "Failed"}
    terminating["metadata"]["deletionTimestamp"] = "2026-11-30T09:00:00Z"
    k8s.objects[PODS, "ml", "a-0"], k8s.objects[PODS, "ml", "a-1"] = failed, terminating
    k8s.objects[PODS, "ml", "a-2"] = pod("a-2", gates=[])
    for name in ("b-0", "b-1", "c-0", "c-1"):
        k8s.objects[PODS, "ml", name] = pod(name)
    # WHEN the release is carried out
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp", size=3))
    # THEN two pods are released, as many as were lost: the gang is 3 again
    ungated = [p for m, p, body in requests(k8s) if m == "PATCH" and "spec" in body]
    assert ungated == ["/api/v1/namespaces/ml/pods/b-0", "/api/v1/namespaces/ml/pods/b-1"]


def test_admit_pod_group_never_releases_a_pod_asking_for_more_than_its_charge(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a gang of 2 charged 1 GPU a pod, and a pod added later, first by name,
    # that asks for 8 (the agent refuses the group, but the pod is in the listing)
    def asking(name: str, gpus: str) -> dict[str, Any]:
        p = pod(name)
        p["spec"]["containers"] = [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]
        return p

    k8s.objects[PODS, "ml", "a-odd"] = asking("a-odd", "8")
    k8s.objects[PODS, "ml", "grp-0"] = asking("grp-0", "1")
    k8s.objects[PODS, "ml", "grp-1"] = asking("grp-1", "1")
    # WHEN the group is released
    effect = admit(Kind.POD_GROUP, key="ml/grp", size=2)
    cluster.admit(Admit(effect.workload, 1, Kind.POD_GROUP, size=2, gpus=2))
    # THEN its two pods of 1 GPU run, and the 8-GPU pod stays gated
    ungated = [p for m, p, body in requests(k8s) if m == "PATCH" and "spec" in body]
    assert ungated == ["/api/v1/namespaces/ml/pods/grp-0", "/api/v1/namespaces/ml/pods/grp-1"]


def test_a_release_without_a_size_takes_the_records(k8s: Any, cluster: KubernetesCluster) -> None:
    # GIVEN a release stored before releases carried the gang size, and a record of 1
    for i in range(3):
        k8s.objects[PODS, "ml", f"grp-{i}"] = pod(f"grp-{i}")
    effect = admit(Kind.POD_GROUP, key="ml/grp", size=0)
    # WHEN it is carried out, THEN it releases the record's gang and no more
    cluster.admit(effect)
    ungated = [p for m, p, body in requests(k8s) if m == "PATCH" and "spec" in body]
    assert ungated == ["/api/v1/namespaces/ml/pods/grp-0"]


def test_an_action_for_an_earlier_object_under_the_name_does_not_touch_the_new_one(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a Job re-created under its name: the control plane still admits the old one
    k8s.objects[JOBS, "ml", "train"] = job(uid="new-uid")
    RECORDS["ml/train"] = Workload(
        "ml/train", "q", 1, attempt=1, phase=Phase.ADMITTED, uid="new-uid"
    )
    # WHEN the admission and the eviction name the old object's uid
    with pytest.raises(WorkloadGone):
        cluster.admit(Admit("ml/train", 1, Kind.JOB, "old-uid"))
    with pytest.raises(WorkloadGone):
        cluster.evict(
            Evict("ml/train", 1, Kind.JOB, Reason.PODS_READY_TIMEOUT, None, uid="old-uid")
        )
    # THEN the new Job was only read, never patched
    assert [m for m, _, _ in requests(k8s)] == ["GET", "GET"]
    # and an action for the object that is there goes through
    cluster.admit(Admit("ml/train", 1, Kind.JOB, "new-uid"))
    assert [m for m, _, _ in requests(k8s)][-1] == "PATCH"


def test_admit_pod_group_whose_pods_are_terminating_is_not_gone(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a group whose pods are all terminating (their controller replaces them)
    for name in ("grp-0", "grp-1"):
        terminating = pod(name)
        terminating["metadata"]["deletionTimestamp"] = "2026-11-30T09:00:00Z"
        k8s.objects[PODS, "ml", name] = terminating
    # WHEN it is admitted, THEN it is not declared gone and nothing is patched
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp"))
    assert [m for m, _, _ in requests(k8s)] == ["GET"]


def test_admit_pod_group_without_pods_is_gone(k8s: Any, cluster: KubernetesCluster) -> None:
    with pytest.raises(WorkloadGone):
        cluster.admit(admit(Kind.POD_GROUP, key="ml/grp"))


def test_evict_pod_group_deletes_its_pods_and_tolerates_one_already_gone(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0", gates=[])
    k8s.objects[PODS, "ml", "grp-1"] = pod("grp-1", gates=[])
    k8s["delete /api/v1/namespaces/ml/pods/grp-0"] << 404
    cluster.evict(evict(Kind.POD_GROUP, key="ml/grp"))
    assert [(m, p) for m, p, _ in requests(k8s)][1:] == [
        ("DELETE", "/api/v1/namespaces/ml/pods/grp-0"),
        ("DELETE", "/api/v1/namespaces/ml/pods/grp-1"),
    ]
    assert (PODS, "ml", "grp-1") not in k8s.objects


# --------------------------------------------------------------------------- record


def test_record_writes_musters_view_as_annotations(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[JOBS, "ml", "train"] = job()
    cluster.record("ml/train", Kind.JOB, {"state": "Requeued", "attempt": "2", "reason": ""})
    assert requests(k8s) == [
        (
            "PATCH",
            "/apis/batch/v1/namespaces/ml/jobs/train",
            {
                "metadata": {
                    "annotations": {
                        "muster.io/state": "Requeued",
                        "muster.io/attempt": "2",
                        "muster.io/reason": None,
                    }
                }
            },
        )
    ]
    assert (
        k8s.objects[JOBS, "ml", "train"]["metadata"]["annotations"]["muster.io/state"] == "Requeued"
    )


def test_record_on_a_deleted_workload_is_gone(k8s: Any, cluster: KubernetesCluster) -> None:
    with pytest.raises(WorkloadGone):
        cluster.record("ml/train", Kind.PYTORCHJOB, {"state": "Admitted"})


def test_record_on_a_pod_group_annotates_each_pod(k8s: Any, cluster: KubernetesCluster) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    k8s.objects[PODS, "ml", "grp-1"] = pod("grp-1")
    cluster.record("ml/grp", Kind.POD_GROUP, {"state": "Pending"})
    for name in ("grp-0", "grp-1"):
        assert k8s.objects[PODS, "ml", name]["metadata"]["annotations"] == {
            "muster.io/state": "Pending"
        }


def test_a_malformed_key_names_the_field(cluster: KubernetesCluster) -> None:
    with pytest.raises(ValueError, match="workload: expected 'namespace/name'"):
        cluster.admit(admit(Kind.JOB, key="no-namespace"))


def test_an_ungate_retried_after_a_conflict_asks_the_record_again(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a one-pod group admitted for attempt 1
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    effect = admit(Kind.POD_GROUP, key="ml/grp")

    def evicted_meanwhile(request: Any) -> None:
        # the group is evicted (committed first) and its pod replaced by its
        # controller, which makes our patch conflict
        recorded("ml/grp", 1, Phase.REQUEUED, Kind.POD_GROUP)
        k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
        raise kmock.KubernetesError(status=409, reason="Conflict", message="modified")

    k8s["patch /api/v1/namespaces/ml/pods/grp-0"] << evicted_meanwhile
    # WHEN the admission is carried out
    cluster.admit(effect)
    # THEN after the conflict it read the pod again and, the record now saying
    # evicted, sent no second patch: the replacement keeps its gate
    assert [m for m, _, _ in requests(k8s)] == ["GET", "PATCH", "GET"]
    assert k8s.objects[PODS, "ml", "grp-0"]["spec"]["schedulingGates"] == [
        {"name": "muster.io/admission"}
    ]


# --------------------------------------------------------------------------- kinds of one name


def test_a_kinds_marker_addresses_its_object_never_the_job_of_its_name(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # GIVEN a suspended Job and a suspended PyTorchJob, both ml/train, and a pod group ml/train
    k8s.objects[JOBS, "ml", "train"] = job()
    k8s.objects[PYTORCHJOBS, "ml", "train"] = {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"runPolicy": {"suspend": True}},
    }
    k8s.objects[PODS, "ml", "train-0"] = pod("train-0", group="train")
    # WHEN the PyTorchJob and the pod group are admitted and the PyTorchJob's view recorded
    cluster.admit(admit(Kind.PYTORCHJOB, key="ml/train@pytorchjob"))
    cluster.admit(admit(Kind.POD_GROUP, key="ml/train@podgroup"))
    cluster.record("ml/train@pytorchjob", Kind.PYTORCHJOB, {"state": "Admitted"})
    # THEN each call went to the object of that kind named `train` (no marker in a path)
    paths = [p for m, p, _ in requests(k8s) if m == "PATCH"]
    assert paths == [
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/train",  # released
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/train",  # its mark
        "/api/v1/namespaces/ml/pods/train-0",
        "/api/v1/namespaces/ml/pods/train-0",
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/train",  # the view
    ]
    assert k8s.objects[PYTORCHJOBS, "ml", "train"]["spec"]["runPolicy"]["suspend"] is False
    assert k8s.objects[PODS, "ml", "train-0"]["spec"]["schedulingGates"] == []
    # AND the Job of the same name is untouched: still suspended
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is True


def test_an_unknown_kind_marker_is_refused(cluster: KubernetesCluster) -> None:
    with pytest.raises(ValueError, match="workload: expected 'namespace/name'"):
        cluster.admit(admit(Kind.JOBSET, key="ml/train@cronjob"))


# --------------------------------------------------------------------------- padded annotations


def refuse_added_annotations(request: Any) -> None:
    """The API server on an object whose owner filled its annotations to the limit."""
    if (request.data.get("metadata") or {}).get("annotations"):
        raise kmock.KubernetesError(
            status=422,
            reason="Invalid",
            message="metadata.annotations: Too long: must have at most 262144 bytes",
        )


def padded() -> dict[str, str]:
    return {"example.com/padding": "x" * 262_000}


@pytest.mark.parametrize("suspend", [True, False], ids=["evict", "admit"])
def test_a_job_with_padded_annotations_is_still_suspended_and_released(
    k8s: Any, cluster: KubernetesCluster, suspend: bool
) -> None:
    # GIVEN a Job whose owner padded its annotations to just under 256 KiB
    k8s.objects[JOBS, "ml", "train"] = job(suspend=not suspend, annotations=padded())
    k8s["patch /apis/batch/v1/namespaces/ml/jobs/train"] << refuse_added_annotations
    # WHEN it is evicted (or admitted)
    if suspend:
        cluster.evict(evict(Kind.JOB, attempt=2))
    else:
        cluster.admit(admit(Kind.JOB, attempt=2))
    # THEN the suspend flag went out on its own and took effect; the mark was tried
    # after it, refused, and that held nothing back
    patches = [d for m, _, d in requests(k8s) if m == "PATCH"]
    assert patches[0] == {"spec": {"suspend": suspend}}
    assert "annotations" in patches[1]["metadata"]
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is suspend


def test_a_pod_group_with_padded_annotations_is_released(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    k8s.objects[PODS, "ml", "grp-0"] = pod("grp-0")
    k8s["patch /api/v1/namespaces/ml/pods/grp-0"] << refuse_added_annotations
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp"))
    assert k8s.objects[PODS, "ml", "grp-0"]["spec"]["schedulingGates"] == []


def test_the_marks_of_a_large_pod_group_go_on_its_first_pods_only(
    k8s: Any, cluster: KubernetesCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("muster.kube.adapter.MAX_RECORDED_PODS", 1)
    for name in ("grp-0", "grp-1", "grp-2"):
        k8s.objects[PODS, "ml", name] = pod(name)
    cluster.admit(admit(Kind.POD_GROUP, key="ml/grp", size=3))
    patched = [(p.rsplit("/", 1)[1], "metadata" in d) for m, p, d in requests(k8s) if m == "PATCH"]
    assert patched == [("grp-0", False), ("grp-0", True), ("grp-1", False), ("grp-2", False)]


def test_musters_view_refused_on_padded_annotations_is_an_error_the_caller_sees(
    k8s: Any, cluster: KubernetesCluster
) -> None:
    # the control plane treats it as best effort (muster.runtime.holding.record_view)
    k8s.objects[JOBS, "ml", "train"] = job(annotations=padded())
    k8s["patch /apis/batch/v1/namespaces/ml/jobs/train"] << refuse_added_annotations
    with pytest.raises(ClusterActionError, match="422"):
        cluster.record("ml/train", Kind.JOB, {"state": "Requeued"})


def test_the_control_plane_withdraws_a_padded_job_and_frees_its_quota(
    k8s: Any, apiserver: Any
) -> None:
    # GIVEN the control plane on the API server, a 16-GPU quota, and a Job holding it
    # whose owner padded its annotations after admission (every added one is refused)
    from muster.core import DeadlineReached, WorkloadObserved

    from tests.aws.conftest import Rig

    rig = Rig(doc={"timeout": "60s", "gpuQuota": 16})

    def record_of(key: str) -> Workload | None:
        snap = rig.store.load(key)
        return snap.workload if snap else None

    rig.cluster = KubernetesCluster(  # type: ignore[assignment]
        KubeApi.for_host(apiserver.url, token="t0ken"), records=record_of, sleep=lambda _: None
    )
    for name in ("train", "next"):
        k8s.objects[JOBS, "ml", name] = job(name)
    rig.plane().handle(WorkloadObserved("ml/train", "default", 1, gpus=16, seq=1))
    assert rig.admit() == ["ml/train"]
    rig.plane().handle(WorkloadObserved("ml/next", "default", 1, gpus=16, seq=2))
    k8s.objects[JOBS, "ml", "train"]["metadata"]["annotations"] = padded()
    k8s["patch /apis/batch/v1/namespaces/ml/jobs/train"] << refuse_added_annotations
    # WHEN its startup deadline passes
    timer = record_of("ml/train").timer  # type: ignore[union-attr]
    assert timer is not None
    rig.clock.now += 61
    rig.plane().handle(DeadlineReached("ml/train", 1, timer.kind, timer.episode, timer.incarnation))
    # THEN it is suspended, nothing is left failing or quarantined, and the next one runs
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is True
    snap = rig.store.load("ml/train")
    assert snap is not None and not snap.outbox and snap.quarantine is None
    assert rig.admit() == ["ml/next"]
    assert k8s.objects[JOBS, "ml", "next"]["spec"]["suspend"] is False
