"""The `muster` Lambda layer, built without Docker from a committed lock file.

The layer holds `python/`: the locked run-time dependencies
(`requirements/layer.lock`, see `make lock`) and the part of the `muster`
package the functions import, found by following the imports of
`functions/*/handler.py` (no simulator, local mode, command line or agent).
pip installs the dependencies for the Lambda platform (manylinux x86_64, CPython
3.12, wheels only, every wheel checked against the lock's hashes), so synth works
on any laptop or CI runner without a Docker daemon. boto3, botocore and
s3transfer are left to the Lambda runtime, which ships them.

Everything is compiled to bytecode for the runtime's Python by an interpreter of
that version, with unchecked-hash invalidation: the layer is immutable, so
Python trusts the `.pyc` without comparing it with the source, and a cold start
imports without compiling. Without such an interpreter the layer ships sources
only (with a warning); `MUSTER_LAYER_PYTHON` names one explicitly.

Two caches keep repeated synths fast and let them run offline: a wheelhouse
(the downloaded wheels) and the installed, compiled site folder, both keyed by
the lock file's hash, under `~/.cache/muster/lambda-layer` (or `$MUSTER_LAYER_CACHE`).
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra import constants as c

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO_ROOT / "layers" / "muster"
FUNCTIONS_DIR = REPO_ROOT / "functions"
LOCK_FILE = REPO_ROOT / "requirements" / "layer.lock"
# Provided by the Lambda Python runtime; shipping them would only add ~80 MB.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
# Where Lambda mounts a layer's python/ folder: the file names tracebacks show.
LAYER_MOUNT = "/opt/python"
# Bumped when the layout of the cached site folder changes.
CACHE_FORMAT = 2


class LayerBuildError(RuntimeError):
    """pip could not produce the layer's dependencies (offline with an empty cache?)."""


# --------------------------------------------------------------------------- the lock


def lock_entries(lock_file: Path = LOCK_FILE) -> list[str]:
    """The lock's entries, one line each: `name==version --hash=sha256:...`."""
    text = re.sub(r"\\\n", " ", lock_file.read_text())
    entries = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(" ".join(line.split()))
    return entries


def locked_requirements(lock_file: Path = LOCK_FILE) -> list[str]:
    """The lock's entries less what the Lambda runtime provides: what the layer installs."""
    return [e for e in lock_entries(lock_file) if distribution(e) not in RUNTIME_PROVIDED]


def distribution(requirement: str) -> str:
    name = requirement
    for stop in "[<>=!~; ":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-")


