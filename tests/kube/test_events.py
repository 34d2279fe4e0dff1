"""Kubernetes Events on the workload, so `kubectl describe job` says why it was evicted.

The control plane runs on in-memory AWS stand-ins with the real Kubernetes adapter
talking HTTP to kmock's emulator; the Events are read back as the API server stored
them.
"""

from __future__ import annotations

from typing import Any

import pytest
from muster.core.model import DeadlineReached, Kind, LogEvent, TimerKind
from muster.kube.adapter import KubernetesCluster
from muster.kube.events import describe
from muster.kube.http import KubeApi
from muster.lambdas.wiring import record_reader
from muster.runtime.ports import RecordingCluster

from tests.aws.conftest import Rig

kmock = pytest.importorskip("kmock")

JOBS = "batch/v1/jobs"
PODS = "v1/pods"
EVENTS = "v1/events"
KEY = "ml/train"


@pytest.fixture()
def k8s(apiserver: Any) -> Any:
    h = apiserver.handler
    h.resources[JOBS] = {"kind": "Job", "namespaced": True}
    h.resources[PODS] = {"kind": "Pod", "namespaced": True}
    h.resources[EVENTS] = {"kind": "Event", "namespaced": True}
    return h


def posted_events(h: Any) -> list[dict[str, Any]]:
    return [
        r.data
        for r in h
        if str(r.method).endswith("POST") and r.url.path == "/api/v1/namespaces/ml/events"
    ]


def wired(apiserver: Any) -> Rig:
    rig = Rig()
    rig.cluster = KubernetesCluster(  # type: ignore[assignment]
        KubeApi.for_host(apiserver.url, token="t"),
        records=record_reader(rig.store),
        sleep=lambda s: None,
    )
    return rig


def test_kubectl_describe_says_why_the_job_was_evicted(k8s: Any, apiserver: Any) -> None:
    # GIVEN a held Job of two pods, admitted, one pod stuck unschedulable
    k8s.objects[JOBS, "ml", "train"] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "3f1c-job-uid"},
        "spec": {"suspend": True, "parallelism": 2},
    }
    rig = wired(apiserver)
    rig.submit(KEY, 2)
    rig.admit()
    rig.pod(KEY, "train-0", 1, ready=True, node="n1")
    rig.pod(KEY, "train-1", 1, ready=False, node=None, reason="Unschedulable", message="0/8 nodes")
    # WHEN the startup deadline passes
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    # THEN the Job carries Events for its admission, its eviction and its requeue
    events = posted_events(k8s)
    assert [e["reason"] for e in events] == [
        "Admitted",
        "EvictedDueToPodsReadyTimeout",
        "Requeued",
    ]
    for e in events:
        assert e["involvedObject"] == {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "namespace": "ml",
            "uid": "3f1c-job-uid",
        }
        assert e["source"] == {"component": "muster.io/controlplane"}
    evicted = events[1]
    assert evicted["type"] == "Warning"
    assert "WaitForStart" in evicted["message"] and "(1/2 ready)" in evicted["message"]
    assert "train-1 (Pending, Unschedulable: 0/8 nodes)" in evicted["message"]
    # AND the requeue says when the backoff ends (60 s after the eviction)
    assert "admissible again after 1970-01-01T00:18:40Z (backoff 60s)" in events[2]["message"]
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is True


def test_a_failed_event_never_blocks_the_decision(k8s: Any, apiserver: Any) -> None:
    # GIVEN an API server that refuses every Event
    k8s.objects[JOBS, "ml", "train"] = {
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"suspend": True},
    }

    def refuse(request: Any) -> None:
        raise kmock.KubernetesError(status=403, reason="Forbidden", message="no events")

    k8s["post /api/v1/namespaces/ml/events"] << refuse
    rig = wired(apiserver)
    rig.submit(KEY, 1)
    # WHEN the workload is admitted
    assert rig.admit() == [KEY]
    # THEN it is released all the same, and the failure is counted
    assert k8s.objects[JOBS, "ml", "train"]["spec"]["suspend"] is False
    assert rig.phase(KEY) == "Admitted"
    assert rig.metrics.total("AnnounceFailures") == 1


