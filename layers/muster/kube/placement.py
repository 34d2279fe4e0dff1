"""Where an admitted gang's pods may land: the node selector of its topology domain.

A workload that asks for a topology (`muster.io/topology`) is admitted into one
domain (`muster.core.topology`); its pods are kept there by a node selector of the
domain's labels (`topology.k8s.aws/network-node-layer-N`, `topology.kubernetes.io/zone`).

- A suspended Job, JobSet or PyTorchJob: the selector goes on every pod template in
  the same patch that unsuspends it (Kubernetes lets a suspended workload's pod
  templates change their node selector). Muster owns the topology labels of the
  selector then: those of an earlier attempt's domain are removed, and all of them
  when the gang is placed anywhere; the owner's other selector keys are kept.
- A gated pod of a pod group: the selector's labels are added in the patch that
  removes the gate, judged against the pod as it was, gated (Kubernetes lets a
  gated pod's node selector gain keys). A pod group's pods are new at each
  attempt, so there is nothing of an earlier domain to remove.

A workload packed onto one node (`nodePacking`) gets the selector
`kubernetes.io/hostname: <node>` the same way, and the annotation
`muster.io/packed-node` naming the node, by which the agent and a later admission
know that selector as Muster's: it is replaced at the next admission, or removed
when the gang is placed anywhere. A hostname selector of the owner's is never
touched (the capacity check does not evaluate such a workload, so it is never
packed).

The control plane's admission policy (`deploy/kubernetes/controlplane-policy.yaml`)
lets it change exactly these selector keys and nothing else of a template.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from muster.core.model import Kind
from muster.core.topology import LABEL_KEYS, NODE_LABEL, domain_selector, pinned_node
from muster.kube.conventions import PACKED_NODE_ANNOTATION


def selector_change(
    current: Mapping[str, Any] | None, domain: str, *, packed: bool = False
) -> dict[str, str | None]:
    """The merge patch of one node selector: the domain's labels set, Muster's other
    topology labels removed (None), and its hostname label if it `packed` the
    workload before; the owner's own keys left alone."""
    wanted: dict[str, str | None] = dict(domain_selector(domain)) if domain else {}
    ours = LABEL_KEYS | {NODE_LABEL} if packed else LABEL_KEYS
    for key in current or {}:
        if key in ours and key not in wanted:
            wanted[key] = None
    return wanted


def _pod_spec(template: Any) -> Mapping[str, Any]:
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _template_patch(template: Any, domain: str, packed: bool) -> dict[str, Any]:
    selector = _pod_spec(template).get("nodeSelector")
    return {"spec": {"nodeSelector": selector_change(selector, domain, packed=packed)}}


def spec_placement(
    kind: Kind, spec: Mapping[str, Any], domain: str, *, packed: bool = False
) -> dict[str, Any]:
    """The part of a merge patch of `spec` that keeps a workload's pods in `domain`
    ("" for anywhere: Muster's topology labels removed, and its hostname label if it
    `packed` the workload before)."""
    if kind is Kind.JOB:
        return {"template": _template_patch(spec.get("template"), domain, packed)}
    if kind is Kind.PYTORCHJOB:
        roles = spec.get("pytorchReplicaSpecs") or {}
        return {
            "pytorchReplicaSpecs": {
                role: {"template": _template_patch((r or {}).get("template"), domain, packed)}
                for role, r in roles.items()
            }
        }
    if kind is Kind.JOBSET:
        # A list is replaced whole by a merge patch: the read list, each pod template's
        # selector changed (the patch is conditional on the read's resourceVersion).
        jobs = copy.deepcopy(list(spec.get("replicatedJobs") or []))
        for job in jobs:
            inner = _pod_spec((job or {}).get("template")).get("template")
            if isinstance(inner, dict):
                pod_spec = inner.setdefault("spec", {})
                selector = dict(pod_spec.get("nodeSelector") or {})
                for key, value in selector_change(selector, domain, packed=packed).items():
                    if value is None:
                        selector.pop(key, None)
                    else:
                        selector[key] = value
                if selector:
                    pod_spec["nodeSelector"] = selector
                else:
                    pod_spec.pop("nodeSelector", None)
        return {"replicatedJobs": jobs}
    raise ValueError(f"kind: {kind} has no pod templates to place")


def admission_placement(
    kind: Kind, obj: Mapping[str, Any], domain: str, topology: str
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """(the part of the admitting patch's `spec`, its annotations) that place a suspended
    workload's pods: in its topology domain or on the node it was packed onto, an
    earlier attempt's node forgotten. Nothing for a workload Muster never placed."""
    node = pinned_node(domain)
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    before = PACKED_NODE_ANNOTATION in notes
    if not (topology or node or before):
        return {}, {}
    spec = spec_placement(kind, obj.get("spec") or {}, domain, packed=before)
    if node:
        return spec, {PACKED_NODE_ANNOTATION: node}
    return spec, {PACKED_NODE_ANNOTATION: None} if before else {}


def pod_placement(domain: str) -> dict[str, Any]:
    """The part of a gated pod's patch that keeps it in `domain` (added keys only)."""
    return {"nodeSelector": domain_selector(domain)} if domain else {}


__all__ = ["admission_placement", "pod_placement", "selector_change", "spec_placement"]
