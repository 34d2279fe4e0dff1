"""Every alarm the stack creates has a runbook in docs/operating.md."""

from __future__ import annotations

import re
from pathlib import Path

from tests.infra.conftest import Synthesized, resources

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


def test_every_alarm_has_a_runbook(synthesized: Synthesized) -> None:
    alarms = resources(synthesized.template, "AWS::CloudWatch::Alarm")
    names = {a["Properties"]["AlarmName"].split("-", 1)[1] for a in alarms.values()}
    headings = set(re.findall(r"^### (\S+)$", RUNBOOKS.read_text(), flags=re.MULTILINE))
    assert names, "the stack has no alarms"
    assert sorted(names - headings) == [], "alarms without a runbook in docs/operating.md"
