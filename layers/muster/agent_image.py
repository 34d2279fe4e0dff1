"""`muster agent-image`: build the agent's image and push it to the stack's repository.

The Dockerfile (`deploy/agent.Dockerfile`) is the image's only source; the stack
creates the repository (output `AgentImageRepositoryUri`), and the image is tagged
with this package's version, which is the tag `muster manifests` puts in the
agent's Deployment. Needs Docker (or a `docker`-compatible CLI named by
MUSTER_DOCKER) on the machine that runs it.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from muster.admin import AdminError, reporting_handler
from muster.manifests import (
    OUT_AGENT_IMAGE_REPOSITORY_URI,
    agent_image_tag,
    shipped_manifests_dir,
    stack_outputs,
)

DOCKER_ENV = "MUSTER_DOCKER"


def checkout_root() -> Path:
    return shipped_manifests_dir().parents[1]


def registry_login(session: Any, registry: str) -> str:
    """The password `docker login --username AWS` takes for the stack's registry."""
    region = registry.split(".")[3] if registry.count(".") >= 5 else session.region_name
    ecr = session.client("ecr", region_name=region)
    data = ecr.get_authorization_token()["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    if user != "AWS" or not password:
        raise AdminError(f"ECR returned an authorization token for {user!r}, not AWS")
    return password


def docker(argv: Sequence[str], *, step: str, stdin: str | None = None) -> None:
    program = os.environ.get(DOCKER_ENV, "docker")
    if shutil.which(program) is None:
        raise AdminError(
            f"{program} not found on PATH: building the agent image needs Docker "
            f"(or a compatible CLI named by {DOCKER_ENV})"
        )
    print(f"$ {program} {' '.join(argv)}", file=sys.stderr)
    if stdin is None:
        code = subprocess.run([program, *argv], stdin=subprocess.DEVNULL, check=False).returncode
    else:
        code = subprocess.run([program, *argv], input=stdin, text=True, check=False).returncode
    if code != 0:
        raise AdminError(f"{step} failed: {program} exited with {code}")


def agent_image_command(args: argparse.Namespace, out: TextIO) -> int:
    root = Path(args.context) if args.context else checkout_root()
    dockerfile = root / "deploy" / "agent.Dockerfile"
    if not dockerfile.is_file():
        raise AdminError(f"no {dockerfile}: run from a checkout of Muster or give --context")
    tag = args.tag or agent_image_tag()
    stack = None
    if args.repository:
        repository = args.repository
    else:
        stack = stack_outputs(args.stack, args.region, args.endpoint)
        repository = stack.outputs.get(OUT_AGENT_IMAGE_REPOSITORY_URI, "")
        if not repository:
            raise AdminError(
                f"stack {stack.name} has no output {OUT_AGENT_IMAGE_REPOSITORY_URI}; "
                "deploy this version of the stack, or give --repository"
            )
    image = f"{repository}:{tag}"
    docker(["build", "-f", str(dockerfile), "-t", image, str(root)], step="the build")
    if args.no_push:
        print(image, file=out)
        return 0
    registry = repository.split("/", 1)[0]
    if stack is None:
        import boto3

        session: Any = boto3.session.Session(region_name=args.region)
    else:
        session = stack.session
    password = registry_login(session, registry)
    docker(
        ["login", "--username", "AWS", "--password-stdin", registry],
        step="the registry login",
        stdin=password,
    )
    docker(["push", image], step="the push")
    print(image, file=out)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent-image",
        help="build the agent image from deploy/agent.Dockerfile and push it to the stack's repository",
        description=(
            "Build the agent's image (docker build -f deploy/agent.Dockerfile), log in to the "
            "stack's ECR registry and push it, tagged with this version, where "
            "`muster manifests` expects it. Needs Docker."
        ),
    )
    p.add_argument("--stack", help="CloudFormation stack (default Muster)")
    p.add_argument("--region", help="AWS region of the stack (default: your AWS configuration's)")
    p.add_argument("--endpoint", metavar="URL", help="a local deployment's AWS endpoint")
    p.add_argument("--repository", help="push here instead of the stack's repository")
    p.add_argument("--tag", help=f"image tag (default {agent_image_tag()}, this version)")
    p.add_argument("--context", metavar="DIR", help="build context (default: this checkout)")
    p.add_argument("--no-push", action="store_true", help="build only")
    p.set_defaults(handler=reporting_handler(agent_image_command))
