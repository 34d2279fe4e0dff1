"""The CDK CLI from package.json synthesises offline, and cfn-lint accepts the template."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest import CLUSTER_ARGS, REPO_ROOT, STACK, Synthesized, offline_env

pytestmark = pytest.mark.slow


def test_cfn_lint_accepts_the_template(synthesized: Synthesized) -> None:
    template = synthesized.assembly_dir / f"{STACK}.template.json"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--ignore-checks",
            "W3005",
            "--",
            str(template),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_npx_cdk_synth_works_with_the_pinned_cli(synthesized: Synthesized, tmp_path: Path) -> None:
    if shutil.which("npx") is None:
        pytest.skip("Node.js (npx) is not installed")
    cli = REPO_ROOT / "node_modules" / ".bin" / "cdk"
    if not cli.exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=REPO_ROOT, check=True)
    pinned = json.loads((REPO_ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    env = offline_env()
    version = subprocess.run(
        ["npx", "--no-install", "cdk", "--version"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.startswith(pinned)
    done = subprocess.run(
        [
            "npx",
            "--no-install",
            "cdk",
            "synth",
            *CLUSTER_ARGS,
            "--quiet",
            "--no-notices",
            "-o",
            str(tmp_path / "out"),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    template = json.loads((tmp_path / "out" / f"{STACK}.template.json").read_text())
    assert any(
        r["Type"] == "AWS::StepFunctions::StateMachine" for r in template["Resources"].values()
    )
