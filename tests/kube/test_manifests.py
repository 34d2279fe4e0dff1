"""Every manifest in deploy/kubernetes validated offline against the Kubernetes schemas.

`kubernetes-validate` carries the built-in kinds' schemas; CRD-based kinds (JobSet,
PyTorchJob examples) have none there and are skipped by name, not silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").rglob("*.yaml"))
K8S_VERSION = "1.33.0"  # an EKS standard-support version; VAP is GA since 1.30
CRD_KINDS = {"JobSet", "PyTorchJob"}


def documents() -> list[Any]:
    out = []
    for path in MANIFESTS:
        for n, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                out.append(pytest.param(doc, id=f"{path.relative_to(ROOT)}#{n}:{doc.get('kind')}"))
    return out


@pytest.mark.parametrize("doc", documents())
def test_manifest_is_valid(doc: dict[str, Any]) -> None:
    if doc["kind"] in CRD_KINDS:
        pytest.skip(f"{doc['kind']} is a CRD; kubernetes-validate has no schema for it")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def rules(kind: str, name: str) -> list[dict[str, Any]]:
    for param in documents():
        doc = param.values[0]
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return list(doc["rules"])
    raise AssertionError(f"{kind} {name} not found")


def test_agent_only_reads_workloads_pods_and_nodes() -> None:
    verbs = {v for r in rules("ClusterRole", "muster-agent") for v in r["verbs"]}
    assert verbs == {"list", "watch"}


def test_controlplane_has_only_what_admit_evict_and_record_use() -> None:
    granted = {
        (g, res): set(r["verbs"])
        for r in rules("ClusterRole", "muster-controlplane")
        for g in r["apiGroups"]
        for res in r["resources"]
    }
    assert granted == {
        ("batch", "jobs"): {"get", "patch"},
        ("jobset.x-k8s.io", "jobsets"): {"get", "patch"},
        ("kubeflow.org", "pytorchjobs"): {"get", "patch"},
        ("", "pods"): {"list", "get", "patch", "delete"},
        ("", "events"): {"create"},
    }


def test_agent_runs_two_replicas_as_its_service_account() -> None:
    [deployment] = [p.values[0] for p in documents() if p.values[0]["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "muster-agent"


def test_the_validator_rejects_a_broken_manifest() -> None:
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two"},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
