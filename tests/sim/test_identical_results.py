"""The simulator's event logs stay exactly what they were.

Every built-in scenario and a Philly day (on the example's 80-node cluster and on
the contended 32-node one) under every policy: the sha256 of `events.jsonl` as
`muster simulate --out` writes it must equal the digest stored beside this file.
A speed-up of the core or the simulator must not move a single event. When a change
of behaviour is intended, regenerate the digests with
`MUSTER_UPDATE_DIGESTS=1 pytest tests/sim/test_identical_results.py` and say why in
the commit.

The lifecycle alone (the log without its node-fault lines, which only report what
the simulated cluster did) is pinned separately, to the digests the logs had before
node faults were written into them: those are never regenerated with the others.
The local story's moved twice: when the story gained a job whose image cannot be
pulled (with workloadFaults on), and when its timeout, backoff and horizon grew so
that the local mode's latencies on a loaded machine cannot change it; a test below
holds its other workloads to the story without that job.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from muster.sim.engine import POLICIES, RunResult, simulate
from muster.sim.report import write_outputs
from muster.sim.scenario import Scenario, builtin_names, load_builtin, parse_scenario

from tests.sim.conftest import REPO, TRACES

DIGESTS = Path(__file__).with_name("event_log_digests.json")
LIFECYCLE_DIGESTS = Path(__file__).with_name("lifecycle_digests.json")
PHILLY_DAY = TRACES / "philly-2017-10-02-day.csv"
# (name, example file whose cluster and settings the day runs on)
PHILLY_CASES = (
    ("philly-day", "philly-week.yaml"),
    ("philly-day-contended", "philly-week-contended.yaml"),
)


def events_digest(result: RunResult, tmp_path: Path) -> str:
    """sha256 of the events.jsonl that `muster simulate --out` writes for this run."""
    (events, *_) = write_outputs([result], tmp_path, picture=False)
    return hashlib.sha256(events.read_bytes()).hexdigest()


def lifecycle_digest(result: RunResult, tmp_path: Path) -> str:
    """sha256 of that events.jsonl without its node-fault lines."""
    (events, *_) = write_outputs([result], tmp_path, picture=False)
    kept = [
        line
        for line in events.read_bytes().splitlines(keepends=True)
        if "workload" in json.loads(line)
    ]
    return hashlib.sha256(b"".join(kept)).hexdigest()


def philly_day(example: str) -> Scenario:
    path = REPO / "examples" / example
    doc = yaml.safe_load(path.read_text())
    doc["trace"]["path"] = str(PHILLY_DAY)
    return parse_scenario(doc, base_dir=path.parent, name=path.stem)


def stored() -> dict[str, str]:
    return json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def check(key: str, result: RunResult, tmp_path: Path) -> None:
    digest = events_digest(result, tmp_path)
    if os.environ.get("MUSTER_UPDATE_DIGESTS"):
        digests = stored()
        digests[key] = digest
        DIGESTS.write_text(json.dumps(dict(sorted(digests.items())), indent=2) + "\n")
        return
    expected = stored().get(key)
    assert expected is not None, f"no stored digest for {key}"
    assert digest == expected, f"{key}: the event log changed ({len(result.events)} events)"
    lifecycle = json.loads(LIFECYCLE_DIGESTS.read_text())[key]
    assert lifecycle_digest(result, tmp_path) == lifecycle, f"{key}: the lifecycle changed"


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", builtin_names())
def test_builtin_event_logs_are_unchanged(name: str, policy: str, tmp_path: Path):
    check(f"{name}/{policy}", simulate(load_builtin(name), policy), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("name", "example"), PHILLY_CASES)
def test_philly_day_event_logs_are_unchanged(name: str, example: str, policy: str, tmp_path: Path):
    if not PHILLY_DAY.exists():
        pytest.skip(f"no Philly day trace at {PHILLY_DAY}")
    check(f"{name}/{policy}", simulate(philly_day(example), policy), tmp_path)


def test_every_case_has_a_stored_digest():
    expected = {f"{n}/{p}" for n in builtin_names() for p in POLICIES}
    expected |= {f"{n}/{p}" for n, _ in PHILLY_CASES for p in POLICIES}
    assert set(stored()) == expected
    assert set(json.loads(LIFECYCLE_DIGESTS.read_text())) == expected


@pytest.mark.parametrize("policy", POLICIES)
def test_the_local_storys_job_that_fails_on_its_own_changes_nothing_for_the_others(
    policy: str,
) -> None:
    # GIVEN the local story, and the same story without `bad-image` (the job whose
    # image cannot be pulled, with workloadFaults on)
    story = load_builtin("local-story")
    without = replace(story, workloads=tuple(w for w in story.workloads if w.name != "bad-image"))
    # WHEN both run
    full = simulate(story, policy).events
    assert any(e.get("workload") == "bad-image" for e in full)
    # THEN every other workload's events are exactly those of the story without it
    others = [
        {k: v for k, v in e.items() if k != "class"}
        for e in full
        if e.get("workload") != "bad-image"
    ]
    assert others == [
        {k: v for k, v in e.items() if k != "class"} for e in simulate(without, policy).events
    ]
