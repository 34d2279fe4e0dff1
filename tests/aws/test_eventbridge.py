"""Lifecycle events on the bus: a throttled entry is retried, never counted towards quarantine."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber
from muster.aws.eventbridge import ENTRY_ATTEMPTS, EventBridgeBus, PublishFailed
from muster.core import LogEvent
from muster.retry import is_transient


def _bus() -> tuple[EventBridgeBus, Stubber, list[float]]:
    client = boto3.client("events", region_name="us-east-1")
    slept: list[float] = []
    return EventBridgeBus(client, "bus", "c1", sleep=slept.append), Stubber(client), slept


def _failed(code: str) -> dict:
    return {"FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "no"}]}


def _publish(bus: EventBridgeBus) -> None:
    bus.publish(LogEvent.ADMITTED, "ns/a", {"attempt": 1}, "ns/a/1/0", 1_000.0)


def test_a_throttled_entry_is_sent_again_and_succeeds():
    bus, stub, slept = _bus()
    stub.add_response("put_events", _failed("ThrottlingException"))
    stub.add_response("put_events", {"FailedEntryCount": 0, "Entries": [{"EventId": "e1"}]})
    with stub:
        _publish(bus)
    stub.assert_no_pending_responses()
    assert slept == [0.1]


@pytest.mark.parametrize("code", ["ThrottlingException", "InternalFailure"])
def test_an_entry_that_stays_throttled_fails_as_transient(code: str):
    bus, stub, _ = _bus()
    for _ in range(ENTRY_ATTEMPTS):
        stub.add_response("put_events", _failed(code))
    with stub, pytest.raises(PublishFailed) as failed:
        _publish(bus)
    # transient: the control plane retries it with backoff and never quarantines for it
    assert is_transient(failed.value)


def test_an_entry_refused_for_good_is_not_retried_and_not_transient():
    bus, stub, slept = _bus()
    stub.add_response("put_events", _failed("AccessDeniedException"))
    with stub, pytest.raises(PublishFailed) as failed:
        _publish(bus)
    stub.assert_no_pending_responses()
    assert slept == []
    assert not is_transient(failed.value)
