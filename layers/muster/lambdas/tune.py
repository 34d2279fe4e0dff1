"""The tuner function: one item of `muster tune --on aws`'s distributed map.

The map reads the run's items file (`muster.aws.tune_map` writes it) and hands
each item to the function with where the run's files are:

    {"prefix": "runs/<id>", "scenario": "scenario/week.yaml",
     "files": ["scenario/week.yaml", "scenario/week.csv"], "item": {...}}

The function fetches the run's files from the tuner bucket into /tmp (once per
container and run), runs the item with `run` (the handler passes
`muster.sim.tune_item.run_item`, the function a local tuning's process pool runs:
the simulator sits above this floor), writes the whole result beside the
others (`<prefix>/results/<index>.<seed's place>.json`) and returns a small
summary of it, which the map's result writer keeps: a result lists the workloads
that finished, more than a state's output may hold.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from muster.aws.tune_map import ENV_TUNER_BUCKET, result_key

WORKDIR = Path("/tmp/muster-tune")  # Lambda's only writable folder
_PREFIX = re.compile(r"runs/[A-Za-z0-9._-]+")
_FILE = re.compile(r"scenario/[A-Za-z0-9._-]+")


class BadTunerItem(ValueError):
    """The map handed the function something that is not a tuner item."""


def fetch_files(s3: Any, bucket: str, prefix: str, files: list[str], workdir: Path) -> Path:
    """The run's files in a folder of their own under `workdir` (each fetched once)."""
    local = workdir / prefix.replace("/", "-")
    for name in files:
        target = local / name
        if target.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
        partial = target.with_name(target.name + ".part")
        partial.write_bytes(body)
        partial.replace(target)
    return local


def run_setting(
    event: dict[str, Any],
    s3: Any,
    bucket: str,
    run: Callable[[dict[str, Any]], dict[str, Any]],
    workdir: Path = WORKDIR,
) -> dict[str, Any]:
    """Run one item of the map; its result goes to the bucket, its summary is returned."""
    prefix, scenario, files = event.get("prefix"), event.get("scenario"), event.get("files")
    item = event.get("item")
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise BadTunerItem(f"prefix: expected runs/<id>, got {prefix!r}")
    if not isinstance(files, list) or not all(
        isinstance(f, str) and _FILE.fullmatch(f) for f in files
    ):
        raise BadTunerItem(f"files: expected scenario/<name> keys, got {files!r}")
    if not isinstance(scenario, str) or scenario not in files:
        raise BadTunerItem(f"scenario: {scenario!r} is not one of the run's files")
    if not isinstance(item, dict) or not {"index", "at", "scenario"} <= set(item):
        raise BadTunerItem("item: expected a tuner item with its index and seed's place")
    local = fetch_files(s3, bucket, prefix, files, workdir)
    out = run(dict(item, scenario={**item["scenario"], "path": str(local / scenario)}))
    key = result_key(prefix, int(item["index"]), int(item["at"]))
    s3.put_object(
        Bucket=bucket, Key=key, Body=json.dumps(out).encode(), ContentType="application/json"
    )
    return {
        "index": out["index"],
        "at": int(item["at"]),
        "seed": out["seed"],
        "result": key,
        "dominatedAt": out["dominatedAt"],
    }


def tuner_bucket() -> str:
    return os.environ[ENV_TUNER_BUCKET]
