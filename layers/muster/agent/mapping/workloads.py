"""Workloads: a labelled Job, JobSet or PyTorchJob, or a pod group from its pods.

The gang size comes from the spec (a Job's parallelism, capped by its completions;
a JobSet's replicas x parallelism; a PyTorchJob's replicas summed over its replica
types) unless `muster.io/min-available` asks for fewer; a pod group's from
`muster.io/min-available` on its pods. GPUs are a pod's (`resources`) times pods.
A bad annotation is reported in `problems` and ignored, never guessed at; a
workload whose pods the API server would refuse (a GPU count that is not whole) or
that is larger than Muster manages (`MAX_WORKLOAD_PODS`) is `refused`, with why:
the agent does not report it, so no admission pass ever expands it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from muster.agent.mapping.objects import (
    TOLERATED_TAINTS,
    count_of,
    labels,
    meta,
    notes_of,
    parse_k8s_time,
    workload_object_key,
)
from muster.core.copying import replace
from muster.core.durations import DurationError, parse_duration
from muster.core.model import Kind
from muster.core.topology import LABEL_KEYS, NODE_LABEL, parse_request
from muster.kube.conventions import (
    JOBSET_NAME_LABEL,
    MIN_AVAILABLE_ANNOTATION,
    PACKED_NODE_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    TIMEOUT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)
from muster.kube.resources import QuantityError, pod_gpus
from muster.schema import MAX_POD_GROUPS, MAX_WORKLOAD_PODS

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
    topology: str = ""  # `muster.io/topology`, canonical ("" for none)
    # Why the workload cannot be reported as it is ("" when it can).
    refused: str = ""


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
    parts = _WORKLOAD_PODS.get(kind)
    if parts is None:
        raise ValueError(f"kind: {kind} has no workload object")
    try:
        pods, gpus, templates, groups = parts(spec)
    except QuantityError as exc:
        pods, gpus, templates, groups = 0, 0, [], []
        refused = f"its pod template asks for {exc}"
    else:
        refused = _too_large(pods, groups)
    gang = _min_available(notes_of(obj), pods, problems)
    topology = _topology(notes_of(obj), problems)
    return WorkloadView(
        key=workload_object_key(kind, obj),
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
        placement=placement_rules(
            templates,
            tolerated,
            owned=bool(topology),
            packed=notes_of(obj).get(PACKED_NODE_ANNOTATION),
        ),
        topology=topology,
        refused=refused,
    )


def _too_large(pods: int, groups: Sequence[tuple[int, int]]) -> str:
    """Why a workload is beyond what Muster manages, or "" (bounds every per-pod list)."""
    if pods > MAX_WORKLOAD_PODS:
        return (
            f"{pods} pods (parallelism or replicas) are more than {MAX_WORKLOAD_PODS}, "
            "the most Muster manages in one workload"
        )
    if len(pod_shape_of(groups)) > MAX_POD_GROUPS:
        return f"its pods ask for more than {MAX_POD_GROUPS} different GPU counts"
    return ""


# (pods running at once, the GPUs they request, their pod templates, (pods, GPUs per pod) groups)
_WorkloadPods = tuple[int, int, list[Mapping[str, Any]], list[tuple[int, int]]]


def _job_workload_pods(spec: Mapping[str, Any]) -> _WorkloadPods:
    pods, gpus = _job_pods(spec)
    return pods, gpus, [spec.get("template") or {}], [(pods, pod_gpus(spec.get("template") or {}))]


def _jobset_workload_pods(spec: Mapping[str, Any]) -> _WorkloadPods:
    pods, gpus = 0, 0
    templates: list[Mapping[str, Any]] = []
    groups: list[tuple[int, int]] = []
    for rj in spec.get("replicatedJobs") or []:
        job_spec = ((rj.get("template") or {}).get("spec")) or {}
        n, g = _job_pods(job_spec)
        replicas = count_of(rj.get("replicas"), 1)
        pods, gpus = pods + replicas * n, gpus + replicas * g
        templates.append(job_spec.get("template") or {})
        groups.append((replicas * n, pod_gpus(job_spec.get("template") or {})))
    return pods, gpus, templates, groups


def _pytorchjob_workload_pods(spec: Mapping[str, Any]) -> _WorkloadPods:
    pods, gpus = 0, 0
    templates: list[Mapping[str, Any]] = []
    groups: list[tuple[int, int]] = []
    for rs in (spec.get("pytorchReplicaSpecs") or {}).values():
        replicas = count_of((rs or {}).get("replicas"), 1)
        pods += replicas
        gpus += replicas * pod_gpus((rs or {}).get("template") or {})
        templates.append((rs or {}).get("template") or {})
        groups.append((replicas, pod_gpus((rs or {}).get("template") or {})))
    return pods, gpus, templates, groups


# The kinds whose object is the workload (a pod group has none).
_WORKLOAD_PODS: dict[Kind, Callable[[Mapping[str, Any]], _WorkloadPods]] = {
    Kind.JOB: _job_workload_pods,
    Kind.JOBSET: _jobset_workload_pods,
    Kind.PYTORCHJOB: _pytorchjob_workload_pods,
}


def _class_name(pod_or_template: Mapping[str, Any]) -> str:
    name = (pod_or_template.get("spec") or {}).get("priorityClassName")
    return name if isinstance(name, str) else ""


def _job_pods(job_spec: Mapping[str, Any]) -> tuple[int, int]:
    """(pods running at once, GPUs they request) for a batch/v1 Job spec."""
    parallelism = count_of(job_spec.get("parallelism"), 1)
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
    """The view of a plain pod group from the pods that exist; None without pods.

    Also None when every pod has finished without the group succeeding (its
    succeeded pods being deleted after its end, say): active means pods that run
    or wait, so that an active group after its end is a new run of its name.

    The group is charged from all its members that have not finished (all of them
    once none is left): they must agree on what the charge is made of (the gang
    size, the GPUs each pod asks for, the queue, the priority, the PriorityClass,
    the timeout), or the group is refused with the first difference, never
    charged from one pod while the others ask for more.
    """
    members = sorted(pods, key=lambda p: str(meta(p).get("name")))
    if not members:
        return None
    problems: list[str] = []
    deciding = [p for p in members if _unfinished(p)] or members
    first, each, refused = _agreed(deciding)
    size = _group_size(first, problems)
    created = [t for t in (parse_k8s_time(meta(p).get("creationTimestamp")) for p in members) if t]
    status = _group_status(members, size)
    if status == "Active" and not any(_unfinished(p) for p in members):
        return None
    # The API server has resolved the pods' class (the default one included) and value.
    name, value = _class_name(first), (first.get("spec") or {}).get("priority")
    resolved = isinstance(value, int) and not isinstance(value, bool) and bool(name)
    topology = _topology(notes_of(first), problems)
    return WorkloadView(
        key=key,
        kind=Kind.POD_GROUP,
        queue=labels(first).get(QUEUE_LABEL, ""),
        gang_size=size,
        gpus=size * each,
        priority=_priority(notes_of(first), problems),
        created_at=min(created) if created else None,
        timeout=_timeout(notes_of(first), problems),
        status=status,
        problems=tuple(problems),
        class_names=(name,),
        priority_class=name if resolved else None,
        class_priority=value if resolved else None,
        shape=pod_shape_of([(size, each)]),
        placement=placement_rules(
            deciding,
            tolerated,
            owned=bool(topology),
            packed=notes_of(first).get(PACKED_NODE_ANNOTATION),
        ),
        topology=topology,
        refused=refused or _too_large(size, []),
    )


# What a pod group's charge is made of besides its GPUs, in `_charge_terms`' order.
_CHARGE_TERMS = (
    MIN_AVAILABLE_ANNOTATION,
    QUEUE_LABEL,
    PRIORITY_ANNOTATION,
    TIMEOUT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    "priorityClassName",
    "priority",
)


def _charge_terms(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """How a member says each of `_CHARGE_TERMS`, and its containers (whose GPUs the
    scheduler's formula reads)."""
    notes, spec = notes_of(pod), pod.get("spec") or {}
    return (
        notes.get(MIN_AVAILABLE_ANNOTATION),
        labels(pod).get(QUEUE_LABEL),
        notes.get(PRIORITY_ANNOTATION),
        notes.get(TIMEOUT_ANNOTATION),
        notes.get(TOPOLOGY_ANNOTATION),
        spec.get("priorityClassName"),
        spec.get("priority"),
        spec.get("containers"),
        spec.get("initContainers"),
    )


def _agreed(members: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], int, str]:
    """(the first member, the GPUs each member asks for, why the group is refused or "").

    Every member is read (its GPUs by the scheduler's formula, exactly), and the
    first that differs from the first member on any term of the charge refuses
    the group, naming both pods. Members of one template say the same, and their
    GPUs are read once.
    """
    first = members[0]
    try:
        each = pod_gpus(first)
    except QuantityError as exc:
        return first, 0, f"its pods ask for {exc}"
    said = _charge_terms(first)
    terms = len(_CHARGE_TERMS)
    for pod in members[1:]:
        found = _charge_terms(pod)
        if found == said:
            continue
        for what, expected, got in zip(_CHARGE_TERMS, said[:terms], found[:terms], strict=True):
            if got != expected:
                return first, 0, _disagree(what, first, expected, pod, got)
        try:
            gpus = pod_gpus(pod)
        except QuantityError as exc:
            return first, 0, f"its pods ask for {exc}"
        if gpus != each:
            return first, 0, _disagree("GPUs per pod", first, each, pod, gpus)
    return first, each, ""


