"""Every alarm the stack creates has a runbook in docs/operating.md, and the runbooks
say what the code does: the log groups they read exist, the thresholds they quote
are the defaults, and what the sweeper sends again is not called lost."""

from __future__ import annotations

import re
from pathlib import Path

from infra.config import _THRESHOLD_KEYS, AlarmThresholds
from tests.infra.conftest import STACK, Synthesized, resources

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "operating.md"


def runbook(name: str) -> str:
    """The text of one runbook (its heading to the next heading), on one line."""
    text = RUNBOOKS.read_text()
    found = re.search(rf"^### {name}\n(.*?)(?=^#)", text, flags=re.MULTILINE | re.DOTALL)
    assert found is not None, f"no runbook {name}"
    return " ".join(found.group(1).split())


def test_every_alarm_has_a_runbook(synthesized: Synthesized) -> None:
    alarms = resources(synthesized.template, "AWS::CloudWatch::Alarm")
    names = {a["Properties"]["AlarmName"].split("-", 1)[1] for a in alarms.values()}
    headings = set(re.findall(r"^### (\S+)$", RUNBOOKS.read_text(), flags=re.MULTILINE))
    assert names, "the stack has no alarms"
    assert sorted(names - headings) == [], "alarms without a runbook in docs/operating.md"


def test_the_log_groups_the_runbooks_read_are_the_stacks(synthesized: Synthesized) -> None:
    # GIVEN the log groups the stack creates: the timers' by name, the functions' with
    # names CloudFormation chooses (each function's LoggingConfig names its own)
    groups = resources(synthesized.template, "AWS::Logs::LogGroup")
    named = {
        g["Properties"]["LogGroupName"]
        for g in groups.values()
        if "LogGroupName" in g["Properties"]
    }
    functions = resources(synthesized.template, "AWS::Lambda::Function").values()
    assert all(f["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] in groups for f in functions)
    # WHEN the runbooks tail a log group
    tailed = re.findall(r'aws logs tail "([^"]+)"', RUNBOOKS.read_text())
    assert tailed
    # THEN it is one of those named, or a function's, found from its configuration
    for group in tailed:
        if group.startswith("$(logs "):
            continue
        assert group.replace("$STACK", STACK) in named, group
    assert "get-function-configuration" in RUNBOOKS.read_text()


def test_the_thresholds_the_runbooks_quote_are_the_defaults() -> None:
    defaults = AlarmThresholds()
    quoted = re.findall(r"`(\w+)` \((\d+)", RUNBOOKS.read_text())
    checked = [(key, value) for key, value in quoted if key in _THRESHOLD_KEYS]
    assert checked, "the runbooks quote no threshold"
    for key, value in checked:
        assert getattr(defaults, _THRESHOLD_KEYS[key]) == int(value), key


def test_what_the_sweeper_sends_again_the_runbooks_do_not_call_lost() -> None:
    # The sweeper (muster.runtime.sweeper) sends again a deadline's signal and a
    # backoff's end a minute after they are due, and asks for a pass when someone
    # could be admitted: a runbook for a lost one says so, and none says it is lost.
    from muster.runtime.sweeper import GRACE_SECONDS

    assert GRACE_SECONDS == 60  # "a minute" below
    for name in ("TimerDeadLetters", "TimerExecutionsFailed", "AdmissionDeadLetters"):
        text = runbook(name)
        assert "sweeper sends" in text and "a minute past" in text, name
        assert "not armed again" not in text and "until its owner deletes it" not in text


def test_the_sweepers_runbook_says_what_its_role_may_do(synthesized: Synthesized) -> None:
    sweeper = [
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in resources(synthesized.template, "AWS::Lambda::Function").values()
        if "sweeper" in f["Properties"]["Description"]
    ]
    statements = [
        s
        for p in resources(synthesized.template, "AWS::IAM::Policy").values()
        if {r["Ref"] for r in p["Properties"]["Roles"]} & set(sweeper)
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    writes = {
        a
        for s in statements
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    text = runbook("SweeperErrors")
    assert "dynamodb:UpdateItem" in writes and "writes to the table" in text
    assert "only reads" not in text
