"""Synthesise the Muster app once per test session; the tests read the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_DEPRECATED", "quiet")

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK = "Muster"
# cdk.json names no cluster (a deployment must say which): the tests pass one, as
# `-c muster:clusterName=...` does.
CLUSTER = "training"
CLUSTER_ARGS = ("-c", f"muster:clusterName={CLUSTER}")


def deployment_context() -> dict[str, Any]:
    """cdk.json's context with the tests' cluster name, as `-c` adds it."""
    from infra.app import cdk_json_context

    return cdk_json_context() | {"muster:clusterName": CLUSTER}


@dataclass(frozen=True)
class Synthesized:
    assembly_dir: Path
    template: dict[str, Any]
    context: dict[str, Any]


def offline_env() -> dict[str, str]:
    """This environment as on a machine without network: any download attempt fails."""
    env = dict(os.environ)
    # `python3` in cdk.json is this interpreter (the project's virtual environment).
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    env["CDK_DISABLE_VERSION_CHECK"] = "1"
    env["PIP_NO_INDEX"] = "1"
    for proxy in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        env[proxy] = "http://127.0.0.1:9"
    for key in ("NO_PROXY", "no_proxy", "CDK_CONTEXT_JSON"):
        env.pop(key, None)
    return env


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    """`python app.py -c muster:clusterName=...` as a user runs it: the rest of the
    context from cdk.json, no CDK CLI, no network.

    The first run on a machine fills the layer's wheel cache (with network);
    every later run, this one included, must work offline.
    """
    from infra.layer import default_builder

    if not default_builder().site_dir.is_dir():
        subprocess.run([sys.executable, "-c", _FILL_CACHE], cwd=REPO_ROOT, check=True)
    outdir = tmp_path_factory.mktemp("cdk.out")
    env = offline_env() | {"CDK_OUTDIR": str(outdir)}
    done = subprocess.run(
        [sys.executable, "app.py", *CLUSTER_ARGS],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    yield Synthesized(assembly_dir=outdir, template=template, context=deployment_context())


_FILL_CACHE = "from infra.layer import default_builder; default_builder().dependencies()"


@pytest.fixture(scope="session")
def template(synthesized: Synthesized) -> Any:
    from aws_cdk.assertions import Template

    return Template.from_json(synthesized.template)


def resources(template_doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template_doc["Resources"].items() if v["Type"] == kind}


def layer_python(synthesized: Synthesized) -> Path:
    """The synthesized layer asset's `python/` folder (what Lambda mounts at /opt/python)."""
    assets = json.loads((synthesized.assembly_dir / "Muster.assets.json").read_text())["files"]
    (layer,) = [a for a in assets.values() if a["displayName"].startswith("MusterLayer")]
    return Path(synthesized.assembly_dir / layer["source"]["path"] / "python")
