"""The agent's image, built and pushed to the stack's repository (`muster agent-image`).

The Dockerfile (`deploy/agent.Dockerfile`) is the image's only source; the stack
creates the repository (output `AgentImageRepositoryUri`), and the image is tagged
with this package's version, which is the tag `muster manifests` puts in the
agent's Deployment. Needs Docker (or a `docker`-compatible CLI named by
MUSTER_DOCKER) on the machine that runs it.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from muster.admin.deployment import Stack
from muster.admin.errors import AdminError
from muster.manifests import OUT_AGENT_IMAGE_REPOSITORY_URI, shipped_manifests_dir, stack_outputs

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


def agent_dockerfile(root: Path) -> Path:
    """`deploy/agent.Dockerfile` under the build context `root`."""
    dockerfile = root / "deploy" / "agent.Dockerfile"
    if not dockerfile.is_file():
        raise AdminError(f"no {dockerfile}: run from a checkout of Muster or give --context")
    return dockerfile


def stack_repository(stack: str | None, region: str | None, endpoint: str | None) -> Stack:
    """The stack, checked to name the agent's image repository in its outputs."""
    found = stack_outputs(stack, region, endpoint)
    if not found.outputs.get(OUT_AGENT_IMAGE_REPOSITORY_URI, ""):
        raise AdminError(
            f"stack {found.name} has no output {OUT_AGENT_IMAGE_REPOSITORY_URI}; "
            "deploy this version of the stack, or give --repository"
        )
    return found


def build(dockerfile: Path, root: Path, image: str) -> None:
    """`docker build` of the agent's Dockerfile with `root` as the context."""
    docker(["build", "-f", str(dockerfile), "-t", image, str(root)], step="the build")


def push(image: str, repository: str, session: Any) -> None:
    """Log in to the repository's ECR registry with `session`'s credentials, then push."""
    registry = repository.split("/", 1)[0]
    password = registry_login(session, registry)
    docker(
        ["login", "--username", "AWS", "--password-stdin", registry],
        step="the registry login",
        stdin=password,
    )
    docker(["push", image], step="the push")
