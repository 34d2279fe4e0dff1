"""The layer's lock, its cache, what of the package it ships, and building it offline."""

from __future__ import annotations

import shutil
import threading
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infra.layer import (
    LOCK_FILE,
    LayerBuilder,
    default_builder,
    distribution,
    imported_modules,
    layer_package_files,
    lock_entries,
    lock_key,
    locked_requirements,
    package_fingerprint,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

LOCK = """\
# a comment
boto3==1.40.0 \\
    --hash=sha256:aaaa
    # via muster (pyproject.toml)
pyyaml==6.0.2 \\
    --hash=sha256:bbbb \\
    --hash=sha256:cccc
    # via muster (pyproject.toml)
s3transfer==0.14.0 \\
    --hash=sha256:dddd
"""


def test_the_layer_installs_the_lock_less_what_lambda_provides(tmp_path: Path) -> None:
    lock = tmp_path / "layer.lock"
    lock.write_text(LOCK)
    assert locked_requirements(lock) == ["pyyaml==6.0.2 --hash=sha256:bbbb --hash=sha256:cccc"]
    assert [distribution(e) for e in lock_entries(lock)] == ["boto3", "pyyaml", "s3transfer"]


def test_the_cache_key_is_the_locks_hash(tmp_path: Path) -> None:
    lock = tmp_path / "layer.lock"
    lock.write_text(LOCK)
    before = lock_key(lock)
    assert lock_key(lock) == before
    lock.write_text(LOCK.replace("6.0.2", "6.0.3"))
    assert lock_key(lock) != before


def test_the_committed_lock_pins_every_runtime_dependency_within_its_range() -> None:
    # GIVEN pyproject's run-time dependencies and the committed lock
    pins = {}
    for entry in lock_entries(LOCK_FILE):
        name, version = entry.split()[0].split("==")
        pins[distribution(name)] = version
        # THEN every pin carries a hash (pip installs with --require-hashes)
        assert "--hash=sha256:" in entry, entry
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    for dependency in project["dependencies"]:
        requirement = Requirement(dependency)
        name = distribution(requirement.name)
        # THEN each is pinned, at a version its range allows (else: `make lock`)
        assert name in pins, f"{name} is not in {LOCK_FILE.name}: run `make lock`"
        assert requirement.specifier.contains(pins[name]), (name, pins[name])
    # AND the agent's client is not in the functions' layer
    assert "kubernetes" not in pins


def test_the_layer_ships_only_the_modules_the_handlers_import() -> None:
    shipped = {str(p) for p in layer_package_files()}
    # the decision core, the runtime, the AWS adapters and the Kubernetes adapter
    for needed in (
        "__init__.py",
        "core/decide.py",
        "runtime/service.py",
        "lambdas/wiring.py",
        "kube/adapter.py",
        "kube/http.py",
        "kube/auth.py",
    ):
        assert needed in shipped, needed
    # no simulator, local mode, command line or agent
    assert not [p for p in shipped if p.startswith(("sim/", "local/", "scenarios/", "cli/"))]
    for unshipped in (
        "cli/__init__.py",
        "agent/agent.py",
        "agent/kubeconfig.py",
        "agent/watch.py",
        "agent/leader.py",
    ):
        assert unshipped not in shipped, unshipped
    assert not [p for p in shipped if p.startswith("admin")]


def test_lazy_imports_count_and_parents_are_shipped(tmp_path: Path) -> None:
    # GIVEN a package whose handler imports a module lazily, inside a function
    package = tmp_path / "muster"
    (package / "a").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a" / "__init__.py").write_text("")
    (package / "a" / "b.py").write_text("def f():\n    from muster import c\n")
    (package / "c.py").write_text("import json\n")
    (package / "d.py").write_text("")
    functions = tmp_path / "functions"
    (functions / "one").mkdir(parents=True)
    (functions / "one" / "handler.py").write_text("from muster.a.b import f\n")
    # WHEN the shipped modules are worked out
    modules = imported_modules(package, [functions / "one" / "handler.py"])
    # THEN the lazy import and every parent package count, the unused module does not
    assert modules == {"muster", "muster.a", "muster.a.b", "muster.c"}
    assert [str(p) for p in layer_package_files(package, functions)] == [
        "__init__.py",
        "a/__init__.py",
        "a/b.py",
        "c.py",
    ]


def test_the_asset_changes_with_shipped_code_only(tmp_path: Path) -> None:
    package = tmp_path / "muster"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "core.py").write_text("A = 1\n")
    (package / "sim.py").write_text("B = 1\n")
    functions = tmp_path / "functions"
    (functions / "one").mkdir(parents=True)
    (functions / "one" / "handler.py").write_text("import muster.core\n")
    before = package_fingerprint(package, functions)
    (package / "sim.py").write_text("B = 2\n")
    assert package_fingerprint(package, functions) == before  # not in the layer
    (package / "core.py").write_text("A = 2\n")
    assert package_fingerprint(package, functions) != before


