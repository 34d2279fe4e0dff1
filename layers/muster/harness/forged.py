"""Forged pods in the history harness's truth: Ready pods labelled as a Job's
(`batch.kubernetes.io/job-name`, even its `controller-uid`) that the Job does not
own, made by a tenant to fake the gang's readiness.

What the agent reports of them is the agent's own mapping's word
(`muster.agent.mapping.pod_workload` and `pod_view`) on the pod as Kubernetes holds
it: a bare pod (no controller) is nobody's and never reported; one that another Job
of the tenant controls is reported under the labelled workload with that Job's
uid as its owner, so the control plane must tell it apart. Either way the truth
knows it is not the workload's (`Truth.owners`), and the invariants say so should
Muster count it Ready.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from muster.agent.mapping import pod_view, pod_workload
from muster.core import Event, PodObserved, SnapshotPart
from muster.core.keys import parse_workload_key
from muster.harness.clock import VirtualClock
from muster.harness.histories import Action

BARE, OTHER_JOB = 0, 1  # `Action.value` of a `forge`: no controller, or another Job


class Shared(Protocol):
    """What the forged pods share with the rest of the truth (`cluster_truth.Truth`)."""

    rev: int
    pods: dict[tuple[str, str], PodObserved]
    owners: dict[str, str]
    loop: VirtualClock
    triggers: Counter[str]

    def send(self, event: Event | SnapshotPart) -> list[float]: ...


def forged_pod(
    key: str, name: str, uid: str, node: str, controller: str, copied: str
) -> dict[str, Any]:
    """A Ready CPU pod as Kubernetes holds it, labelled as the Job under `key`'s (its
    uid `copied` into the controller-uid label too); its controller another Job of
    uid `controller` ("" for none)."""
    namespace, job, _ = parse_workload_key(key)
    labels = {
        "batch.kubernetes.io/job-name": job,
        "job-name": job,
        "batch.kubernetes.io/controller-uid": copied,
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "labels": labels}
    if controller:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "forger", "uid": controller}
            | {"controller": True}
        ]
    return {
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@dataclass
class ForgedPods:
    """The forged pods of one truth: each lives `delay` seconds, then is deleted."""

    truth: Shared
    nodes: list[str]
    serial: int = 0

    def forge(self, a: Action, copied: str) -> None:
        """`a.pods` forged pods labelled as `a.job`'s (whose uid, `copied`, they copy)."""
        t = self.truth
        t.triggers["forgedPods"] += a.pods
        for _ in range(a.pods):
            self.serial += 1
            name = f"{parse_workload_key(a.job)[1]}-forged-{self.serial}"
            uid = f"{name}-u{self.serial}"
            controller = f"forger-{self.serial}" if a.value == OTHER_JOB else ""
            t.owners[uid] = controller or f"forged:{name}"
            node = self.nodes[self.serial % len(self.nodes)]
            pod = forged_pod(a.job, name, uid, node, controller, copied)
            self._observe(pod, deleted=False)
            t.loop.at(t.loop.now + a.delay, "cluster", partial(self._observe, pod, deleted=True))

    def _observe(self, pod: dict[str, Any], *, deleted: bool) -> None:
        """What the agent sends of the pod's change, if anything (its mapping decides)."""
        found = pod_workload(pod)
        if found is None:
            return  # nobody's: never reported
        kind, key = found
        view = pod_view(key, pod, kind)
        t = self.truth
        t.rev += 1
        event = PodObserved(
            key,
            view.pod,
            t.rev,
            uid=view.uid,
            phase=view.phase,
            ready=view.ready and not deleted,
            node=view.node,
            deleted=deleted,
            scheduled=True,
            owner=view.owner,
        )
        if deleted:
            t.pods.pop((key, view.pod), None)
        else:
            t.pods[(key, view.pod)] = event
            t.triggers["forgedPodsReported"] += 1
        t.send(event)
