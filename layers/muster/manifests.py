"""The cluster side, rendered from the deployed stack's outputs (`muster manifests`).

The stack creates every AWS-side piece (the bus, the agent's role, its Pod Identity
association, the functions' access entries, the agent's image repository) and says
what it created in its outputs. `muster manifests` reads them (CloudFormation
DescribeStacks) and fills them into the shipped manifests in `deploy/kubernetes/`,
so nobody copies a bus name, region or image by hand: the stack is the one source
of truth for the install.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

import muster
from muster.admin.deployment import Stack, read_stack
from muster.admin.errors import AdminError
from muster.contract import (
    OUT_AGENT_IMAGE_REPOSITORY_URI,
    OUT_AGENT_NAMESPACE,
    OUT_AGENT_SERVICE_ACCOUNT,
    OUT_CLUSTER_NAME,
    OUT_EVENT_BUS_ARN,
    OUT_EVENT_BUS_NAME,
)

# The stack's outputs this command reads, named once in `muster.contract`.
REQUIRED_OUTPUTS = (OUT_CLUSTER_NAME, OUT_EVENT_BUS_NAME, OUT_EVENT_BUS_ARN)

SHIPPED_NAMESPACE = "muster-system"
SHIPPED_SERVICE_ACCOUNT = "muster-agent"
AGENT_DEPLOYMENT = "agent-deployment.yaml"
POLICY_PARAMS = "policy-params.yaml"
# In the order `kubectl apply -f` must see them: the namespace first, the policies'
# params before the policies, the agent last.
MANIFESTS = (
    "namespace.yaml",
    "agent-rbac.yaml",
    "controlplane-rbac.yaml",
    POLICY_PARAMS,
    "admission-policy.yaml",
    "controlplane-policy.yaml",
    AGENT_DEPLOYMENT,
)


def shipped_manifests_dir() -> Path:
    """`deploy/kubernetes/` of the checkout this package runs from."""
    return Path(muster.__file__).resolve().parents[2] / "deploy" / "kubernetes"


def agent_image_tag() -> str:
    """The agent image's tag: the version of this package (agent and control plane
    are released together; docs/operating.md says which versions work together)."""
    return muster.__version__


# --------------------------------------------------------------------------- the stack


def stack_outputs(stack: str | None, region: str | None, endpoint: str | None) -> Stack:
    """The stack's outputs, with the ones the cluster side needs checked."""
    found = read_stack(stack, region, endpoint)
    missing = [key for key in REQUIRED_OUTPUTS if not found.outputs.get(key)]
    if missing:
        raise AdminError(
            f"stack {found.name} {found.where} has no output {', '.join(missing)}; is it a "
            "Muster stack of this version? (deploy it again with `npx cdk deploy`)"
        )
    return found


def region_of(arn: str) -> str:
    """The region of an ARN (`arn:aws:events:REGION:ACCOUNT:...`)."""
    parts = arn.split(":")
    if len(parts) < 6 or not parts[3]:
        raise AdminError(f"{OUT_EVENT_BUS_ARN}: {arn!r} is not an ARN with a region")
    return parts[3]


# --------------------------------------------------------------------------- rendering


def load_documents(directory: Path, names: Sequence[str] = MANIFESTS) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for name in names:
        path = directory / name
        try:
            text = path.read_text()
        except OSError as exc:
            raise AdminError(
                f"cannot read the shipped manifest {path}: {exc.strerror or exc}; run from a "
                "checkout of Muster or give --manifests DIR"
            ) from None
        documents.extend(d for d in yaml.safe_load_all(text) if d)
    return documents


def render(
    documents: Sequence[Mapping[str, Any]],
    outputs: Mapping[str, str],
    *,
    image: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The shipped manifests with the stack's values filled in.

    `image` overrides the image in the stack's repository (tagged with this version);
    `params` replaces the shipped policy params (from `muster policy-params`)."""
    if image is None:
        repository = outputs.get(OUT_AGENT_IMAGE_REPOSITORY_URI)
        if not repository:
            raise AdminError(
                f"the stack has no output {OUT_AGENT_IMAGE_REPOSITORY_URI}: give the agent "
                "image with --image"
            )
        image = f"{repository}:{agent_image_tag()}"
    namespace = outputs.get(OUT_AGENT_NAMESPACE) or SHIPPED_NAMESPACE
    account = outputs.get(OUT_AGENT_SERVICE_ACCOUNT) or SHIPPED_SERVICE_ACCOUNT
    env = {
        "MUSTER_CLUSTER_NAME": outputs[OUT_CLUSTER_NAME],
        "MUSTER_EVENT_BUS": outputs[OUT_EVENT_BUS_NAME],
        "AWS_REGION": region_of(outputs[OUT_EVENT_BUS_ARN]),
    }
    rendered: list[dict[str, Any]] = []
    for original in documents:
        doc = copy.deepcopy(dict(original))
        if params is not None and _is(doc, "ConfigMap", "muster-policy-params"):
            doc = copy.deepcopy(dict(params))
        if doc.get("kind") == "Deployment" and _name(doc) == "muster-agent":
            _fill_agent(doc, image, env)
        _move(doc, namespace, account)
        rendered.append(doc)
    return rendered


def _is(doc: Mapping[str, Any], kind: str, name: str) -> bool:
    return doc.get("kind") == kind and _name(doc) == name


def _name(doc: Mapping[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("name", ""))


def _fill_agent(doc: dict[str, Any], image: str, env: Mapping[str, str]) -> None:
    containers = doc["spec"]["template"]["spec"]["containers"]
    agent = next(c for c in containers if c.get("name") == "agent")
    agent["image"] = image
    seen = set()
    for var in agent.setdefault("env", []):
        if var.get("name") in env:
            var["value"] = env[var["name"]]
            seen.add(var["name"])
    for key in env.keys() - seen:
        agent["env"].append({"name": key, "value": env[key]})


def _move(doc: dict[str, Any], namespace: str, account: str) -> None:
    """Put the agent in the namespace and service account the stack's Pod Identity
    association names (the shipped files say muster-system / muster-agent)."""
    if namespace != SHIPPED_NAMESPACE:
        if doc.get("kind") == "Namespace" and _name(doc) == SHIPPED_NAMESPACE:
            doc["metadata"]["name"] = namespace
        for node in _walk(doc):
            if node.get("namespace") == SHIPPED_NAMESPACE:
                node["namespace"] = namespace
    if account != SHIPPED_SERVICE_ACCOUNT:
        if doc.get("kind") == "ServiceAccount" and _name(doc) == SHIPPED_SERVICE_ACCOUNT:
            doc["metadata"]["name"] = account
        for node in _walk(doc):
            if node.get("serviceAccountName") == SHIPPED_SERVICE_ACCOUNT:
                node["serviceAccountName"] = account
            if node.get("kind") == "ServiceAccount" and node.get("name") == SHIPPED_SERVICE_ACCOUNT:
                node["name"] = account


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def dump(documents: Sequence[Mapping[str, Any]], stack: str, out: TextIO) -> None:
    out.write(
        f"# Muster's cluster side for stack {stack}, rendered by `muster manifests` from the\n"
        "# stack's outputs and deploy/kubernetes/. Apply with `kubectl apply -f`.\n"
    )
    out.write(yaml.safe_dump_all(list(documents), sort_keys=False, explicit_start=True))
