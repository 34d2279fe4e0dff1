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

The control plane's admission policy (`deploy/kubernetes/controlplane-policy.yaml`)
lets it change exactly these selector keys and nothing else of a template.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from muster.core.model import Kind
from muster.core.topology import LABEL_KEYS, domain_selector


def selector_change(current: Mapping[str, Any] | None, domain: str) -> dict[str, str | None]:
    """The merge patch of one node selector: the domain's labels set, Muster's other
    topology labels removed (None), the owner's own keys left alone."""
    wanted: dict[str, str | None] = dict(domain_selector(domain)) if domain else {}
    for key in current or {}:
        if key in LABEL_KEYS and key not in wanted:
            wanted[key] = None
    return wanted


def _pod_spec(template: Any) -> Mapping[str, Any]:
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _template_patch(template: Any, domain: str) -> dict[str, Any]:
    selector = _pod_spec(template).get("nodeSelector")
    return {"spec": {"nodeSelector": selector_change(selector, domain)}}


def spec_placement(kind: Kind, spec: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """The part of a merge patch of `spec` that keeps a workload's pods in `domain`
    ("" for anywhere: Muster's topology labels removed)."""
    if kind is Kind.JOB:
        return {"template": _template_patch(spec.get("template"), domain)}
    if kind is Kind.PYTORCHJOB:
        roles = spec.get("pytorchReplicaSpecs") or {}
        return {
            "pytorchReplicaSpecs": {
                role: {"template": _template_patch((r or {}).get("template"), domain)}
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
                for key, value in selector_change(selector, domain).items():
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


def pod_placement(domain: str) -> dict[str, Any]:
    """The part of a gated pod's patch that keeps it in `domain` (added keys only)."""
    return {"nodeSelector": domain_selector(domain)} if domain else {}


__all__ = ["pod_placement", "selector_change", "spec_placement"]