def test_a_retried_event_is_not_recorded_twice(k8s: Any, apiserver: Any) -> None:
    k8s.objects[JOBS, "ml", "train"] = {"metadata": {"name": "train", "namespace": "ml"}}
    cluster = KubernetesCluster(KubeApi.for_host(apiserver.url), records=lambda key: None)
    detail = {"attempt": 1, "deadline": 60.0, "timeoutSeconds": 60}

    def already_there(request: Any) -> None:
        raise kmock.KubernetesError(status=409, reason="AlreadyExists", message="exists")

    # GIVEN the Event was created by an earlier try of the same effect
    cluster.announce(KEY, Kind.JOB, LogEvent.ADMITTED, detail, key="ml/train/3/2", at=0.0)
    k8s["post /api/v1/namespaces/ml/events"] << already_there
    # WHEN the effect is carried out again, THEN the same name is sent and 409 is fine
    cluster.announce(KEY, Kind.JOB, LogEvent.ADMITTED, detail, key="ml/train/3/2", at=0.0)
    names = [e["metadata"]["name"] for e in posted_events(k8s)]
    assert len(names) == 2 and names[0] == names[1]


def test_a_pod_group_gets_its_events_on_its_pods(k8s: Any, apiserver: Any) -> None:
    for n in range(2):
        k8s.objects[PODS, "ml", f"grp-{n}"] = {
            "metadata": {
                "name": f"grp-{n}",
                "namespace": "ml",
                "uid": f"uid-{n}",
                "labels": {"muster.io/pod-group": "grp"},
            },
            "spec": {},
        }
    cluster = KubernetesCluster(KubeApi.for_host(apiserver.url), records=lambda key: None)
    detail = {"attempt": 2, "reason": "RequeuingLimitExceeded", "count": 3}
    cluster.announce("ml/grp", Kind.POD_GROUP, LogEvent.DEACTIVATED, detail, key="k", at=0.0)
    events = posted_events(k8s)
    assert [(e["involvedObject"]["name"], e["involvedObject"]["uid"]) for e in events] == [
        ("grp-0", "uid-0"),
        ("grp-1", "uid-1"),
    ]
    assert {e["reason"] for e in events} == {"DeactivatedDueToRequeuingLimitExceeded"}


def test_a_deactivation_event_names_the_key_to_reactivate(apiserver: Any, k8s: Any) -> None:
    # GIVEN a PyTorchJob ml/train (there may be a Job ml/train too: its key is another)
    pytorchjobs = "kubeflow.org/v1/pytorchjobs"
    k8s.resources[pytorchjobs] = {"kind": "PyTorchJob", "namespaced": True}
    k8s.objects[pytorchjobs, "ml", "train"] = {
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-pt"},
        "spec": {},
    }
    cluster = KubernetesCluster(KubeApi.for_host(apiserver.url), records=lambda key: None)
    detail = {"attempt": 2, "reason": "RequeuingLimitExceeded", "count": 3}
    # WHEN it is deactivated
    cluster.announce(
        "ml/train@pytorchjob", Kind.PYTORCHJOB, LogEvent.DEACTIVATED, detail, key="k", at=0.0
    )
    # THEN its Event goes on the PyTorchJob and says the command with its own key
    [event] = posted_events(k8s)
    assert event["involvedObject"]["kind"] == "PyTorchJob"
    assert "`muster reactivate ml/train@pytorchjob` revives it" in event["message"]


