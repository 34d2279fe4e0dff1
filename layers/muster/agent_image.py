"""The agent's image, built and pushed to the stack's repository (`muster agent-image`).

The Dockerfile (`deploy/agent.Dockerfile`) is the image's only source; the stack
creates the repository (output `AgentImageRepositoryUri`), and the image is tagged
with this package's version, which is the tag `muster manifests` puts in the
agent's Deployment. Needs Docker (or a `docker`-compatible CLI named by
MUSTER_DOCKER) on the machine that runs it. A build alone (`--no-push`) needs
neither the stack nor AWS.

The checkout's `.dockerignore` keeps the build context to what the Dockerfile
copies; `build_context` lists what Docker sends by the same rules, so the command
can say how much that is before it builds.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster.admin.deployment import Stack
from muster.admin.errors import AdminError
from muster.manifests import OUT_AGENT_IMAGE_REPOSITORY_URI, shipped_manifests_dir, stack_outputs

DOCKER_ENV = "MUSTER_DOCKER"
LOCAL_IMAGE = "muster-agent"  # the name of an image built and not pushed
DOCKERIGNORE = ".dockerignore"


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


# ---------------------------------------------------------------------- the build context


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    keep: bool  # an exception (`!pattern`): what it matches is sent after all
    prefix: str  # the literal path before its first wildcard


def ignore_rules(text: str) -> list[_Rule]:
    """A .dockerignore's rules in order (Docker's syntax: `*`, `?`, `[...]`, `**`,
    `!` for an exception, `#` for a comment)."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        line = os.path.normpath(line[1:].strip() if keep else line).lstrip("/")
        if line == ".":
            continue
        literal = re.split(r"[*?\[\\]", line, maxsplit=1)[0]
        rules.append(_Rule(re.compile(_regex(line)), keep, literal))
    return rules


def _regex(pattern: str) -> str:
    """The pattern as a regular expression over `/`-separated paths, as Docker reads it."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
            out.append(".*" if i >= len(pattern) else "(?:.*/)?")
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body[:1] in "!^" and body else body) + "]")
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "^" + "".join(out) + "$"


def ignored(path: str, rules: Sequence[_Rule]) -> bool:
    """Whether Docker leaves `path` (relative, `/`-separated) out: the last rule that
    matches it or one of its folders decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    out = False
    for rule in rules:
        if any(rule.pattern.match(p) for p in prefixes):
            out = not rule.keep
    return out


def build_context(root: Path, dockerfile: Path | None = None) -> list[str]:
    """The files (relative paths, sorted) Docker sends as the build context `root`:
    what its .dockerignore lets through, and the Dockerfile and .dockerignore, which
    are always sent."""
    ignore = root / DOCKERIGNORE
    rules = ignore_rules(ignore.read_text(encoding="utf-8")) if ignore.is_file() else []
    exceptions = [r for r in rules if r.keep]
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root).as_posix()
        base = "" if here == "." else f"{here}/"
        kept = []
        for d in sorted(dirs):
            path = base + d
            # A folder left out whole is not walked unless an exception may reach inside.
            reachable = any(
                not e.prefix or e.prefix.startswith(path + "/") or path.startswith(e.prefix)
                for e in exceptions
            )
            if not ignored(path, rules) or reachable:
                kept.append(d)
        dirs[:] = kept
        found += [base + f for f in files if not ignored(base + f, rules)]
    for always in (ignore, dockerfile):
        if (
            always is not None
            and always.is_file()
            and always.resolve().is_relative_to(root.resolve())
        ):
            found.append(always.resolve().relative_to(root.resolve()).as_posix())
    return sorted(set(found))


def describe_context(root: Path, dockerfile: Path | None = None) -> str:
    """`build context: N files, S` (and a warning when nothing keeps the checkout out)."""
    files = build_context(root, dockerfile)
    size = sum((root / f).stat().st_size for f in files if (root / f).is_file())
    note = "" if (root / DOCKERIGNORE).is_file() else f" (no {DOCKERIGNORE}: everything is sent)"
    return f"build context {root}: {len(files)} files, {size / 1e6:.1f} MB{note}"
