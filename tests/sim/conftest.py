"""Helpers for the simulator tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from muster.sim.engine import RunResult, simulate
from muster.sim.scenario import Scenario, parse_scenario

REPO = Path(__file__).resolve().parents[2]


def find_traces() -> Path:
    """`MUSTER_TRACES`, or the first `shared/traces` beside the repository or above it."""
    explicit = os.environ.get("MUSTER_TRACES")
    if explicit:
        return Path(explicit)
    for parent in REPO.parents:
        if (parent / "shared" / "traces").is_dir():
            return parent / "shared" / "traces"
    return REPO.parent / "shared" / "traces"


TRACES = find_traces()


def scenario(doc: dict[str, Any] | str, **kwargs: Any) -> Scenario:
    data = yaml.safe_load(doc) if isinstance(doc, str) else doc
    return parse_scenario(data, base_dir=Path.cwd(), **kwargs)


def timeline(result: RunResult, workload: str | None = None) -> list[tuple[Any, ...]]:
    """(t, workload, event, attempt/count) tuples, the shape the tests pin."""
    out = []
    for e in result.events:
        if workload is not None and e["workload"] != workload:
            continue
        extra = (
            e.get("cause") or e.get("reason") if e["event"] in ("Evicted", "PodsReady") else None
        )
        out.append((e["t"], e["workload"], e["event"], extra))
    return out


def run(doc: dict[str, Any] | str, policy: str = "gang") -> RunResult:
    return simulate(scenario(doc), policy)


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"job traces not found at {TRACES}")
    return TRACES
