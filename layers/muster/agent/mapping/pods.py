"""Pods: which workload a pod belongs to, what is reported of it, and what the agent keeps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from muster.agent.mapping.objects import count_of, labels, meta, notes_of
from muster.core.diagnosis import WORKLOAD_FAULT_REASONS
from muster.core.keys import workload_key
from muster.core.model import Kind
from muster.kube.conventions import (
    JOB_NAME_LABELS,
    JOB_UID_LABELS,
    JOBSET_NAME_LABEL,
    JOBSET_UID_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
)
from muster.schema import POD_PHASES


@dataclass(frozen=True, slots=True)
class PodView:
    """The fields of a `Pod Observed` event (without cluster, seq and time)."""

    workload: str
    pod: str
    uid: str
    phase: str
    ready: bool
    node: str | None
    reason: str | None
    message: str | None
    scheduled: bool | None = None
    waiting: str | None = None
    restarts: int = 0
    terminated: str | None = None
    exit_code: int | None = None
    owner: str = ""  # the uid of the workload object that owns it ("" unknown)


def compact_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Only what the mapping reads: the agent keeps many pods in memory."""
    m = meta(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            key: m[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "labels",
            )
            if key in m
        }
        | {"annotations": {k: v for k, v in notes_of(pod).items() if k.startswith("muster.io/")}}
        | _controller_of(m),
        "spec": {
            "nodeName": spec.get("nodeName"),
            "priorityClassName": spec.get("priorityClassName"),
            "priority": spec.get("priority"),
            "containers": [
                {"resources": c.get("resources") or {}} for c in spec.get("containers") or []
            ],
            "initContainers": [
                # A sidecar (`restartPolicy: Always`) adds up with the containers.
                {"resources": c.get("resources") or {}}
                | ({"restartPolicy": c["restartPolicy"]} if "restartPolicy" in c else {})
                for c in spec.get("initContainers") or []
            ],
        }
        | {
            key: spec[key]
            for key in ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints")
            if spec.get(key)
        },
        "status": {
            key: status[key]
            for key in (
                "phase",
                "conditions",
                "containerStatuses",
                "initContainerStatuses",
                "reason",
                "message",
            )
            if key in status
        },
    }


