"""Helpers for the simulator tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from muster.sim.engine import RunResult, simulate
from muster.sim.locate import traces_dir as located_traces
from muster.sim.scenario import Scenario, parse_scenario

REPO = Path(__file__).resolve().parents[2]


def find_traces() -> Path:
    """Where the scenarios look for traces (`muster.sim.locate`), or where they would be."""
    return located_traces(REPO) or REPO.parent / "shared" / "traces"


TRACES = find_traces()


def scenario(doc: dict[str, Any] | str, **kwargs: Any) -> Scenario:
    data = yaml.safe_load(doc) if isinstance(doc, str) else doc
    return parse_scenario(data, base_dir=Path.cwd(), **kwargs)


def timeline(result: RunResult, workload: str | None = None) -> list[tuple[Any, ...]]:
    """(t, workload, event, attempt/count) tuples, the shape the tests pin."""
    out = []
    for e in result.events:
        who = e.get("workload") or e["node"]  # node faults name their node
        if workload is not None and who != workload:
            continue
        extra = (
            e.get("cause") or e.get("reason") if e["event"] in ("Evicted", "PodsReady") else None
        )
        out.append((e["t"], who, e["event"], extra))
    return out


def run(doc: dict[str, Any] | str, policy: str = "gang") -> RunResult:
    return simulate(scenario(doc), policy)


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"job traces not found at {TRACES}")
    return TRACES
