"""Pods added to a pod group beyond its gang (a tenant adding members after the group
was charged) stay gated: histories with them converge, and a release that ignored
the gang size would be noticed by the quota invariant."""

from __future__ import annotations

from collections import Counter

import pytest
from muster.harness import run_history
from muster.harness.histories import generate, generate_triggers


def spare_history(seed: int):  # type: ignore[no-untyped-def]
    return generate_triggers(seed)  # pods beyond the gang are drawn by default


def test_histories_with_pods_beyond_the_gang_converge() -> None:
    outcomes = [run_history(seed, history=spare_history(seed)) for seed in range(40)]
    assert {o.seed: o.divergences for o in outcomes if o.diverged} == {}
    drawn: Counter[str] = Counter()
    for o in outcomes:
        drawn.update(o.triggers)
    assert drawn["podsBeyondTheGang"] > 100 and drawn["podGroupRerun"] > 0


def test_the_plain_histories_hold_no_pods_beyond_the_gang() -> None:
    assert not [a for seed in range(30) for a in generate(seed).actions if a.what == "spares"]


def test_the_harness_notices_a_release_beyond_the_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a release that lifts every gate of the group (the gang size ignored)
    monkeypatch.setattr(
        "muster.harness.group_truth.pods_to_release",
        lambda size, members, each=None: tuple(m.name for m in members if m.gated and not m.ended),
    )
    # THEN groups run more pods than their gang, past the cluster's quota
    said = [
        d for seed in range(10) for d in run_history(seed, history=spare_history(seed)).divergences
    ]
    assert any("pods released at once for a gang of" in d for d in said)
    assert any("quota exceeded on the cluster" in d for d in said)