def lock_key(lock_file: Path = LOCK_FILE) -> str:
    """The cache key: the lock file's hash, the target platform and Python."""
    doc = {
        "lock": hashlib.sha256(lock_file.read_bytes()).hexdigest(),
        "platform": c.LAYER_PLATFORM,
        "python": c.PYTHON_VERSION,
        "format": CACHE_FORMAT,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the package


def handler_files(functions_dir: Path = FUNCTIONS_DIR) -> list[Path]:
    """The control plane's handlers: every function's but the optional tuner's, whose
    layer (the simulator's part of `muster`) is its own."""
    return sorted(p for p in functions_dir.glob("*/handler.py") if p.parent.name != c.TUNER)


def tuner_handler_files(functions_dir: Path = FUNCTIONS_DIR) -> list[Path]:
    return [functions_dir / c.TUNER / "handler.py"]


def imported_modules(package_dir: Path, entry_points: Iterable[Path]) -> set[str]:
    """The `muster` modules that `entry_points` import, directly or through each other.

    Every import statement counts, at module level or inside a function (a lazy
    import is still run by some invocation); importing `a.b.c` runs `a` and `a.b`.
    """
    root = package_dir.name
    seen: set[str] = set()
    todo = list(entry_points)
    while todo:
        tree = ast.parse(todo.pop().read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != root:
                    continue
                for depth in range(1, len(parts) + 1):
                    module = ".".join(parts[:depth])
                    path = _module_path(package_dir, module)
                    if path is not None and module not in seen:
                        seen.add(module)
                        todo.append(path)
    return seen


def _module_path(package_dir: Path, module: str) -> Path | None:
    relative = Path(*module.split(".")[1:])
    package = package_dir / relative / "__init__.py"
    if package.is_file():
        return package
    plain = (package_dir / relative).with_suffix(".py")
    return plain if module.count(".") and plain.is_file() else None


def layer_package_files(
    package_dir: Path = PACKAGE_DIR,
    functions_dir: Path = FUNCTIONS_DIR,
    entry_points: Iterable[Path] | None = None,
) -> list[Path]:
    """The package's files the layer ships (relative): what the handlers import
    (`entry_points`, or the control plane's handlers)."""
    entries = handler_files(functions_dir) if entry_points is None else list(entry_points)
    modules = imported_modules(package_dir, entries)
    files = {_module_path(package_dir, m) for m in modules}
    shipped = sorted(path.relative_to(package_dir) for path in files if path is not None)
    if (package_dir / "py.typed").is_file():
        shipped.append(Path("py.typed"))
    return shipped


def package_fingerprint(
    package_dir: Path = PACKAGE_DIR,
    functions_dir: Path = FUNCTIONS_DIR,
    entry_points: Iterable[Path] | None = None,
) -> str:
    """Hash of the shipped package files, so the layer changes when their code does."""
    digest = hashlib.sha256()
    for relative in layer_package_files(package_dir, functions_dir, entry_points):
        digest.update(str(relative).encode())
        digest.update((package_dir / relative).read_bytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------- bytecode


def find_runtime_python(version: str = c.PYTHON_VERSION) -> str | None:
    """An interpreter of the Lambda runtime's Python version, to compile the layer."""
    candidates = [os.environ.get("MUSTER_LAYER_PYTHON", "")]
    candidates.append(shutil.which(f"python{version}") or "")
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates += sorted(glob.glob(f"{pyenv}/versions/{version}*/bin/python{version}"))
    if sys.version.startswith(f"{version}."):
        candidates.append(sys.executable)
    for candidate in filter(None, candidates):
        done = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    return None


def compile_tree(python: str | None, tree: Path, root: Path | None = None) -> bool:
    """Compile `tree` for the runtime's Python; False when there is no such interpreter.

    `root` is the folder Lambda mounts as `/opt/python`, so tracebacks name the
    files where they are on the function.
    """
    if python is None:
        return False
    cmd = [
        python, "-m", "compileall", "-q", "-j", "0",
        "--invalidation-mode", "unchecked-hash",
        "-s", str(root or tree), "-p", LAYER_MOUNT, str(tree),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LayerBuildError(f"compileall failed on {tree}:\n{done.stdout}{done.stderr}")
    return True


def default_cache_dir() -> Path:
    """Outside the work tree, so fresh clones on the same machine share it."""
    if os.environ.get("MUSTER_LAYER_CACHE"):
        return Path(os.environ["MUSTER_LAYER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "muster" / "lambda-layer"


class LayerBuilder:
    """Installs the locked dependencies once per lock and assembles the layer."""

    def __init__(
        self,
        cache_dir: Path,
        *,
        lock_file: Path = LOCK_FILE,
        package_dir: Path = PACKAGE_DIR,
        functions_dir: Path = FUNCTIONS_DIR,
        python: str = sys.executable,
        runtime_python: str | None = None,
    ) -> None:
        self.cache_dir = cache_dir
        self.lock_file = lock_file
        self.package_dir = package_dir
        self.functions_dir = functions_dir
        self.python = python
        self._runtime_python = runtime_python
        self._warned = False
        self.key = lock_key(lock_file)

    @property
    def runtime_python(self) -> str | None:
        """The interpreter that compiles the layer ("" given: none, sources only)."""
        if self._runtime_python is None:
            self._runtime_python = find_runtime_python() or ""
        if not self._runtime_python and not self._warned:
            self._warned = True
            warnings.warn(
                f"no Python {c.PYTHON_VERSION} found (python{c.PYTHON_VERSION}, pyenv, "
                "MUSTER_LAYER_PYTHON): the layer ships sources only and its functions "
                "compile them on every cold start",
                stacklevel=2,
            )
        return self._runtime_python or None

    @property
    def site_dir(self) -> Path:
        return self.cache_dir / f"site-{self.key}"

    @property
    def wheelhouse(self) -> Path:
        return self.cache_dir / f"wheels-{self.key}"

    def build(self, output_dir: Path, entry_points: Iterable[Path] | None = None) -> None:
        """Write `python/` (dependencies + the functions' part of `muster`, or the part
        `entry_points` import) into `output_dir`."""
        site = self.dependencies()
        target = output_dir / "python"
        shutil.copytree(site, target, dirs_exist_ok=True)
        package = target / self.package_dir.name
        shipped = layer_package_files(self.package_dir, self.functions_dir, entry_points)
        for relative in shipped:
            (package / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.package_dir / relative, package / relative)
        compile_tree(self.runtime_python, package, root=target)

    def dependencies(self) -> Path:
        """The installed, compiled dependencies (cached per lock). Two synths at once
        (two terminals, parallel tests) fill the cache once: the second waits."""
        if self.site_dir.is_dir():
            return self.site_dir
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.cache_dir / f"fill-{self.key}.lock"):
            if self.site_dir.is_dir():
                return self.site_dir
            return self._fill()

    def _fill(self) -> Path:
        staging = self.cache_dir / f"staging-{self.key}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        requirements = self.cache_dir / f"requirements-{self.key}-{os.getpid()}.txt"
        requirements.write_text("\n".join(locked_requirements(self.lock_file)) + "\n")
        try:
            if not (self.wheelhouse.is_dir() and self._install(requirements, staging)):
                self._download(requirements)
                shutil.rmtree(staging, ignore_errors=True)
                if not self._install(requirements, staging):
                    raise LayerBuildError(
                        f"pip could not install the layer's dependencies from {self.wheelhouse}"
                    )
            shutil.rmtree(staging / "bin", ignore_errors=True)
            compile_tree(self.runtime_python, staging)
            staging.rename(self.site_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            requirements.unlink(missing_ok=True)
        return self.site_dir

    def _platform_args(self) -> list[str]:
        return [
            "--platform", c.LAYER_PLATFORM,
            "--implementation", "cp",
            "--python-version", c.PYTHON_VERSION,
            "--only-binary=:all:",
        ]  # fmt: skip

    def _install(self, requirements: Path, target: Path) -> bool:
        """Install from the wheelhouse only (works offline); False when wheels are missing."""
        cmd = [
            self.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-index", "--find-links", str(self.wheelhouse), "--no-compile",
            "--no-deps", "--require-hashes", "--target", str(target),
            *self._platform_args(), "-r", str(requirements),
        ]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, check=False).returncode == 0

    def _download(self, requirements: Path) -> None:
        cmd = [
            self.python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--require-hashes", "--dest", str(self.wheelhouse),
            *self._platform_args(), "-r", str(requirements),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LayerBuildError(
                f"pip could not download the locked dependencies ({self.lock_file}):\n"
                f"{done.stderr.strip()}"
            )


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Holds an exclusive lock on `lock_path` (POSIX; elsewhere, none)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock, as before
        yield
        return
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def default_builder() -> LayerBuilder:
    return LayerBuilder(default_cache_dir())


@jsii.implements(ILocalBundling)
class _LocalBundling:
    """CDK's hook for bundling on the host instead of in a container."""

    def __init__(self, builder: LayerBuilder, entry_points: list[Path] | None = None) -> None:
        self.builder, self.entry_points = builder, entry_points

    def try_bundle(self, output_dir: str, *_args: Any, **_kwargs: Any) -> bool:
        self.builder.build(Path(output_dir), self.entry_points)
        return True


class MusterLayer(Construct):
    """The layer every control-plane function gets: the functions' part of `muster` and
    its dependencies; with `entry_points`, the part those handlers import instead."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        builder: LayerBuilder | None = None,
        entry_points: list[Path] | None = None,
        description: str = "muster package and its run-time dependencies",
    ) -> None:
        super().__init__(scope, construct_id)
        builder = builder or default_builder()
        shipped = package_fingerprint(builder.package_dir, builder.functions_dir, entry_points)
        # A layer with bytecode and one of sources only are different assets.
        form = "bytecode" if builder.runtime_python else "sources"
        asset_hash = hashlib.sha256(f"{builder.key}:{shipped}:{form}".encode()).hexdigest()
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
                    local=_LocalBundling(builder, entry_points),
                ),
            ),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.X86_64],
            description=description,
        )
