"""Telling a broken job from a busy cluster: each not-ready pod's class, from real pod shapes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from muster.agent.mapping import pod_view
from muster.core import NodeObserved, PodObserved, Workload, decide
from muster.core.diagnosis import PodClass, classify, diagnose, fails_on_its_own
from muster.core.model import Pod

from tests.unit import pod_shapes as shapes
from tests.unit.conftest import settings, submit

KEY = "team-a/llama"


def observed(shape: dict[str, Any], seq: int = 2) -> PodObserved:
    """The control plane's view of a pod object, through the agent's own mapping."""
    v = pod_view(KEY, shape)
    return PodObserved(
        KEY,
        v.pod,
        seq,
        uid=v.uid,
        phase=v.phase,
        ready=v.ready,
        node=v.node,
        reason=v.reason,
        message=v.message,
        scheduled=v.scheduled,
        waiting=v.waiting,
        restarts=v.restarts,
        terminated=v.terminated,
        exit_code=v.exit_code,
    )


def admitted(pods: int = 2) -> Workload:
    from muster.core import AdmissionGranted

    s = settings()
    w = decide(None, submit(KEY, pods=pods), s, 0.0).workload
    w = decide(w, AdmissionGranted(KEY, 1), s, 1.0).workload
    assert w is not None
    return w


def pod_of(shape: dict[str, Any]) -> Pod:
    w = decide(admitted(), observed(shape), settings(), 2.0).workload
    assert w is not None
    return w.pods[shape["metadata"]["name"]]


CASES = [
    # (shape, class, the reason that decided it, exit code, restarts)
    (shapes.IMAGE_PULL_BACKOFF, PodClass.WORKLOAD_FAULT, "ImagePullBackOff", None, 0),
    (shapes.ERR_IMAGE_PULL, PodClass.WORKLOAD_FAULT, "ErrImagePull", None, 0),
    (shapes.INVALID_IMAGE_NAME, PodClass.WORKLOAD_FAULT, "InvalidImageName", None, 0),
    (
        shapes.CREATE_CONTAINER_CONFIG_ERROR,
        PodClass.WORKLOAD_FAULT,
        "CreateContainerConfigError",
        None,
        0,
    ),
    (shapes.CREATE_CONTAINER_ERROR, PodClass.WORKLOAD_FAULT, "CreateContainerError", None, 0),
    (shapes.CRASH_LOOP_BACKOFF, PodClass.WORKLOAD_FAULT, "CrashLoopBackOff", 1, 3),
    (shapes.OOM_KILLED_RESTARTING, PodClass.WORKLOAD_FAULT, "OOMKilled", 137, 4),
    (shapes.FAILED, PodClass.WORKLOAD_FAULT, "Error", 2, 0),
    (shapes.UNSCHEDULABLE, PodClass.CAPACITY, "Unschedulable", None, 0),
    (shapes.NOT_YET_SCHEDULED, PodClass.CAPACITY, "Unscheduled", None, 0),
    (shapes.STARTING_RUNNING, PodClass.STARTING, None, None, 0),
    (shapes.CONTAINER_CREATING, PodClass.STARTING, "ContainerCreating", None, 0),
    (shapes.RESTARTED_ONCE, PodClass.STARTING, None, 1, 1),
]


@pytest.mark.parametrize(
    ("shape", "cls", "reason", "exit_code", "restarts"),
    CASES,
    ids=[c[0]["metadata"]["name"] + "-" + str(c[2]) for c in CASES],
)
def test_each_real_pod_shape_is_classified(
    shape: dict[str, Any], cls: PodClass, reason: str | None, exit_code: int | None, restarts: int
) -> None:
    # GIVEN a pod object as the API returns it, seen by the agent and applied by the core
    pod = pod_of(shape)
    # WHEN it is classified
    found = classify(pod)
    # THEN its class, reason, exit code and restarts are Kubernetes' own
    assert (found.cls, found.reason, found.exit_code, found.restarts) == (
        cls,
        reason,
        exit_code,
        restarts,
    )


def test_a_pod_on_a_not_ready_node_is_a_node_fault() -> None:
    # GIVEN a running pod whose node then goes NotReady
    w = decide(admitted(), observed(shapes.ON_NOT_READY_NODE, seq=2), settings(), 2.0).workload
    w = decide(w, NodeObserved("gpu-node-3", ready=False, workload=KEY, seq=3), settings(), 3.0)
    pod = w.workload.pods["llama-10"]  # type: ignore[union-attr]
    # THEN it is the node's fault, not the job's
    assert classify(pod).cls is PodClass.NODE_FAULT


def test_the_agent_reports_what_kubernetes_says() -> None:
    v = pod_view(KEY, shapes.CRASH_LOOP_BACKOFF)
    assert (v.scheduled, v.waiting, v.restarts, v.terminated, v.exit_code) == (
        True,
        "CrashLoopBackOff",
        3,
        "Error",
        1,
    )
    u = pod_view(KEY, shapes.UNSCHEDULABLE)
    assert (u.scheduled, u.node, u.reason) == (False, None, "Unschedulable")
    assert pod_view(KEY, shapes.NOT_YET_SCHEDULED).scheduled is None


def test_the_image_named_in_the_pull_message_is_kept() -> None:
    assert classify(pod_of(shapes.IMAGE_PULL_BACKOFF)).image == shapes.IMAGE


def test_the_gang_sentence_says_it_plainly() -> None:
    # GIVEN a gang of 8 of which 4 cannot pull their image and 4 are Ready
    w = admitted(8)
    s = settings()
    for i in range(8):
        shape: dict[str, Any] = (
            shapes.IMAGE_PULL_BACKOFF if i < 4 else shapes.STARTING_RUNNING
        ) | {"metadata": {**shapes.IMAGE_PULL_BACKOFF["metadata"], "name": f"w-{i}"}}
        e = observed(shape, seq=10 + i)
        if i >= 4:
            e = PodObserved(KEY, e.pod, e.seq, uid=e.uid, phase="Running", ready=True, node="n")
        w = decide(w, e, s, 2.0).workload  # type: ignore[assignment]
    found = diagnose(w)
    assert found.workload_fault and fails_on_its_own(w)
    assert found.sentence() == (
        f"4 of 8 pods cannot pull image {shapes.IMAGE} (ImagePullBackOff): the job fails on its own"
    )


def test_a_gang_with_a_pod_not_created_yet_is_never_a_workload_fault() -> None:
    # GIVEN a gang of 3 whose 2 existing pods crash loop, the third not created yet
    w = admitted(3)
    for i, shape in enumerate((shapes.CRASH_LOOP_BACKOFF, shapes.OOM_KILLED_RESTARTING)):
        w = decide(w, observed(shape, seq=5 + i), settings(), 2.0).workload  # type: ignore[assignment]
    found = diagnose(w)
    assert found.counts() == {"Capacity": 1, "WorkloadFault": 2}
    assert not found.workload_fault and not fails_on_its_own(w)


# --------------------------------------------------------------------------- property

HEALTHY = [
    shapes.UNSCHEDULABLE,
    shapes.NOT_YET_SCHEDULED,
    shapes.STARTING_RUNNING,
    shapes.CONTAINER_CREATING,
    shapes.RESTARTED_ONCE,
]


@hsettings(max_examples=60, deadline=None)
@given(
    gang=st.integers(min_value=1, max_value=12),
    picks=st.lists(st.integers(min_value=0, max_value=len(HEALTHY) - 1), max_size=12),
    ready=st.lists(st.booleans(), max_size=12),
)
def test_a_gang_that_is_starting_or_waiting_for_capacity_is_never_a_fault(
    gang: int, picks: list[int], ready: list[bool]
) -> None:
    # GIVEN a gang whose pods are each starting, waiting for room, or Ready
    w = admitted(gang)
    s = settings(workloadFaults={"limitCount": 0, "evictAfter": "1s"})
    for i, pick in enumerate(picks[:gang]):
        shape = HEALTHY[pick] | {"metadata": {**HEALTHY[pick]["metadata"], "name": f"p-{i}"}}
        e = observed(shape, seq=10 + i)
        if i < len(ready) and ready[i]:
            e = PodObserved(KEY, e.pod, e.seq, uid=e.uid, phase="Running", ready=True, node="n")
        d = decide(w, e, s, 2.0)
        w = d.workload  # type: ignore[assignment]
        # THEN no fault timer is ever armed
        assert w.fault_timer is None
    # AND no pod is a workload fault, nor is the gang (by either check)
    assert not fails_on_its_own(w)
    found = diagnose(w)
    assert all(p.cls is not PodClass.WORKLOAD_FAULT for p in found.pods)
    assert not found.workload_fault
