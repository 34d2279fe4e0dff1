"""`muster agent-image`: a build alone needs neither the stack nor AWS, and the build
context is what the Dockerfile copies, not the whole checkout."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from muster import __version__
from muster.agent_image import build_context
from muster.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "agent.Dockerfile"

# What a checkout holds after `make demo`, beside what the image is built from.
CHECKOUT = {
    "pyproject.toml": "[project]\n",
    "README.md": "# Muster\n",
    "LICENSE": "Apache\n",
    "layers/muster/__init__.py": "",
    "layers/muster/core/decide.py": "",
    "layers/muster/scenarios/deadlock.yaml": "",
    "layers/muster/__pycache__/__init__.cpython-312.pyc": "",
    "layers/muster/core/__pycache__/decide.cpython-312.pyc": "",
    "layers/muster.egg-info/PKG-INFO": "",
    ".venv/lib/python3.12/site-packages/boto3/__init__.py": "",
    "node_modules/aws-cdk/package.json": "{}",
    "cdk.out/manifest.json": "{}",
    ".git/HEAD": "ref: refs/heads/main\n",
    "out/deadlock/gpu-use.png": "",
    "tests/unit/test_x.py": "",
    "infra/stack.py": "",
    "deploy/agent.Dockerfile": "FROM scratch\n",
    "deploy/kubernetes/agent.yaml": "",
}
SENT = [
    ".dockerignore",
    "README.md",
    "deploy/agent.Dockerfile",
    "layers/muster/__init__.py",
    "layers/muster/core/decide.py",
    "layers/muster/scenarios/deadlock.yaml",
    "pyproject.toml",
]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for name, text in CHECKOUT.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".dockerignore").write_text((ROOT / ".dockerignore").read_text())
    return root


def test_the_build_context_is_what_the_dockerfile_copies(checkout: Path) -> None:
    # GIVEN a checkout with a virtual environment, node_modules, cdk.out, .git, out/
    # WHEN Docker's rules are applied with the shipped .dockerignore
    listed = build_context(checkout, checkout / "deploy" / "agent.Dockerfile")
    # THEN only the package, its metadata files and the Dockerfile are sent
    assert listed == SENT
    # AND the real checkout sends its package and nothing of what a run leaves behind
    real = build_context(ROOT, DOCKERFILE)
    assert "layers/muster/agent/__init__.py" in real and "pyproject.toml" in real
    assert all(
        f.startswith("layers/muster/") or f in ("pyproject.toml", "README.md", ".dockerignore")
        for f in real
        if f != "deploy/agent.Dockerfile"
    )
    assert not [f for f in real if "__pycache__" in f or f.endswith(".pyc")]


def test_the_listing_follows_docker_s_own_rules(checkout: Path) -> None:
    # docker-py's reading of .dockerignore (the Docker SDK's), where it is installed
    build = pytest.importorskip("docker.utils.build")
    patterns = [
        line.strip()
        for line in (checkout / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sent = build.exclude_paths(str(checkout), patterns, dockerfile="deploy/agent.Dockerfile")
    files = sorted(p for p in sent if (checkout / p).is_file())
    assert files == build_context(checkout, checkout / "deploy" / "agent.Dockerfile") == SENT


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    script = bin_dir / "docker"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("MUSTER_DOCKER", raising=False)
    return log


def test_no_push_builds_without_reading_the_stack_or_touching_aws(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN no AWS at all: any stack read or AWS session fails the test
    import boto3
    import muster.agent_image

    def no_aws(*_: object, **__: object) -> None:
        raise AssertionError("a build alone must not need AWS")

    monkeypatch.setattr(muster.agent_image, "stack_outputs", no_aws)
    monkeypatch.setattr(boto3.session, "Session", no_aws)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    # WHEN the image is only built
    assert main(["agent-image", "--no-push"]) == 0
    # THEN docker built the Dockerfile under a local name, and nothing else ran
    image = f"muster-agent:{__version__}"
    assert fake_docker.read_text().splitlines() == [f"build -f {DOCKERFILE} -t {image} {ROOT}"]
    out, err = capsys.readouterr()
    assert out.strip() == image
    # AND it said how big the context it sent was
    assert f"build context {ROOT}: " in err and " files, " in err