def _controller_of(m: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's controller reference, reduced to what `pod_workload` and `pod_owner` read."""
    ref = _controller(m)
    if ref is None:
        return {}
    return {"ownerReferences": [{k: ref.get(k) for k in ("kind", "name", "uid", "controller")}]}


def _controller(m: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference with `controller: true` (Kubernetes allows at most one)."""
    for ref in m.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


# The kind of the controller that creates a workload's pods: a Job's and a
# PyTorchJob's pods are the workload's own, a JobSet's are its child Jobs'.
_CONTROLLER_KINDS = {Kind.JOB: "Job", Kind.PYTORCHJOB: "PyTorchJob", Kind.JOBSET: "Job"}


def pod_owner(kind: Kind, pod: Mapping[str, Any]) -> str:
    """The uid of the workload object of `kind` that owns `pod` ("" when unknown).

    A Job's and a PyTorchJob's pods name it as their controller; a JobSet's pods are
    its child Jobs', and JobSet labels them with its uid. A pod group has no object.
    A terminating pod of a deleted object keeps its owner's uid, so the object
    re-created under its name is not credited with it.
    """
    ref = _controller(meta(pod))
    wanted = _CONTROLLER_KINDS.get(kind)
    if ref is None or wanted is None or ref.get("kind") != wanted:
        return ""
    if kind is Kind.JOBSET:
        return str(labels(pod).get(JOBSET_UID_LABEL) or "")
    return str(ref.get("uid") or "")


def pod_workload(pod: Mapping[str, Any]) -> tuple[Kind, str] | None:
    """(kind, workload key) of the workload a pod belongs to; None when it is nobody's.

    Labels name the workload, but whoever may create a pod may write them. So a pod
    of a Job, JobSet or PyTorchJob counts only when its controller is of the kind
    that creates that workload's pods: the Job or PyTorchJob itself, or for a
    JobSet a child Job named after it (`<jobset>-...`). A bare pod labelled
    `job-name: X` is then a pod Muster does not manage (its GPUs are foreign ones),
    and the control plane compares the controller's uid with the workload's
    (`pod_owner`). A reference to an object that does not exist is garbage
    collected with its pod; one forged to name the workload itself is beyond what
    the agent can tell (the workload's controller takes such a pod for its own
    too). A pod whose controller was deleted with `--cascade=orphan` loses the
    reference and stops counting here (`orphaned_from`). A pod group's pods are its
    members by their labels alone.
    """
    namespace = meta(pod).get("namespace")
    if not namespace:
        return None
    found = labels(pod)
    if found.get(POD_GROUP_LABEL) and found.get(QUEUE_LABEL):
        return Kind.POD_GROUP, workload_key(Kind.POD_GROUP, namespace, found[POD_GROUP_LABEL])
    named = _named_workload(found)
    if named is None:
        return None
    kind, name = named
    ref = _controller(meta(pod))
    if ref is None or ref.get("kind") != _CONTROLLER_KINDS[kind] or not ref.get("uid"):
        return None
    if kind is Kind.JOBSET and not str(ref.get("name") or "").startswith(f"{name}-"):
        return None
    return kind, workload_key(kind, namespace, name)


def orphaned_from(pod: Mapping[str, Any]) -> tuple[Kind, str, str] | None:
    """(kind, workload key, uid) of the Job a pod without a controller was orphaned from
    (`--cascade=orphan`), by the name and uid labels the Job controller put on it, which
    the orphaning leaves; None for a pod with a controller or without both labels.

    Whoever creates a bare pod may write these labels too, so the pod is only ever
    reported as the object of that uid's, never Ready (`Memory.workload_of`). A
    JobSet's pods are its child Jobs' (`pod_workload` maps them while those exist),
    and a PyTorchJob's carry no uid label: neither is named here.
    """
    m = meta(pod)
    namespace = m.get("namespace")
    if not namespace or _controller(m) is not None:
        return None
    found = labels(pod)
    name, uid = _agreed(found, JOB_NAME_LABELS), _agreed(found, JOB_UID_LABELS)
    if not name or not uid or _named_workload(found) != (Kind.JOB, name):
        return None
    return Kind.JOB, workload_key(Kind.JOB, namespace, name), uid


def _agreed(found: Mapping[str, str], keys: Sequence[str]) -> str:
    """The one value the labels `keys` that are set hold ("" if none is, or they differ)."""
    values = {str(found[k]) for k in keys if found.get(k)}
    return values.pop() if len(values) == 1 else ""


def _named_workload(found: Mapping[str, str]) -> tuple[Kind, str] | None:
    """The (kind, name) of the workload a pod's labels name."""
    if found.get(JOBSET_NAME_LABEL):
        return Kind.JOBSET, found[JOBSET_NAME_LABEL]
    if found.get(KUBEFLOW_JOB_NAME_LABEL):
        return Kind.PYTORCHJOB, found[KUBEFLOW_JOB_NAME_LABEL]
    for label in JOB_NAME_LABELS:
        if found.get(label):
            return Kind.JOB, found[label]
    return None


def pod_view(workload: str, pod: Mapping[str, Any], kind: Kind | None = None) -> PodView:
    """The pod as a `Pod Observed` event reports it; with `kind`, its owner's uid too."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase not in POD_PHASES:
        phase = "Unknown"
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    reason, message = (None, None) if ready else _not_ready_reason(status, conditions)
    node = (pod.get("spec") or {}).get("nodeName")
    scheduled_status = (conditions.get("PodScheduled") or {}).get("status")
    scheduled = {"True": True, "False": False}.get(str(scheduled_status))
    if node:
        scheduled = True
    waiting, restarts, terminated, exit_code = _container_health(status)
    return PodView(
        workload=workload,
        pod=str(meta(pod).get("name")),
        uid=str(meta(pod).get("uid") or ""),
        phase=phase,
        ready=ready,
        node=node,
        reason=reason,
        message=message,
        scheduled=scheduled,
        waiting=waiting,
        restarts=restarts,
        terminated=terminated,
        exit_code=exit_code,
        owner=pod_owner(kind, pod) if kind is not None else "",
    )


def _container_health(status: Mapping[str, Any]) -> tuple[str | None, int, str | None, int | None]:
    """(waiting reason, restarts, last termination reason, its exit code) of the pod's
    most troubled container: one whose waiting reason says the workload is at fault
    first, then the one that restarted most. Bounded whatever the container count."""
    statuses = [
        cs
        for cs in list(status.get("initContainerStatuses") or [])
        + list(status.get("containerStatuses") or [])
        if isinstance(cs, Mapping)
    ]
    worst: Mapping[str, Any] | None = None
    for cs in statuses:
        if worst is None or count_of(cs.get("restartCount"), 0) > count_of(
            worst.get("restartCount"), 0
        ):
            worst = cs
    if worst is None:
        return _waiting_reason(statuses), 0, None, None
    terminated, exit_code = _termination(worst)
    return _waiting_reason(statuses), count_of(worst.get("restartCount"), 0), terminated, exit_code


def _waiting_reason(statuses: Sequence[Mapping[str, Any]]) -> str | None:
    """The first waiting reason that blames the workload, else the first one at all."""
    waiting: str | None = None
    for cs in statuses:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if isinstance(reason, str) and reason:
            if reason in WORKLOAD_FAULT_REASONS:
                waiting = reason
                break
            waiting = waiting or reason
    return waiting


def _termination(container: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """(reason, exit code) of the container's current or last termination, unless it completed."""
    ended = (container.get("state") or {}).get("terminated") or (
        (container.get("lastState") or {}).get("terminated")
    )
    if not isinstance(ended, Mapping):
        return None, None
    reason = ended.get("reason")
    terminated = reason if isinstance(reason, str) and reason else None
    code = ended.get("exitCode")
    exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    if terminated == "Completed" and exit_code == 0:
        return None, None
    return terminated, exit_code


def _not_ready_reason(
    status: Mapping[str, Any], conditions: Mapping[str, Mapping[str, Any]]
) -> tuple[str | None, str | None]:
    """The most telling reason a pod is not Ready, for "why was my job evicted?"."""
    for cs in list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    ):
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            detail = state.get(kind)
            if detail and detail.get("reason") and detail.get("reason") != "Completed":
                return detail["reason"], detail.get("message")
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        return scheduled.get("reason"), scheduled.get("message")
    if status.get("reason"):
        return status["reason"], status.get("message")
    return None, None
