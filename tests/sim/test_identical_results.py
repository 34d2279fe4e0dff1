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
The local story's moved once, when the story gained a job whose image cannot be
pulled (with workloadFaults on); a test below pins its other workloads' lifecycle
to the digests it had before.
"""

from __future__ import annotations

import hashlib
import json
import os
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


# The story's lifecycle (its log without node-fault lines) before it gained `bad-image`
# (a job whose image cannot be pulled, with workloadFaults on): the other workloads'
# events must be exactly these.
STORY_BEFORE_FAILURE_MODES = {
    "gang": "c1ba7efbce1749c4b447ab8e053a5a342b3d718c9dd3021ae5e7eae9e132bbbb",
    "gang+block": "c1ba7efbce1749c4b447ab8e053a5a342b3d718c9dd3021ae5e7eae9e132bbbb",
    "gang+fit": "060b24a382bc9852aee0b9d88e9e7ae05aac12a52dc179e2b19950eda2482e5c",
    "none": "0b91d0dff84a7d235f8bff518760a791fe7b030d4743b0b303373cc057087024",
}


@pytest.mark.parametrize("policy", POLICIES)
def test_the_local_story_is_unchanged_but_for_its_new_job(policy: str, tmp_path: Path) -> None:
    result = simulate(load_builtin("local-story"), policy)
    assert any(e.get("workload") == "bad-image" for e in result.events)
    result.events[:] = [
        {k: v for k, v in e.items() if k != "class"}
        for e in result.events
        if e.get("workload") != "bad-image"
    ]
    assert lifecycle_digest(result, tmp_path) == STORY_BEFORE_FAILURE_MODES[policy]
