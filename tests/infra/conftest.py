"""Synthesise the Muster app once per test session; the tests read the result."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_DEPRECATED", "quiet")

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK = "Muster"


@dataclass(frozen=True)
class Synthesized:
    assembly_dir: Path
    template: dict[str, Any]
    context: dict[str, Any]


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    import aws_cdk as cdk

    from infra.app import build_app, cdk_json_context

    outdir = tmp_path_factory.mktemp("cdk.out")
    context = cdk_json_context() | {"muster:alarmEmail": "platform@example.com"}
    app = build_app(cdk.App(context=context, outdir=str(outdir)))
    app.synth()
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    yield Synthesized(assembly_dir=outdir, template=template, context=context)


@pytest.fixture(scope="session")
def template(synthesized: Synthesized) -> Any:
    from aws_cdk.assertions import Template

    return Template.from_json(synthesized.template)


def resources(template_doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template_doc["Resources"].items() if v["Type"] == kind}
