"""The example workloads apply as shipped: their namespace exists, and the timeout
they ask for is the one they get under the default settings (not silently capped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from muster.core import DEFAULT_SETTINGS, parse_duration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "kubernetes" / "examples").glob("*.yaml"))


def workloads(path: Path) -> tuple[set[str], list[dict[str, Any]]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    labelled = [d for d in docs if "muster.io/queue" in (d["metadata"].get("labels") or {})]
    return namespaces, labelled


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_creates_the_namespace_it_uses(path: Path) -> None:
    namespaces, labelled = workloads(path)
    assert labelled, f"{path.name} has no workload for Muster"
    for doc in labelled:
        namespace = doc["metadata"].get("namespace", "default")
        assert namespace == "default" or namespace in namespaces, (
            f"{path.name}: {doc['kind']} {doc['metadata']['name']} uses namespace "
            f"{namespace}, which the file does not create"
        )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_timeout_is_not_capped_by_the_default_settings(path: Path) -> None:
    for doc in workloads(path)[1]:
        raw = (doc["metadata"].get("annotations") or {}).get("muster.io/timeout")
        if raw is None:
            continue
        asked = parse_duration(raw)
        got = DEFAULT_SETTINGS.for_queue(doc["metadata"]["labels"]["muster.io/queue"])
        assert got.startup_timeout(asked) == asked, (
            f"{path.name}: muster.io/timeout {raw} would be capped to "
            f"{got.startup_timeout(asked):g}s without maxTimeout"
        )
