"""botocore's retry mode is set on every client: its retries where wanted, none under ours."""

from __future__ import annotations

import pytest
from muster.agent.sender import EventBridgeSender
from muster.aws.config import RuntimeConfig
from muster.lambdas.wiring import PerContainer, build_control_plane, build_sweeper
from muster.runtime.ports import RecordingCluster

CONFIG = RuntimeConfig(
    table_name="t",
    timer_state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:m",
    timer_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/timer",
    admission_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/requeue",
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
    "MUSTER_ADMISSION_QUEUE_URL": CONFIG.admission_queue_url,
    "MUSTER_TIMER_STATE_MACHINE_ARN": CONFIG.timer_state_machine_arn,
    "MUSTER_CLUSTER_NAME": "training",
}


def test_a_handlers_dependencies_are_built_once_per_container_at_the_first_invocation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "muster-ingest")
    # WHEN a handler module is imported, even in a Lambda container
    deployed = PerContainer(lambda config: built.append(config.table_name) or "plane")
    # THEN nothing is built (nothing reaches AWS or the cluster at import)
    assert built == []
    # AND the first invocation builds it from the function's environment, once
    assert deployed.get()[0] == "plane" and deployed.get()[1].cluster_name == "training"
    assert built == ["t"]
