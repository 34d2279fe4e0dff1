"""Why each pod of a gang is not Ready: a busy cluster, a broken job, or a broken node.

Gang scheduling retries a gang that could not start because the cluster was busy.
A gang whose pods fail on their own (an image that cannot be pulled, a wrong
configuration, containers that crash at start) does not get better by waiting in
the queue, and every retry holds the whole gang's GPUs for a full timeout. This
module tells the two apart from what Kubernetes reports about each pod; `decide`
uses it to stop retrying broken jobs (`workloadFaults`) and to say why in every
eviction's history entry.

Pure and table-driven: the reasons are Kubernetes' own (kubelet's container
waiting reasons, the scheduler's PodScheduled reasons, the pod's phase).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from operator import itemgetter
from typing import Any

from muster.core.model import Pod, Workload


class PodClass(StrEnum):
    """What keeps one pod from being Ready."""

    CAPACITY = "Capacity"  # not placed: the scheduler found no room (or has not tried yet)
    WORKLOAD_FAULT = "WorkloadFault"  # placed, and failing on its own
    NODE_FAULT = "NodeFault"  # its node is NotReady, lost or being replaced
    STARTING = "Starting"  # placed, containers starting or running, not Ready yet


# Container waiting reasons the kubelet reports for a container that cannot start
# because of the workload itself (its image, its configuration, its command).
IMAGE_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "ImageInspectError"}
)
WORKLOAD_FAULT_REASONS = IMAGE_REASONS | frozenset(
    {
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
        "RunContainerError",
        "PreStartHookError",
        "PostStartHookError",
    }
)
# Reasons that say the node, not the workload, is at fault (ours and the kubelet's).
NODE_REASONS = frozenset({"NodeNotReady", "NodeLost"})
# Why a Failed pod failed when the node made it fail (node-pressure eviction,
# graceful node shutdown, a kubelet that could not admit it).
NODE_FAILED_REASONS = frozenset(
    {"Evicted", "NodeLost", "NodeShutdown", "Shutdown", "Terminated", "UnexpectedAdmissionError"}
)
REPEATED_RESTARTS = 2
"""A placed pod whose containers restarted this often fails on its own (a crash loop
shows as Running between its restarts, and as CrashLoopBackOff while it waits)."""

_IMAGE = re.compile(r'image "([^"]{1,200})"')


@dataclass(frozen=True, slots=True)
class PodDiagnosis:
    """One not-ready pod: its class, the reason that decided it and its exit code."""

    pod: str
    cls: PodClass
    reason: str | None = None
    node: str | None = None
    restarts: int = 0
    exit_code: int | None = None
    image: str | None = None  # from an image pull message, when it names one

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"pod": self.pod, "class": str(self.cls)}
        for key, value in (
            ("reason", self.reason),
            ("node", self.node),
            ("exitCode", self.exit_code),
            ("image", self.image),
        ):
            if value is not None:
                doc[key] = value
        if self.restarts:
            doc["restarts"] = self.restarts
        return doc


def classify(pod: Pod) -> PodDiagnosis:
    """The class of one pod that is not Ready (what a Ready pod would be is not asked)."""
    waiting = pod.waiting or (pod.reason if pod.reason in WORKLOAD_FAULT_REASONS else None)
    image = None
    if waiting in IMAGE_REASONS and pod.message:
        found = _IMAGE.search(pod.message)
        image = found.group(1) if found else None
    cls, reason = _class_and_reason(pod, waiting)
    return PodDiagnosis(pod.name, cls, reason, pod.node, pod.restarts, pod.exit_code, image=image)


def pod_class(pod: Pod) -> PodClass:
    """`classify(pod).cls` alone (no image, no record: asked on every eviction)."""
    waiting = pod.waiting or (pod.reason if pod.reason in WORKLOAD_FAULT_REASONS else None)
    return _class_and_reason(pod, waiting)[0]


def _class_and_reason(pod: Pod, waiting: str | None) -> tuple[PodClass, str | None]:
    """The first rule that holds: the node, a failed pod, placement, the containers."""
    if pod.node_down or pod.reason in NODE_REASONS or pod.phase == "Unknown":
        return PodClass.NODE_FAULT, pod.reason or "NodeNotReady"
    if pod.phase == "Failed":
        if pod.reason in NODE_FAILED_REASONS:
            return PodClass.NODE_FAULT, pod.reason
        return PodClass.WORKLOAD_FAULT, pod.terminated or pod.reason or "Failed"
    placed = pod.node is not None or pod.scheduled is True
    if not placed:
        return PodClass.CAPACITY, pod.reason or "Unscheduled"
    if waiting in WORKLOAD_FAULT_REASONS:
        return PodClass.WORKLOAD_FAULT, waiting
    if pod.restarts >= REPEATED_RESTARTS:
        return PodClass.WORKLOAD_FAULT, pod.terminated or "Restarting"
    return PodClass.STARTING, pod.waiting or pod.reason


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a gang is not whole: each not-ready pod's class, and pods not created yet."""

    gang_size: int
    ready: int
    pods: tuple[PodDiagnosis, ...]
    missing: int = 0  # pods the gang needs that do not exist (yet): never placed

    @property
    def not_ready(self) -> int:
        return len(self.pods) + self.missing

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for p in self.pods:
            found[p.cls] = found.get(p.cls, 0) + 1
        if self.missing:
            found[_CAPACITY] = found.get(_CAPACITY, 0) + self.missing
        return {str(cls): found[cls] for cls in sorted(found)}

    @property
    def workload_fault(self) -> bool:
        """Every not-ready pod fails on its own (a gang with a pod not placed never is)."""
        return (
            bool(self.pods)
            and not self.missing
            and all(p.cls is PodClass.WORKLOAD_FAULT for p in self.pods)
        )

    @property
    def label(self) -> str:
        """One word for the eviction: the class all not-ready pods share, else `Mixed`."""
        return _label(self.counts())

    def to_dict(self, limit: int = 20) -> dict[str, Any]:
        counts = self.counts()
        return {
            "class": _label(counts),
            "workloadFault": self.workload_fault,
            "counts": counts,
            "pods": [p.to_dict() for p in self.pods[:limit]],
            "summary": self.sentence(),
        }

    def sentence(self) -> str:
        """The diagnosis as a data scientist reads it, e.g. `4 of 8 pods cannot pull image
        ...: the job fails on its own`."""
        return describe_counts(self.gang_size, self.pods, self.missing)


