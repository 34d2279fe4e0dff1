"""Histories in which an administrator changes the settings mid-flight (`dryRun` on and
off, `recoveryTimeout` to 0s and back): every gang ends with the deadline it is owed."""

from __future__ import annotations

from muster.harness.histories import generate, with_settings_toggles
from muster.harness.truth import run_history


def test_settings_toggled_mid_flight_leave_no_gang_without_its_deadline() -> None:
    toggles = 0
    for seed in (0, 28, 35, 42, 45, *range(1, 13)):
        history = with_settings_toggles(generate(seed), seed)
        toggles += sum(1 for a in history.actions if a.what == "settings")
        outcome = run_history(seed, history=history)
        assert outcome.divergences == [], (seed, outcome.divergences)
    assert toggles >= 2 * 17  # each history changes and restores at least once
