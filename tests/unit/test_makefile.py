"""`make demo` installs only what the demo runs; `make test` everything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str, venv: Path) -> str:
    """The commands `make TARGET` would run with the virtual environment at `venv`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout


def test_a_fresh_demo_installs_the_local_mode_only(tmp_path: Path) -> None:
    commands = dry_run("demo", tmp_path / "venv")
    assert "-e '.[local]'" in commands
    assert ".[dev]" not in commands and "npm ci" not in commands
    assert commands.strip().endswith("muster local --out out/demo")


def test_a_full_install_serves_the_demo_without_installing_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-demo").touch()  # what the full install leaves behind as well
    os.utime(venv / ".installed-demo", (4e9, 4e9))  # newer than pyproject.toml
    assert "pip install" not in dry_run("demo", venv)


def test_the_full_install_marks_the_demo_installed_too(tmp_path: Path) -> None:
    commands = dry_run("unit", tmp_path / "venv")
    assert "-e '.[dev]'" in commands
    assert f"touch {tmp_path / 'venv'}/.installed {tmp_path / 'venv'}/.installed-demo" in commands