def test_a_cached_build_needs_no_pip(tmp_path: Path) -> None:
    # GIVEN a cache that already holds the installed dependencies
    package = tmp_path / "src" / "muster"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sim.py").write_text("")
    functions = tmp_path / "functions"
    (functions / "one").mkdir(parents=True)
    (functions / "one" / "handler.py").write_text("import muster\n")
    lock = tmp_path / "layer.lock"
    lock.write_text(LOCK)
    builder = LayerBuilder(
        tmp_path / "cache",
        lock_file=lock,
        package_dir=package,
        functions_dir=functions,
        python="/bin/false",
        runtime_python="",
    )
    (builder.site_dir / "yaml").mkdir(parents=True)
    # WHEN the layer is built (with a "python" that fails if pip is ever run)
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="sources only"):
        builder.build(out)
    # THEN it holds the dependencies and the handlers' part of the package
    assert (out / "python" / "yaml").is_dir()
    assert (out / "python" / "muster" / "__init__.py").is_file()
    assert not (out / "python" / "muster" / "sim.py").exists()


@pytest.mark.slow
def test_the_dependencies_install_offline_from_the_wheelhouse(tmp_path: Path) -> None:
    # GIVEN only the downloaded wheels (the installed folder is gone)
    shared = default_builder()
    if not shared.wheelhouse.is_dir():
        pytest.skip("no wheelhouse yet (the first synth creates it)")
    builder = LayerBuilder(tmp_path, runtime_python="")
    shutil.copytree(shared.wheelhouse, builder.wheelhouse)
    # WHEN the dependencies are installed (pip runs with --no-index: no network)
    with pytest.warns(UserWarning):
        site = builder.dependencies()
    # THEN they are there for the Lambda platform, less what the runtime provides
    assert (site / "aws_lambda_powertools").is_dir()
    assert (site / "urllib3").is_dir()
    assert list(site.glob("yaml/_yaml.cpython-312-x86_64-linux-gnu.so"))
    assert not (site / "botocore").exists() and not (site / "boto3").exists()
    assert not (site / "kubernetes").exists()
    assert not list(tmp_path.glob("staging-*"))


def test_two_synths_at_once_fill_the_cache_once(tmp_path: Path) -> None:
    # GIVEN an empty cache and two processes' worth of builders filling it at once
    # (two terminals, or parallel tests), each filling slowly
    lock = tmp_path / "layer.lock"
    lock.write_text(LOCK)
    fills: list[int] = []
    started = threading.Barrier(2)

    class Slow(LayerBuilder):
        def _fill(self) -> Path:
            fills.append(1)
            time.sleep(0.3)
            (self.site_dir / "yaml").mkdir(parents=True)
            return self.site_dir

    def fill(out: list[Path]) -> None:
        builder = Slow(tmp_path / "cache", lock_file=lock, runtime_python="")
        started.wait()
        out.append(builder.dependencies())

    sites: list[Path] = []
    threads = [threading.Thread(target=fill, args=(sites,)) for _ in range(2)]
    # WHEN both ask for the dependencies
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # THEN one filled the cache, the other waited and took what it made
    assert fills == [1]
    assert len(sites) == 2 and sites[0] == sites[1] and (sites[0] / "yaml").is_dir()