def _disagree(what: str, a: Mapping[str, Any], said: Any, b: Mapping[str, Any], found: Any) -> str:
    return (
        f"its pods disagree on {what}: {meta(a).get('name')} has {said!r}, "
        f"{meta(b).get('name')} has {found!r}; every pod of a group must ask for the same"
    )


def _group_size(first: Mapping[str, Any], problems: list[str]) -> int:
    """The gang size the pods' annotation asks for (0, with a problem, without one)."""
    size = _int_annotation(notes_of(first), MIN_AVAILABLE_ANNOTATION, problems)
    if size is None or size < 1:
        problems.append(f"{MIN_AVAILABLE_ANNOTATION}: required on the pods of a pod group")
        size = 0
    return size


def _group_status(members: Sequence[Mapping[str, Any]], size: int) -> str:
    """Succeeded once a gang's worth of pods succeeded and none is left running."""
    succeeded = sum(1 for p in members if (p.get("status") or {}).get("phase") == "Succeeded")
    live = sum(1 for p in members if _unfinished(p))
    return "Succeeded" if size and succeeded >= size and live == 0 else "Active"


def _unfinished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


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


def placement_rules(
    templates: Iterable[Mapping[str, Any]],
    tolerated: frozenset[str] | None = None,
    *,
    owned: bool = False,
    packed: str | None = None,
) -> str:
    """The placement rules of pod templates the capacity check does not evaluate.

    The check knows each node's free GPUs and whether Muster's pods may land on it;
    a template that narrows or widens where its pods go (a node selector, an
    affinity, spread constraints, tolerations of other taints) makes
    the check fall back to quota for the workload. Returns "" when there are none.
    With `owned` (the workload asks for a topology), a node selector of topology
    labels alone is the one Muster set for its domain, not a rule of its own; with
    `packed` (the node Muster packed it onto, `muster.io/packed-node`), neither is a
    hostname selector naming that node.
    """
    known = TOLERATED_TAINTS if tolerated is None else tolerated
    found: set[str] = set()
    for template in templates:
        spec = template.get("spec") or {}
        for key in ("nodeSelector", "affinity", "topologySpreadConstraints"):
            if spec.get(key) and not (
                key == "nodeSelector" and _muster_only(spec[key], owned, packed)
            ):
                found.add(key)
        for toleration in spec.get("tolerations") or []:
            if (toleration or {}).get("key") not in known:
                found.add("tolerations")
    return ", ".join(sorted(found))


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


def _muster_only(selector: object, owned: bool, packed: str | None) -> bool:
    """A node selector of the labels Muster sets alone: a domain's topology labels (if
    the workload asks for a topology), the hostname of the node it packed it onto."""
    if not isinstance(selector, Mapping):
        return False
    keys = set(selector)
    if packed and selector.get(NODE_LABEL) == packed:
        keys.discard(NODE_LABEL)
    return not keys or (owned and keys <= LABEL_KEYS)


def _topology(notes: Mapping[str, str], problems: list[str]) -> str:
    text = notes.get(TOPOLOGY_ANNOTATION)
    if text is None:
        return ""
    try:
        return str(parse_request(str(text)))
    except ValueError as exc:
        problems.append(f"{TOPOLOGY_ANNOTATION}: {exc}")
        return ""


def _int_annotation(notes: Mapping[str, str], name: str, problems: list[str]) -> int | None:
    text = notes.get(name)
    if text is None:
        return None
    try:
        return int(str(text).strip())
    except ValueError:
        problems.append(f"{name}: expected a whole number, got {text!r}")
        return None
