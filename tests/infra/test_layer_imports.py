"""Each function's handler imports with only the synthesized layer on its path.

This is what Lambda gives a function: its own folder, the layer at /opt/python
and the runtime's boto3 and botocore, nothing else. An interpreter of the
runtime's Python runs each import in isolation (`-I -S`: no site-packages, no
PYTHONPATH), so a module the layer lacks fails here, not on the first cold start.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra import constants as c
from infra.layer import RUNTIME_PROVIDED, find_runtime_python, handler_files
from tests.infra.conftest import Synthesized, layer_python

pytestmark = pytest.mark.slow

# Must not reach a function: the agent's client, and the parts of muster it does not run.
NOT_IN_FUNCTIONS = ("kubernetes", "muster.sim", "muster.local", "muster.admin", "muster.cli")

# The handler, then every muster module shipped (the ones its invocations import lazily).
_PROBE = """
import importlib, json, pathlib, sys
import handler
root = pathlib.Path(sys.path[1])
for path in sorted((root / "muster").rglob("*.py")):
    parts = path.relative_to(root).with_suffix("").parts
    importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
print(json.dumps({
    "modules": sorted(sys.modules),
    "muster": {n: getattr(m, "__cached__", None) for n, m in sys.modules.items()
               if n.startswith("muster") and getattr(m, "__file__", None)},
}))
"""


@pytest.fixture(scope="module")
def runtime_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime's boto3, botocore and s3transfer (this environment's), alone in a folder."""
    site = tmp_path_factory.mktemp("lambda-runtime")
    for name in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        (site / name).symlink_to(Path(spec.origin).parent)
    return site


@pytest.mark.parametrize("handler", handler_files(), ids=lambda p: p.parent.name)
def test_each_handler_imports_with_only_the_layer(
    synthesized: Synthesized, runtime_site: Path, handler: Path
) -> None:
    # GIVEN the layer as synthesized, and the runtime's Python if this machine has it
    python = find_runtime_python() or sys.executable
    layer = layer_python(synthesized)
    code = (
        f"import sys; sys.path[:0] = [{str(handler.parent)!r}, {str(layer)!r}, "
        f"{str(runtime_site)!r}]\n" + _PROBE
    )
    env = {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"}
    # WHEN the handler module, then each muster module shipped, is imported in
    # isolation (writing no bytecode back)
    done = subprocess.run(
        [python, "-I", "-S", "-B", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    # THEN it imports, without the agent's client or the tools around the control plane
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    leaked = [
        m for m in found["modules"] for x in NOT_IN_FUNCTIONS if m == x or m.startswith(x + ".")
    ]
    assert not leaked
    assert {"muster.lambdas.wiring", "muster.kube.adapter", "muster.kube.http"} <= set(
        found["muster"]
    )
    # AND every muster module came from the layer, compiled for the runtime's Python
    if python != sys.executable:
        for name, cached in found["muster"].items():
            assert cached and cached.startswith(str(layer)), name
            assert Path(cached).is_file(), f"{name}: no {cached}"


def test_the_layers_bytecode_is_trusted_without_its_sources(synthesized: Synthesized) -> None:
    # GIVEN the layer's compiled files
    layer = layer_python(synthesized)
    if find_runtime_python() is None:
        pytest.skip(f"no Python {c.PYTHON_VERSION} here: the layer ships sources only")
    tag = "cpython-" + c.PYTHON_VERSION.replace(".", "")
    sources = [p for p in layer.rglob("*.py") if "__pycache__" not in p.parts]
    missing = [
        p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").is_file()
    ]
    # THEN every source has its .pyc, for the runtime's Python
    assert sources and not missing, missing[:5]
    # AND each is hash-based and unchecked (flags 0b01): Lambda's read-only /opt is
    # never compared with the source's time stamp, and never recompiled
    pyc = layer / "muster" / "core" / "__pycache__" / f"decide.{tag}.pyc"
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01
