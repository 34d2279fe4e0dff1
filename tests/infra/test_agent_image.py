"""The agent image installs exactly what requirements/agent.lock pins, with hashes."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement

from infra.layer import distribution, lock_entries
from tests.infra.conftest import REPO_ROOT

DOCKERFILE = REPO_ROOT / "deploy" / "agent.Dockerfile"
AGENT_LOCK = REPO_ROOT / "requirements" / "agent.lock"


def _pip_installs() -> list[str]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [
        " ".join(command.split())
        for line in text.splitlines()
        if line.startswith("RUN ")
        for command in line[4:].split("&&")
        if command.split()[:2] == ["pip", "install"]
    ]


def test_the_image_installs_only_the_lock_and_muster_itself_without_fetching() -> None:
    first, second = _pip_installs()
    # GIVEN the dependencies: every one pinned and hash-checked, none resolved anew
    assert first.endswith("-r requirements/agent.lock")
    assert "--require-hashes" in first and "--no-deps" in first
    # AND Muster itself: built with the locked backend, nothing from an index
    assert second.endswith(" .")
    for flag in ("--no-deps", "--no-build-isolation", "--no-index"):
        assert flag in second
    assert "COPY requirements/agent.lock requirements/" in DOCKERFILE.read_text()


def test_the_agent_lock_pins_every_dependency_of_the_agent_within_its_range() -> None:
    pins = {}
    for entry in lock_entries(AGENT_LOCK):
        name, version = entry.split()[0].split("==")
        pins[distribution(name)] = version
        assert "--hash=sha256:" in entry, entry
    doc = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    wanted = (
        doc["project"]["dependencies"]
        + doc["project"]["optional-dependencies"]["agent"]
        + doc["build-system"]["requires"]
    )
    for dependency in wanted:
        requirement = Requirement(dependency)
        name = distribution(requirement.name)
        assert name in pins, f"{name} is not in {AGENT_LOCK.name}: run `make lock`"
        assert requirement.specifier.contains(pins[name]), (name, pins[name])
