"""`muster manifests`: the cluster side, rendered from the deployed stack's outputs.

The stack creates every AWS-side piece (the bus, the agent's role, its Pod Identity
association, the functions' access entries, the agent's image repository) and says
what it created in its outputs. This command reads them (CloudFormation
DescribeStacks) and fills them into the shipped manifests in `deploy/kubernetes/`,
so nobody copies a bus name, region or image by hand: the stack is the one source
of truth for the install.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

import muster
from muster.admin import (
    DEFAULT_STACK,
    LOCAL_REGION,
    LOCAL_STACK,
    AdminError,
    reporting_handler,
    use_endpoint,
)

# The stack's outputs this command reads (infra/constants.py declares them; the
# infrastructure never imports runtime code, nor this module infrastructure code,
# so a test holds the two lists equal).
OUT_CLUSTER_NAME = "ClusterName"
OUT_EVENT_BUS_NAME = "EventBusName"
OUT_EVENT_BUS_ARN = "EventBusArn"
OUT_AGENT_NAMESPACE = "AgentNamespace"
OUT_AGENT_SERVICE_ACCOUNT = "AgentServiceAccount"
OUT_AGENT_IMAGE_REPOSITORY_URI = "AgentImageRepositoryUri"
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


@dataclass(frozen=True)
class Stack:
    """A deployed Muster stack: its name, outputs and the session that read them."""

    name: str
    outputs: dict[str, str]
    session: Any  # boto3.session.Session


def stack_outputs(stack: str | None, region: str | None, endpoint: str | None) -> Stack:
    """The stack's outputs (OutputKey -> OutputValue), read with DescribeStacks."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    if endpoint:
        use_endpoint(endpoint, region)
    name = stack or (LOCAL_STACK if endpoint else DEFAULT_STACK)
    session = boto3.session.Session(region_name=region or (LOCAL_REGION if endpoint else None))
    where = f"at {endpoint}" if endpoint else f"in {session.region_name or 'the default region'}"
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
    except NoCredentialsError:
        raise AdminError(
            "no AWS credentials: configure a profile (AWS_PROFILE) or give --endpoint "
            "for a local deployment"
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if "does not exist" in str(error.get("Message", "")):
            raise AdminError(
                f"no stack named {name} {where}; choose it with --stack"
                + ("" if endpoint else " (and --region)")
            ) from None
        raise AdminError(f"reading stack {name} {where}: {error.get('Message', exc)}") from None
    except BotoCoreError as exc:
        raise AdminError(f"reading stack {name} {where}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [key for key in REQUIRED_OUTPUTS if not outputs.get(key)]
    if missing:
        raise AdminError(
            f"stack {name} {where} has no output {', '.join(missing)}; is it a Muster stack "
            "of this version? (deploy it again with `npx cdk deploy`)"
        )
    return Stack(name, outputs, session)


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


# --------------------------------------------------------------------------- command


def manifests_command(args: argparse.Namespace, out: TextIO) -> int:
    params = None
    if args.settings:
        from muster.core.settings import SettingsError, load_settings_text
        from muster.kube.policy_params import render as render_params

        try:
            settings = load_settings_text(Path(args.settings).read_text(), args.settings)
        except OSError as exc:
            raise AdminError(f"{args.settings}: {exc.strerror or exc}", exit_code=2) from None
        except SettingsError as exc:
            raise AdminError(str(exc), exit_code=2) from None
        params = render_params(settings)
    directory = Path(args.manifests) if args.manifests else shipped_manifests_dir()
    documents = load_documents(directory)
    stack = stack_outputs(args.stack, args.region, args.endpoint)
    rendered = render(documents, stack.outputs, image=args.image, params=params)
    if args.output:
        with open(args.output, "w") as f:
            dump(rendered, stack.name, f)
        print(f"wrote {args.output} ({len(rendered)} objects)", file=sys.stderr)
    else:
        dump(rendered, stack.name, out)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "manifests",
        help="the cluster-side manifests with the deployed stack's outputs filled in",
        description=(
            "Read the stack's outputs (bus, region, cluster, the agent's namespace, service "
            "account and image repository) and print the manifests of deploy/kubernetes/ "
            "with them filled in, in the order `kubectl apply -f` needs."
        ),
    )
    p.add_argument("--stack", help=f"CloudFormation stack (default {DEFAULT_STACK})")
    p.add_argument("--region", help="AWS region of the stack (default: your AWS configuration's)")
    p.add_argument(
        "--endpoint", metavar="URL", help="a local deployment's AWS endpoint (muster local --port)"
    )
    p.add_argument(
        "--image",
        help="the agent image (default: the stack's repository, tagged "
        f"{agent_image_tag()}, as `make agent-image` pushes it)",
    )
    p.add_argument(
        "--settings", help="render the policies' params from this settings file's queueAccess"
    )
    p.add_argument(
        "--manifests", metavar="DIR", help="the manifests to fill in (deploy/kubernetes)"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(handler=reporting_handler(manifests_command))
