"""The Lambda layer's size and the cold import time of each function's handler.

Builds the layer as `cdk synth` does (or measures an existing layer's `python/`
folder with `--layer`), then reports its size unpacked and zipped (deflate, as
CDK zips assets) and, for each `functions/*/handler.py`, the time to import the
handler module in a fresh interpreter of the Lambda runtime's Python, with only
the layer, the runtime's own boto3 and the handler's folder on the path, and
then of the Kubernetes adapter, which the first invocation imports. As on
Lambda, where `/opt` is read-only, nothing is written back: a layer without
bytecode is compiled again on every cold start.

The runtime's boto3, botocore and s3transfer are the versions in the lock,
installed once (compiled) into the layer cache, standing in for the runtime's.

    .venv/bin/python benchmarks/layer.py [--layer PATH/python] [--runs 7] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from infra import constants as c  # noqa: E402
from infra.layer import (  # noqa: E402
    RUNTIME_PROVIDED,
    LayerBuilder,
    compile_tree,
    default_builder,
    distribution,
    handler_files,
    lock_entries,
)

# What Lambda sets for a Python 3.12 function (values made up), plus the functions' own.
LAMBDA_ENVIRONMENT = {
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EXECUTION_ENV": f"AWS_Lambda_{c.PYTHON_RUNTIME}",
    "AWS_LAMBDA_FUNCTION_NAME": "bench",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "LAMBDA_TASK_ROOT": "/var/task",
    c.ENV_TABLE_NAME: "muster",
    c.ENV_EVENT_BUS_NAME: "muster",
    c.ENV_ADMISSION_QUEUE_URL: "https://sqs.us-east-1.amazonaws.com/123456789012/requeue",
    c.ENV_TIMER_STATE_MACHINE_ARN: "arn:aws:states:us-east-1:123456789012:stateMachine:t",
    c.ENV_CLUSTER_NAME: "training",
    c.ENV_SETTINGS: "{}",
    c.ENV_HISTORY_TTL_DAYS: "30",
    c.ENV_POWERTOOLS_SERVICE_NAME: c.SERVICE_NAME,
    c.ENV_POWERTOOLS_METRICS_NAMESPACE: c.METRICS_NAMESPACE,
    c.ENV_LOG_LEVEL: "WARNING",
}

# The handler module, then what its first invocation imports to reach the cluster.
_IMPORT = """
import sys, time
start = time.perf_counter()
import handler
loaded = time.perf_counter()
import muster.kube.adapter
print(loaded - start, time.perf_counter() - loaded)
"""


def tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def zipped_size(python_dir: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "layer.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(python_dir.rglob("*")):
                if path.is_file():
                    z.write(path, Path("python") / path.relative_to(python_dir))
        return archive.stat().st_size


def runtime_boto3(builder: LayerBuilder, python: str) -> Path:
    """boto3, botocore, s3transfer at the lock's versions, compiled: the runtime's stand-in."""
    target = builder.cache_dir / f"runtime-{builder.key}"
    if target.is_dir():
        return target
    lines = [e for e in lock_entries(builder.lock_file) if distribution(e) in RUNTIME_PROVIDED]
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / "runtime.txt"
        requirements.write_text("\n".join(lines) + "\n")
        staging = Path(tmp) / "site"
        cmd = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--require-hashes", "--no-compile", "--target", str(staging),
            "--platform", c.LAYER_PLATFORM, "--implementation", "cp",
            "--python-version", c.PYTHON_VERSION, "--only-binary=:all:",
            "-r", str(requirements),
        ]  # fmt: skip
        subprocess.run(cmd, check=True)
        compile_tree(python, staging)
        staging.rename(target)
    return target


def cold_imports(python: str, layer: Path, runtime: Path, runs: int) -> dict[str, dict[str, float]]:
    env = {"PATH": os.environ.get("PATH", ""), **LAMBDA_ENVIRONMENT}
    results: dict[str, dict[str, float]] = {}
    for handler in handler_files():
        times, adapter = [], []
        for _ in range(runs):
            # -I: no user site, no PYTHONPATH; -S: no site-packages; -B: write nothing back.
            code = (
                f"import sys; sys.path[:0] = [{str(handler.parent)!r}, {str(layer)!r}, "
                f"{str(runtime)!r}]\n" + _IMPORT
            )
            done = subprocess.run(
                [python, "-I", "-S", "-B", "-c", code],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{handler} did not import:\n{done.stderr}")
            module, first_call = done.stdout.strip().splitlines()[-1].split()
            times.append(float(module))
            adapter.append(float(first_call))
        results[handler.parent.name] = {
            "median_ms": round(statistics.median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1),
            "max_ms": round(max(times) * 1000, 1),
            "kube_adapter_median_ms": round(statistics.median(adapter) * 1000, 1),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=Path, help="an existing layer's python/ folder")
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per handler")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    builder = default_builder()
    python = builder.runtime_python
    if python is None:
        raise SystemExit(f"needs a Python {c.PYTHON_VERSION} interpreter (MUSTER_LAYER_PYTHON)")
    with tempfile.TemporaryDirectory() as tmp:
        layer = args.layer
        if layer is None:
            builder.build(Path(tmp))
            layer = Path(tmp) / "python"
        figures: dict[str, Any] = {
            "layer": str(args.layer or "built from this tree"),
            "unpacked_mb": round(tree_size(layer) / 1e6, 1),
            "zipped_mb": round(zipped_size(layer) / 1e6, 1),
            "pyc_files": sum(1 for _ in layer.rglob("*.pyc")),
            "cold_import": cold_imports(python, layer, runtime_boto3(builder, python), args.runs),
        }
    print(f"layer: {figures['layer']}")
    print(f"  unpacked {figures['unpacked_mb']} MB, zipped {figures['zipped_mb']} MB, "
          f"{figures['pyc_files']} .pyc files")  # fmt: skip
    print(f"  cold import of each handler module (Python {c.PYTHON_VERSION}, {args.runs} runs):")
    for name, t in figures["cold_import"].items():
        print(
            f"    {name:<10} median {t['median_ms']} ms (min {t['min_ms']}, max {t['max_ms']}); "
            f"then the Kubernetes adapter on the first call: {t['kube_adapter_median_ms']} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
