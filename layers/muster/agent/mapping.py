"""From Kubernetes objects to what Muster needs to know about them (pure functions).

The gang size comes from the spec (a Job's parallelism, capped by its completions;
a JobSet's replicas x parallelism; a PyTorchJob's replicas summed over its replica
types) unless `muster.io/min-available` asks for fewer; a pod group's from
`muster.io/min-available` on its pods. GPUs are `nvidia.com/gpu` per pod times pods.
A bad annotation is reported in `problems` and ignored, never guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from muster.core.copying import replace
from muster.core.diagnosis import WORKLOAD_FAULT_REASONS
from muster.core.durations import DurationError, parse_duration
from muster.core.model import Kind
from muster.kube.conventions import (
    GPU_RESOURCE,
    JOB_NAME_LABELS,
    JOBSET_NAME_LABEL,
    KUBEFLOW_JOB_NAME_LABEL,
    MIN_AVAILABLE_ANNOTATION,
    NODE_HEALTH_LABEL,
    POD_GROUP_LABEL,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    TIMEOUT_ANNOTATION,
)
from muster.schema import POD_PHASES

# Which condition on each kind says the workload has ended, and how.
FINISHED_CONDITIONS: dict[Kind, dict[str, str]] = {
    Kind.JOB: {"Complete": "Succeeded", "Failed": "Failed"},
    Kind.JOBSET: {"Completed": "Succeeded", "Failed": "Failed"},
    Kind.PYTORCHJOB: {"Succeeded": "Succeeded", "Failed": "Failed"},
}


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """The fields of a `Workload Observed` event (without cluster, seq and time)."""

    key: str
    kind: Kind
    queue: str
    gang_size: int
    gpus: int = 0
    priority: int = 0
    created_at: datetime | None = None
    timeout: str | None = None
    status: str = "Active"
    problems: tuple[str, ...] = field(default=(), compare=False)
    uid: str = ""  # the object's uid (a pod group has no object of its own)
    # The PriorityClass each pod template names ("" for none); the class the pods run
    # at and its value once resolved (`with_priority_class`; a pod group's pods come
    # resolved by the API server).
    class_names: tuple[str, ...] = ()
    priority_class: str | None = None
    class_priority: int | None = None
    # For the capacity check: (pods, GPUs each) groups, and the placement rules of
    # its pod templates the check does not evaluate ("" when none).
    shape: tuple[tuple[int, int], ...] = ()
    placement: str = ""


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


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def notes_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def object_key(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))


def parse_k8s_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# --------------------------------------------------------------------------- workloads


def workload_view(
    kind: Kind, obj: Mapping[str, Any], tolerated: frozenset[str] | None = None
) -> WorkloadView | None:
    """The view of a labelled Job / JobSet / PyTorchJob; None if it is not Muster's.

    `tolerated`: the taint keys the capacity check treats as tolerated by every
    workload (default `TOLERATED_TAINTS`).
    """
    queue = labels(obj).get(QUEUE_LABEL)
    if not queue:
        return None
    if kind is Kind.JOB and labels(obj).get(JOBSET_NAME_LABEL):
        return None  # a JobSet's child Job: the JobSet is the workload
    spec = obj.get("spec") or {}
    problems: list[str] = []
    templates: list[Mapping[str, Any]] = []
    groups: list[tuple[int, int]] = []
    if kind is Kind.JOB:
        pods, gpus = _job_pods(spec)
        templates.append(spec.get("template") or {})
        groups.append((pods, pod_gpus(spec.get("template") or {})))
    elif kind is Kind.JOBSET:
        pods, gpus = 0, 0
        for rj in spec.get("replicatedJobs") or []:
            job_spec = ((rj.get("template") or {}).get("spec")) or {}
            n, g = _job_pods(job_spec)
            replicas = _count(rj.get("replicas"), 1)
            pods, gpus = pods + replicas * n, gpus + replicas * g
            templates.append(job_spec.get("template") or {})
            groups.append((replicas * n, pod_gpus(job_spec.get("template") or {})))
    elif kind is Kind.PYTORCHJOB:
        pods, gpus = 0, 0
        for rs in (spec.get("pytorchReplicaSpecs") or {}).values():
            replicas = _count((rs or {}).get("replicas"), 1)
            pods += replicas
            gpus += replicas * pod_gpus((rs or {}).get("template") or {})
            templates.append((rs or {}).get("template") or {})
            groups.append((replicas, pod_gpus((rs or {}).get("template") or {})))
    else:
        raise ValueError(f"kind: {kind} has no workload object")
    gang = _min_available(notes_of(obj), pods, problems)
    return WorkloadView(
        key=object_key(obj),
        kind=kind,
        queue=queue,
        gang_size=gang,
        gpus=gpus,
        priority=_priority(notes_of(obj), problems),
        created_at=parse_k8s_time(meta(obj).get("creationTimestamp")),
        timeout=_timeout(notes_of(obj), problems),
        status=_finished(kind, obj) or "Active",
        problems=tuple(problems),
        uid=str(meta(obj).get("uid") or ""),
        class_names=tuple(_class_name(t) for t in templates),
        shape=pod_shape_of(groups),
        placement=placement_rules(templates, tolerated),
    )


def _class_name(pod_or_template: Mapping[str, Any]) -> str:
    name = (pod_or_template.get("spec") or {}).get("priorityClassName")
    return name if isinstance(name, str) else ""


def _job_pods(job_spec: Mapping[str, Any]) -> tuple[int, int]:
    """(pods running at once, GPUs they request) for a batch/v1 Job spec."""
    parallelism = _count(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    if isinstance(completions, int) and completions > 0:
        parallelism = min(parallelism, completions)
    return parallelism, parallelism * pod_gpus(job_spec.get("template") or {})


def _finished(kind: Kind, obj: Mapping[str, Any]) -> str | None:
    wanted = FINISHED_CONDITIONS[kind]
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in wanted:
            return wanted[condition["type"]]
    return None


def pod_group_view(
    key: str, pods: Iterable[Mapping[str, Any]], tolerated: frozenset[str] | None = None
) -> WorkloadView | None:
    """The view of a plain pod group from the pods that exist; None without pods."""
    members = sorted(pods, key=lambda p: str(meta(p).get("name")))
    if not members:
        return None
    first = members[0]
    problems: list[str] = []
    size = _int_annotation(notes_of(first), MIN_AVAILABLE_ANNOTATION, problems)
    if size is None or size < 1:
        problems.append(f"{MIN_AVAILABLE_ANNOTATION}: required on the pods of a pod group")
        size = 0
    created = [t for t in (parse_k8s_time(meta(p).get("creationTimestamp")) for p in members) if t]
    succeeded = sum(1 for p in members if (p.get("status") or {}).get("phase") == "Succeeded")
    live = sum(
        1 for p in members if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    status = "Succeeded" if size and succeeded >= size and live == 0 else "Active"
    # The API server has resolved the pods' class (the default one included) and value.
    name, value = _class_name(first), (first.get("spec") or {}).get("priority")
    resolved = isinstance(value, int) and not isinstance(value, bool) and bool(name)
    return WorkloadView(
        key=key,
        kind=Kind.POD_GROUP,
        queue=labels(first).get(QUEUE_LABEL, ""),
        gang_size=size,
        gpus=size * pod_gpus(first),
        priority=_priority(notes_of(first), problems),
        created_at=min(created) if created else None,
        timeout=_timeout(notes_of(first), problems),
        status=status,
        problems=tuple(problems),
        class_names=(name,),
        priority_class=name if resolved else None,
        class_priority=value if resolved else None,
        shape=pod_shape_of([(size, pod_gpus(first))]),
        placement=placement_rules([first], tolerated),
    )


# --------------------------------------------------------------------------- priority classes


@dataclass(frozen=True, slots=True)
class PriorityClasses:
    """The cluster's `scheduling.k8s.io/v1` PriorityClasses: name -> value, and the
    `globalDefault` one (the lowest-valued if several, as the API server picks)."""

    values: Mapping[str, int] = field(default_factory=dict)
    default: str | None = None

    @classmethod
    def of(cls, items: Iterable[Mapping[str, Any]]) -> PriorityClasses:
        values: dict[str, int] = {}
        defaults: list[tuple[int, str]] = []
        for obj in items:
            name, value = meta(obj).get("name"), obj.get("value")
            if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
                continue
            values[name] = value
            if obj.get("globalDefault") is True:
                defaults.append((value, name))
        return cls(values, min(defaults)[1] if defaults else None)


def with_priority_class(view: WorkloadView, classes: PriorityClasses | None) -> WorkloadView:
    """The view with the PriorityClass its pods run at and that class's value.

    A template that names none gets the cluster's default class, as its pods would.
    Of several classes the highest-valued counts; a class that does not exist comes
    first (value None), so that the control plane says why the workload waits.
    Without a listing of the classes (`None`), none is reported.
    """
    if view.kind is Kind.POD_GROUP and view.class_priority is not None:
        return view
    found: list[tuple[int, str]] = []
    for named in view.class_names or ("",):
        name = named or (classes.default if classes is not None else None)
        if name is None or classes is None:
            continue
        value = classes.values.get(name)
        if value is None:
            return replace(view, priority_class=name, class_priority=None)
        found.append((value, name))
    value, name = max(found) if found else (None, None)
    return replace(view, priority_class=name, class_priority=value)


def pod_shape_of(groups: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """(pods, GPUs each) groups merged by size, largest pods first; empty groups dropped."""
    merged: dict[int, int] = {}
    for count, gpus in groups:
        if count > 0:
            merged[gpus] = merged.get(gpus, 0) + count
    return tuple((count, gpus) for gpus, count in sorted(merged.items(), reverse=True))


# Taints a GPU pod tolerates as a matter of course: the capacity check treats nodes
# with only these as open to Muster's workloads, and tolerations of only these keys
# as nothing to evaluate. The agent's `--tolerated-taints` adds a cluster's own.
TOLERATED_TAINTS = frozenset({"nvidia.com/gpu"})


def placement_rules(
    templates: Iterable[Mapping[str, Any]], tolerated: frozenset[str] | None = None
) -> str:
    """The placement rules of pod templates the capacity check does not evaluate.

    The check knows each node's free GPUs and whether Muster's pods may land on it;
    a template that narrows or widens where its pods go (a node selector, an
    affinity, spread constraints, tolerations of other taints) makes
    the check fall back to quota for the workload. Returns "" when there are none.
    """
    known = TOLERATED_TAINTS if tolerated is None else tolerated
    found: set[str] = set()
    for template in templates:
        spec = template.get("spec") or {}
        for key in ("nodeSelector", "affinity", "topologySpreadConstraints"):
            if spec.get(key):
                found.add(key)
        for toleration in spec.get("tolerations") or []:
            if (toleration or {}).get("key") not in known:
                found.add("tolerations")
    return ", ".join(sorted(found))


def pod_gpus(pod_or_template: Mapping[str, Any]) -> int:
    """GPUs one pod requests: its containers together, or its largest init container."""
    spec = pod_or_template.get("spec") or {}

    def gpus(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        values = [(resources.get(part) or {}).get(GPU_RESOURCE) for part in ("requests", "limits")]
        return max((_count(v, 0) for v in values if v is not None), default=0)

    regular = sum(gpus(c) for c in spec.get("containers") or [])
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(regular, init)


def _min_available(notes: Mapping[str, str], spec_pods: int, problems: list[str]) -> int:
    wanted = _int_annotation(notes, MIN_AVAILABLE_ANNOTATION, problems)
    if wanted is None:
        return spec_pods
    if wanted < 1:
        problems.append(f"{MIN_AVAILABLE_ANNOTATION}: must be at least 1, got {wanted}")
        return spec_pods
    return min(wanted, spec_pods) if spec_pods else wanted


def _priority(notes: Mapping[str, str], problems: list[str]) -> int:
    value = _int_annotation(notes, PRIORITY_ANNOTATION, problems)
    return value if value is not None else 0


def _timeout(notes: Mapping[str, str], problems: list[str]) -> str | None:
    text = notes.get(TIMEOUT_ANNOTATION)
    if text is None:
        return None
    try:
        parse_duration(text)
    except DurationError as exc:
        problems.append(f"{TIMEOUT_ANNOTATION}: {exc}")
        return None
    return text


def _int_annotation(notes: Mapping[str, str], name: str, problems: list[str]) -> int | None:
    text = notes.get(name)
    if text is None:
        return None
    try:
        return int(str(text).strip())
    except ValueError:
        problems.append(f"{name}: expected a whole number, got {text!r}")
        return None


def _count(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return default


# --------------------------------------------------------------------------- pods


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
        | {"annotations": {k: v for k, v in notes_of(pod).items() if k.startswith("muster.io/")}},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "priorityClassName": spec.get("priorityClassName"),
            "priority": spec.get("priority"),
            "containers": [
                {"resources": c.get("resources") or {}} for c in spec.get("containers") or []
            ],
            "initContainers": [
                {"resources": c.get("resources") or {}} for c in spec.get("initContainers") or []
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


def pod_workload(pod: Mapping[str, Any]) -> tuple[Kind, str] | None:
    """(kind, "namespace/name") of the workload a pod belongs to, from its labels."""
    namespace = meta(pod).get("namespace")
    found = labels(pod)
    if not namespace:
        return None
    if found.get(POD_GROUP_LABEL) and found.get(QUEUE_LABEL):
        return Kind.POD_GROUP, f"{namespace}/{found[POD_GROUP_LABEL]}"
    if found.get(JOBSET_NAME_LABEL):
        return Kind.JOBSET, f"{namespace}/{found[JOBSET_NAME_LABEL]}"
    if found.get(KUBEFLOW_JOB_NAME_LABEL):
        return Kind.PYTORCHJOB, f"{namespace}/{found[KUBEFLOW_JOB_NAME_LABEL]}"
    for label in JOB_NAME_LABELS:
        if found.get(label):
            return Kind.JOB, f"{namespace}/{found[label]}"
    return None


def pod_view(workload: str, pod: Mapping[str, Any]) -> PodView:
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
    waiting: str | None = None
    for cs in statuses:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if isinstance(reason, str) and reason:
            if reason in WORKLOAD_FAULT_REASONS:
                waiting = reason
                break
            waiting = waiting or reason
    worst: Mapping[str, Any] | None = None
    for cs in statuses:
        if worst is None or _count(cs.get("restartCount"), 0) > _count(
            worst.get("restartCount"), 0
        ):
            worst = cs
    restarts, terminated, exit_code = 0, None, None
    if worst is not None:
        restarts = _count(worst.get("restartCount"), 0)
        ended = (worst.get("state") or {}).get("terminated") or (
            (worst.get("lastState") or {}).get("terminated")
        )
        if isinstance(ended, Mapping):
            reason = ended.get("reason")
            terminated = reason if isinstance(reason, str) and reason else None
            code = ended.get("exitCode")
            exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
            if terminated == "Completed" and exit_code == 0:
                terminated, exit_code = None, None
    return waiting, restarts, terminated, exit_code


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


# --------------------------------------------------------------------------- nodes


# HyperPod's health label values on which new pods may still land.
SCHEDULABLE_HEALTH = frozenset({"Schedulable", "SchedulablePreferred"})


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a `Node Observed` event says of a node (the foreign GPUs are the agent's sum)."""

    ready: bool
    health: str | None
    gpus: int = 0  # allocatable nvidia.com/gpu
    unschedulable: str | None = None  # why new pods may not land on it; None: they may


def node_view(node: Mapping[str, Any], tolerated: frozenset[str] | None = None) -> NodeView:
    """Ready, the HyperPod health label, allocatable GPUs, and whether new pods may land.

    New pods may not land on a cordoned node, a NotReady one, one whose HyperPod
    health label says it is unschedulable, or one with a NoSchedule or NoExecute
    taint that Muster's workloads do not tolerate (`tolerated`, by default
    `TOLERATED_TAINTS`).
    """
    known = TOLERATED_TAINTS if tolerated is None else tolerated
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    health = labels(node).get(NODE_HEALTH_LABEL)
    spec = node.get("spec") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    why: str | None = None
    if spec.get("unschedulable") is True:
        why = "cordoned"
    elif not ready:
        why = "NotReady"
    elif health is not None and health not in SCHEDULABLE_HEALTH:
        why = f"health {health}"
    else:
        for taint in spec.get("taints") or []:
            effect = (taint or {}).get("effect")
            key = (taint or {}).get("key")
            if effect in ("NoSchedule", "NoExecute") and key not in known:
                value = taint.get("value")
                why = f"taint {key}{'=' + str(value) if value else ''}:{effect}"
                break
    return NodeView(ready, health, _count(allocatable.get(GPU_RESOURCE), 0), why)
