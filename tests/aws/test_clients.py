"""botocore's retry mode is set on every client: its retries where wanted, none under ours."""

from __future__ import annotations

import pytest
from muster.aws.config import RuntimeConfig
from muster.aws.wiring import PerContainer, build_control_plane, build_sweeper
from muster.kube.sender import EventBridgeSender
from muster.ports import RecordingCluster

CONFIG = RuntimeConfig(
    table_name="t",
    timer_state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:m",
    timer_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/timer",
    requeue_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/requeue",
    event_bus_name="bus",
    cluster_name="training",
)

STANDARD_3 = {"mode": "standard", "total_max_attempts": 3}


@pytest.fixture(autouse=True)
def region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")  # a machine's own default must not leak in
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "10")


def test_the_functions_clients_use_botocores_standard_retries() -> None:
    plane = build_control_plane(CONFIG, cluster=lambda _c: RecordingCluster())
    sweeper = build_sweeper(CONFIG)
    clients = [
        plane.store.client,  # type: ignore[attr-defined]
        plane.timers.client,  # type: ignore[attr-defined]
        plane.messages.client,  # type: ignore[attr-defined]
        plane.bus.client,  # type: ignore[attr-defined]
        sweeper.store.client,  # type: ignore[attr-defined]
    ]
    assert [c.meta.config.retries for c in clients] == [STANDARD_3] * len(clients)


def test_the_agents_sender_client_makes_one_try_because_the_sender_retries() -> None:
    sender = EventBridgeSender.for_bus("bus")
    assert sender.client.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}


ENV = {
    "MUSTER_TABLE_NAME": "t",
    "MUSTER_EVENT_BUS_NAME": "bus",
    "MUSTER_REQUEUE_QUEUE_URL": CONFIG.requeue_queue_url,
    "MUSTER_TIMER_STATE_MACHINE_ARN": CONFIG.timer_state_machine_arn,
    "MUSTER_CLUSTER_NAME": "training",
}


def test_in_a_lambda_container_the_handlers_dependencies_are_built_at_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    # WHEN a handler module is imported outside Lambda (tests, the local mode)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    later = PerContainer(lambda config: built.append(config.table_name) or "plane")
    # THEN nothing is built until the first invocation asks, and then only once
    assert built == []
    assert later.get()[0] == "plane" and later.get()[0] == "plane"
    assert built == ["t"]
    # WHEN it is imported in a Lambda container (the runtime set the environment first)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "muster-ingest")
    now = PerContainer(lambda config: built.append(config.cluster_name) or "plane")
    # THEN it is built at import, in the init phase, with the function's environment
    assert built == ["t", "training"]
    assert now.get()[1].cluster_name == "training" and built == ["t", "training"]