@pytest.mark.parametrize(
    ("event", "detail", "reason"),
    [
        (LogEvent.PODS_READY, {"attempt": 1, "reason": "Started"}, "PodsReady"),
        (
            LogEvent.EVICTED,
            {"attempt": 1, "reason": "NodeFailures", "node": "n7", "notReady": ["p3"]},
            "EvictedDueToNodeFailures",
        ),
        (
            LogEvent.EVICTED,
            {"attempt": 1, "reason": "PodsReadyTimeout", "cause": "WaitForStart", "dryRun": True},
            "WouldEvictDueToPodsReadyTimeout",
        ),
        (LogEvent.WAIT_FOR_RECOVERY, {"attempt": 1, "deadline": 0.0}, "WaitForRecovery"),
    ],
)
def test_reasons_follow_kueue(event: LogEvent, detail: dict[str, Any], reason: str) -> None:
    shown = describe(event, detail)
    assert shown is not None and shown.reason == reason


def test_quiet_lifecycle_events_make_no_kubernetes_event() -> None:
    assert describe(LogEvent.SUBMITTED, {}) is None
    assert describe(LogEvent.FINISHED, {"reason": "Succeeded"}) is None


def test_an_eviction_names_at_most_five_pods() -> None:
    pods = [{"pod": f"p{n}", "phase": "Pending"} for n in range(8)]
    shown = describe(
        LogEvent.EVICTED,
        {"attempt": 1, "reason": "PodsReadyTimeout", "cause": "WaitForStart", "notReady": pods},
    )
    assert shown is not None
    assert shown.message.endswith("p4 (Pending) and 3 more")


def test_the_recording_cluster_sees_announcements() -> None:
    rig = Rig()
    rig.submit(KEY, 1)
    rig.admit()
    assert isinstance(rig.cluster, RecordingCluster)
    assert rig.cluster.announced == [(KEY, "Submitted"), (KEY, "Admitted")]


def test_a_workload_fault_eviction_and_deactivation_say_why() -> None:
    diagnosis = {"class": "WorkloadFault", "summary": "2 of 2 pods cannot pull image x: ..."}
    early = describe(
        LogEvent.EVICTED,
        {
            "attempt": 1,
            "reason": "WorkloadFault",
            "cause": "WaitForStart",
            "readyPods": 0,
            "gangSize": 2,
            "diagnosis": diagnosis,
        },
    )
    assert early is not None and early.reason == "EvictedDueToWorkloadFault"
    assert "failed on its own for workloadFaults.evictAfter" in early.message
    assert "2 of 2 pods cannot pull image x" in early.message
    gone = describe(
        LogEvent.DEACTIVATED,
        {"reason": "WorkloadFaults", "count": 1, "summary": "2 of 2 pods cannot pull image x"},
    )
    assert gone is not None and gone.reason == "DeactivatedDueToWorkloadFaults"
    assert gone.message.startswith("Deactivated: 2 of 2 pods cannot pull image x;")


def test_a_refused_admission_says_what_the_api_server_answered() -> None:
    shown = describe(
        LogEvent.EVICTED,
        {"attempt": 2, "reason": "AdmissionRefused", "error": "Admit: 403 Forbidden"},
    )
    assert shown is not None and shown.reason == "EvictedDueToAdmissionRefused"
    assert "refused to release it (Admit: 403 Forbidden)" in shown.message
    assert shown.message.endswith("queued again")


def test_a_workload_that_outgrew_its_admission_is_told_both_sizes() -> None:
    shown = describe(
        LogEvent.EVICTED,
        {
            "attempt": 1,
            "reason": "OutgrewAdmission",
            "admitted": {"gangSize": 8, "gpus": 64},
            "requested": {"gangSize": 64, "gpus": 512},
        },
    )
    assert shown is not None and shown.reason == "EvictedDueToOutgrewAdmission"
    assert shown.message == (
        "Evicted attempt 1: it asks for 64 pods and 512 GPUs, more than the 8 pods and "
        "64 GPUs it was admitted with; queued again with the new size"
    )