_CAPACITY, _WORKLOAD_FAULT = PodClass.CAPACITY, PodClass.WORKLOAD_FAULT


def _label(counts: dict[str, int]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return "Mixed" if counts else "None"


def fails_on_its_own(w: Workload) -> bool:
    """`diagnose(w).workload_fault`, stopping at the first pod that is not a fault (the
    check runs on every pod event while `workloadFaults.evictAfter` watches a gang)."""
    seen = 0
    for p in w.pods.values():
        if p.retired or p.deleted or p.counts_ready:
            continue
        if pod_class(p) is not _WORKLOAD_FAULT:
            return False
        seen += 1
    return seen > 0 and w.ready_pods + seen >= w.gang_size


def diagnose(w: Workload) -> Diagnosis:
    """The gang's not-ready pods, classified."""
    pods = tuple([classify(p) for p in w.not_ready_pods()])
    ready = w.ready_pods
    return Diagnosis(w.gang_size, ready, pods, max(0, w.gang_size - ready - len(pods)))


# --------------------------------------------------------------------------- words


def _phrase(d: PodDiagnosis) -> str:
    reason = d.reason or ""
    code = f", exit code {d.exit_code}" if d.exit_code is not None else ""
    if d.cls is PodClass.CAPACITY:
        return f"are waiting for room on the cluster ({reason or 'Unschedulable'})"
    if d.cls is PodClass.NODE_FAULT:
        return f"are on a node that failed ({reason})"
    if d.cls is PodClass.STARTING:
        return (
            f"were placed but not Ready yet ({d.reason})"
            if d.reason
            else ("were placed but not Ready yet")
        )
    if reason in IMAGE_REASONS:
        image = f" {d.image}" if d.image else ""
        return f"cannot pull image{image} ({reason})"
    if reason == "InvalidImageName":
        return f"name an image that is not valid ({reason})"
    if reason == "CreateContainerConfigError":
        return f"have a configuration error, e.g. a missing Secret or ConfigMap ({reason})"
    if reason in ("CreateContainerError", "RunContainerError"):
        return f"cannot create their container ({reason})"
    if reason == "OOMKilled":
        return f"run out of memory ({reason}{code})"
    if reason == "CrashLoopBackOff" or d.restarts >= REPEATED_RESTARTS:
        restarts = f", {d.restarts} restarts" if d.restarts else ""
        return f"crash at start ({reason}{code}{restarts})"
    return f"failed ({reason}{code})"


def describe_counts(gang_size: int, pods: Iterable[PodDiagnosis], missing: int = 0) -> str:
    """`k of n pods <phrase>` per distinct phrase, then what it means for the job."""
    phrases: dict[str, int] = {}
    classes: set[PodClass] = set()
    for p in pods:
        phrase = _phrase(p)
        phrases[phrase] = phrases.get(phrase, 0) + 1
        classes.add(p.cls)
    if missing:
        phrase = "were not created or placed yet"
        phrases[phrase] = phrases.get(phrase, 0) + missing
        classes.add(PodClass.CAPACITY)
    if not phrases:
        return f"all {gang_size} pods were Ready"
    # Most frequent first, ties in the order first seen (as `Counter.most_common`).
    ranked = sorted(phrases.items(), key=itemgetter(1), reverse=True)
    parts = [f"{n} of {gang_size} pods {text}" for text, n in ranked]
    if classes == {PodClass.WORKLOAD_FAULT}:
        verdict = "the job fails on its own"
    elif PodClass.WORKLOAD_FAULT in classes:
        verdict = "some pods fail on their own, others wait"
    elif classes == {PodClass.CAPACITY}:
        verdict = "the cluster is busy, the job is not at fault"
    elif PodClass.NODE_FAULT in classes:
        verdict = "a node failed, the job is not at fault"
    else:
        verdict = "no pod failed visibly: the job starts slowly or hangs"
    return f"{'; '.join(parts)}: {verdict}"
