"""The `muster` Lambda layer, built without Docker.

The layer holds `python/muster/` (copied from `layers/muster/`) and the
project's run-time dependencies, read from `pyproject.toml` so there is one
list. pip installs them for the Lambda platform (manylinux x86_64, CPython
3.12, wheels only), so synth works on any laptop or CI runner without a Docker
daemon. boto3 and botocore are left to the Lambda runtime, which ships them.

Two caches keep repeated synths fast and let them run offline: a wheelhouse
(the downloaded wheels) and the installed site folder, both keyed by the
requirement list, under `~/.cache/muster/lambda-layer` (or `$MUSTER_LAYER_CACHE`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import constants as c

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO_ROOT / "layers" / "muster"
# Provided by the Lambda Python runtime; shipping them would only add ~80 MB.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
# The layer comes first on the function's path, so what it ships must also suit
# the runtime's botocore (which needs python-dateutil 2.x); this pin also spares
# pip a long backtrack through botocore releases.
LAYER_CONSTRAINTS = ("python-dateutil>=2.8.2,<3",)
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache")


class LayerBuildError(RuntimeError):
    """pip could not produce the layer's dependencies (offline with an empty cache?)."""


def runtime_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """`[project].dependencies`, less what the Lambda runtime already provides."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [d for d in deps if _distribution(d) not in RUNTIME_PROVIDED] + list(LAYER_CONSTRAINTS)


def _distribution(requirement: str) -> str:
    name = requirement
    for stop in "[<>=!~; ":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-")


def requirements_key(requirements: Sequence[str]) -> str:
    doc = {
        "requirements": list(requirements),
        "platform": c.LAYER_PLATFORM,
        "python": c.PYTHON_VERSION,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def package_fingerprint(package_dir: Path = PACKAGE_DIR) -> str:
    """Hash of the `muster` package's files, so the layer changes when the code does."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(str(path.relative_to(package_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """Outside the work tree, so fresh clones on the same machine share it."""
    if os.environ.get("MUSTER_LAYER_CACHE"):
        return Path(os.environ["MUSTER_LAYER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "muster" / "lambda-layer"


class LayerBuilder:
    """Installs the dependencies once per requirement list and assembles the layer."""

    def __init__(
        self,
        requirements: Sequence[str],
        cache_dir: Path,
        package_dir: Path = PACKAGE_DIR,
        python: str = sys.executable,
    ) -> None:
        self.requirements = list(requirements)
        self.cache_dir = cache_dir
        self.package_dir = package_dir
        self.python = python
        self.key = requirements_key(self.requirements)

    @property
    def site_dir(self) -> Path:
        return self.cache_dir / f"site-{self.key}"

    @property
    def wheelhouse(self) -> Path:
        return self.cache_dir / f"wheels-{self.key}"

    def build(self, output_dir: Path) -> None:
        """Write `python/` (dependencies + `muster`) into `output_dir`."""
        site = self.dependencies()
        target = output_dir / "python"
        shutil.copytree(site, target, dirs_exist_ok=True)
        shutil.copytree(self.package_dir, target / "muster", ignore=_IGNORE, dirs_exist_ok=True)

    def dependencies(self) -> Path:
        if self.site_dir.is_dir():
            return self.site_dir
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        staging = self.cache_dir / f"staging-{self.key}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            if not (self.wheelhouse.is_dir() and self._install(staging)):
                self._download()
                shutil.rmtree(staging, ignore_errors=True)
                if not self._install(staging):
                    raise LayerBuildError(
                        f"pip could not install the layer's dependencies from {self.wheelhouse}"
                    )
            for name in RUNTIME_PROVIDED:
                for path in staging.glob(f"{name}*"):
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            shutil.rmtree(staging / "bin", ignore_errors=True)
            staging.rename(self.site_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return self.site_dir

    def _platform_args(self) -> list[str]:
        return [
            "--platform", c.LAYER_PLATFORM,
            "--implementation", "cp",
            "--python-version", c.PYTHON_VERSION,
            "--only-binary=:all:",
        ]  # fmt: skip

    def _install(self, target: Path) -> bool:
        """Install from the wheelhouse only (works offline); False when wheels are missing."""
        cmd = [
            self.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-index", "--find-links", str(self.wheelhouse), "--no-compile",
            "--target", str(target), *self._platform_args(), *self.requirements,
        ]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, check=False).returncode == 0

    def _download(self) -> None:
        cmd = [
            self.python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--dest", str(self.wheelhouse), *self._platform_args(), *self.requirements,
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LayerBuildError(
                "pip could not download the layer's dependencies "
                f"({' '.join(self.requirements)}):\n{done.stderr.strip()}"
            )


@jsii.implements(ILocalBundling)
class _LocalBundling:
    """CDK's hook for bundling on the host instead of in a container."""

    def __init__(self, builder: LayerBuilder) -> None:
        self.builder = builder

    def try_bundle(self, output_dir: str, *_args: Any, **_kwargs: Any) -> bool:
        self.builder.build(Path(output_dir))
        return True


class MusterLayer(Construct):
    """The layer every function gets: the `muster` package and its dependencies."""

    def __init__(
        self, scope: Construct, construct_id: str, *, builder: LayerBuilder | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        builder = builder or LayerBuilder(runtime_requirements(), default_cache_dir())
        asset_hash = hashlib.sha256(
            f"{builder.key}:{package_fingerprint(builder.package_dir)}".encode()
        ).hexdigest()
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(builder.package_dir.parent),
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=asset_hash,
                bundling=BundlingOptions(
                    # Never pulled: local bundling always succeeds or raises.
                    image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.12"),
                    local=_LocalBundling(builder),
                ),
            ),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.X86_64],
            description="muster package and its run-time dependencies",
        )
