"""First contact: the timer state machine on moto really waits and signals."""

from __future__ import annotations

import json
import time

import pytest
from muster.aws.stepfunctions import StepFunctionsTimers
from muster.core import Timer, TimerKind

from .conftest import ControlPlaneOnMoto

pytestmark = pytest.mark.slow


def test_timer_execution_waits_until_its_deadline_then_signals(aws: ControlPlaneOnMoto):
    timers = StepFunctionsTimers(
        aws.session.client("stepfunctions"), aws.resources["MUSTER_TIMER_STATE_MACHINE_ARN"]
    )
    started = time.time()
    deadline = started + 2.0
    timers.start("ns/a", Timer(TimerKind.STARTUP, 1, 1, deadline))
    timers.start("ns/a", Timer(TimerKind.STARTUP, 1, 1, deadline))  # a retried start is a no-op
    assert len(aws.executions()) == 1
    sqs = aws.session.client("sqs")
    got = []
    for _ in range(60):
        got = sqs.receive_message(QueueUrl=aws.resources["timer"]).get("Messages", [])
        if got:
            break
        time.sleep(0.1)
    assert got, "the timer never fired"
    # moto's Wait state counts whole seconds left by truncation, so it may signal up
    # to a second before the timestamp (the timer handler holds such a signal until
    # the deadline: tests/aws/test_handlers.py); it must still have waited that long.
    fired = time.time()
    assert fired >= deadline - 1.0, (fired - started, deadline - started)
    body = json.loads(got[0]["Body"])
    assert body["workload"] == "ns/a" and body["kind"] == "startup" and body["attempt"] == 1
