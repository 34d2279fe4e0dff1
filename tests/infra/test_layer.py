"""The layer's dependency list, its cache, and building it offline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.layer import (
    LayerBuilder,
    default_cache_dir,
    package_fingerprint,
    requirements_key,
    runtime_requirements,
)


def test_requirements_come_from_pyproject_without_what_lambda_provides(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["boto3>=1.34", "PyYAML>=6,<7", "kubernetes[adal]>=30"]\n'
    )
    requirements = runtime_requirements(pyproject)
    assert "boto3>=1.34" not in requirements
    assert requirements[:2] == ["PyYAML>=6,<7", "kubernetes[adal]>=30"]
    # the runtime's botocore needs python-dateutil 2.x, and the layer comes first on the path
    assert any(r.startswith("python-dateutil") and "<3" in r for r in requirements)


def test_the_cache_key_follows_the_requirements() -> None:
    assert requirements_key(["a>=1"]) == requirements_key(["a>=1"])
    assert requirements_key(["a>=1"]) != requirements_key(["a>=2"])


def test_the_asset_changes_when_the_package_changes(tmp_path: Path) -> None:
    package = tmp_path / "muster"
    package.mkdir()
    (package / "core.py").write_text("A = 1\n")
    before = package_fingerprint(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0")
    assert package_fingerprint(package) == before  # bytecode is not part of it
    (package / "core.py").write_text("A = 2\n")
    assert package_fingerprint(package) != before


def test_a_cached_build_needs_no_pip(tmp_path: Path) -> None:
    # GIVEN a cache that already holds the installed dependencies
    package = tmp_path / "src" / "muster"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__pycache__").mkdir()
    builder = LayerBuilder(
        ["PyYAML>=6"], tmp_path / "cache", package_dir=package, python="/bin/false"
    )
    (builder.site_dir / "yaml").mkdir(parents=True)
    # WHEN the layer is built (with a "python" that fails if pip is ever run)
    out = tmp_path / "out"
    builder.build(out)
    # THEN it holds the dependencies and the package, without bytecode
    assert (out / "python" / "yaml").is_dir()
    assert (out / "python" / "muster" / "__init__.py").is_file()
    assert not (out / "python" / "muster" / "__pycache__").exists()


@pytest.mark.slow
def test_the_dependencies_install_offline_from_the_wheelhouse(tmp_path: Path) -> None:
    # GIVEN only the downloaded wheels (the installed folder is gone)
    shared = LayerBuilder(runtime_requirements(), default_cache_dir())
    if not shared.wheelhouse.is_dir():
        pytest.skip("no wheelhouse yet (the first synth creates it)")
    builder = LayerBuilder(runtime_requirements(), tmp_path)
    shutil.copytree(shared.wheelhouse, builder.wheelhouse)
    # WHEN the dependencies are installed (pip runs with --no-index: no network)
    site = builder.dependencies()
    # THEN they are there for the Lambda platform, less what the runtime provides
    assert (site / "kubernetes").is_dir()
    assert (site / "aws_lambda_powertools").is_dir()
    assert list(site.glob("yaml/_yaml.cpython-312-x86_64-linux-gnu.so"))
    assert not (site / "botocore").exists() and not (site / "boto3").exists()
    assert not list(tmp_path.glob("staging-*"))
