"""The synthesized template deploys into moto's CloudFormation, and its timer runs.

This is the template the local mode deploys: same resources, same names.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from infra import constants as c
from infra.deploy_local import deploy_assembly
from tests.infra.conftest import STACK, Synthesized

pytestmark = pytest.mark.slow

REGION = "eu-west-1"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Any:
    moto = pytest.importorskip("moto")
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    # State machines that CloudFormation creates must land in the backend that executes them.
    import moto.stepfunctions.models as sfn_models
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    monkeypatch.setattr(sfn_models, "stepfunctions_backends", stepfunctions_parser_backends)
    with moto.mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.Session(region_name=REGION)


def test_the_stack_deploys_and_its_timer_signals_the_timer_queue(
    synthesized: Synthesized, aws: boto3.Session
) -> None:
    # GIVEN the synthesized assembly deployed into moto
    deployed = deploy_assembly(synthesized.assembly_dir, STACK, session=aws)
    outputs = deployed.outputs
    sqs = aws.client("sqs")
    for key in c.OUT_QUEUE_URLS.values():
        assert sqs.get_queue_attributes(QueueUrl=outputs[key], AttributeNames=["RedrivePolicy"])
    table = aws.client("dynamodb").describe_table(TableName=outputs[c.OUT_TABLE_NAME])["Table"]
    assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]
    assert table["GlobalSecondaryIndexes"][0]["IndexName"] == "gsi1"
    functions = {
        name: aws.client("lambda").get_function_configuration(FunctionName=outputs[key])
        for name, key in c.OUT_FUNCTION_NAMES.items()
    }
    for config in functions.values():
        env = config["Environment"]["Variables"]
        assert env[c.ENV_TABLE_NAME] == outputs[c.OUT_TABLE_NAME]
        assert env[c.ENV_ADMISSION_QUEUE_URL] == outputs[c.OUT_ADMISSION_QUEUE_URL]
        assert env[c.ENV_TIMER_STATE_MACHINE_ARN] == outputs[c.OUT_TIMER_STATE_MACHINE_ARN]
        assert env[c.ENV_EVENT_BUS_NAME] == outputs[c.OUT_EVENT_BUS_NAME]

    # WHEN an agent event arrives on the bus, the rule routes it to the ingest queue
    events = aws.client("events")
    events.put_events(
        Entries=[
            {
                "EventBusName": outputs[c.OUT_EVENT_BUS_NAME],
                "Source": c.AGENT_SOURCE,
                "DetailType": "Pod Observed",
                "Detail": json.dumps({"workload": "team-a/llama", "pod": "llama-0"}),
            },
            {
                "EventBusName": outputs[c.OUT_EVENT_BUS_NAME],
                "Source": c.CONTROLPLANE_SOURCE,
                "DetailType": "Workload Evicted",
                "Detail": json.dumps({"workload": "team-a/llama"}),
            },
        ]
    )
    ingested = sqs.receive_message(
        QueueUrl=outputs[c.OUT_INGEST_QUEUE_URL], MaxNumberOfMessages=10, WaitTimeSeconds=1
    ).get("Messages", [])
    # THEN only the agent's event is ingested
    assert [json.loads(m["Body"])["source"] for m in ingested] == [c.AGENT_SOURCE]

    # WHEN a readiness timer is started with a deadline a few seconds away
    deadline = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    timer = {
        "workload": "team-a/llama",
        "attempt": 1,
        "kind": "startup",
        "episode": 0,
        "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    stepfunctions = aws.client("stepfunctions")
    started = time.monotonic()
    stepfunctions.start_execution(
        stateMachineArn=outputs[c.OUT_TIMER_STATE_MACHINE_ARN],
        name="team-a-llama-1-startup-0",
        input=json.dumps(timer),
    )
    # THEN nothing arrives before the deadline, and the input arrives on the timer queue after it
    received: list[dict[str, Any]] = []
    while not received and time.monotonic() - started < 15:
        received = sqs.receive_message(
            QueueUrl=outputs[c.OUT_TIMER_QUEUE_URL], WaitTimeSeconds=1
        ).get("Messages", [])
    assert received, "the timer never signalled the timer queue"
    # moto's Wait state cuts the remaining time to whole seconds, so it may fire up
    # to a second early (AWS never does; the runtime holds an early signal anyway).
    assert datetime.now(UTC) >= deadline - timedelta(milliseconds=1200)
    assert json.loads(received[0]["Body"]) == timer
    execution = (
        outputs[c.OUT_TIMER_STATE_MACHINE_ARN].replace(":stateMachine:", ":execution:")
        + ":team-a-llama-1-startup-0"
    )
    # The message is on the queue a moment before the execution records its end.
    status = "RUNNING"
    for _ in range(50):
        status = stepfunctions.describe_execution(executionArn=execution)["status"]
        if status != "RUNNING":
            break
        time.sleep(0.1)
    assert status == "SUCCEEDED"


def test_a_local_moto_server_runs_the_same_stack(
    synthesized: Synthesized, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a moto server in this process, as the local mode runs it
    import socket

    import moto.stepfunctions.models as sfn_models

    from infra.deploy_local import start_local_aws

    monkeypatch.setattr(sfn_models, "stepfunctions_backends", sfn_models.stepfunctions_backends)
    monkeypatch.setenv("MOTO_PORT", "0")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = start_local_aws(port)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        session = boto3.Session(region_name=REGION)
        # WHEN the assembly is deployed through the endpoint
        deployed = deploy_assembly(
            synthesized.assembly_dir, STACK, session=session, endpoint_url=endpoint
        )
        # THEN a timer started there signals the timer queue after its deadline
        timer = {
            "workload": "ns/job",
            "attempt": 2,
            "kind": "recovery",
            "episode": 1,
            "deadline": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        session.client("stepfunctions", endpoint_url=endpoint).start_execution(
            stateMachineArn=deployed.outputs[c.OUT_TIMER_STATE_MACHINE_ARN],
            name="ns-job-2-recovery-1",
            input=json.dumps(timer),
        )
        sqs = session.client("sqs", endpoint_url=endpoint)
        received: list[dict[str, Any]] = []
        started = time.monotonic()
        while not received and time.monotonic() - started < 15:
            received = sqs.receive_message(
                QueueUrl=deployed.outputs[c.OUT_TIMER_QUEUE_URL], WaitTimeSeconds=1
            ).get("Messages", [])
        assert received and json.loads(received[0]["Body"]) == timer
    finally:
        server.stop()


def _ignoring_stop_signals() -> None:
    """In the child before it starts: SIGINT and SIGTERM ignored, as a process started
    by a shell script's background job (or a test runner started as one) inherits."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_serve_prints_its_outputs_and_one_line_and_stops_on_a_signal(
    synthesized: Synthesized, stop: str
) -> None:
    # GIVEN `python -m infra.deploy_local --serve PORT` on the synthesized assembly,
    # started with both signals ignored and its output to a pipe that is not a terminal
    import os
    import signal
    import socket
    import subprocess
    import sys

    from tests.infra.conftest import REPO_ROOT

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    for key in ("AWS_ENDPOINT_URL", "PYTHONUNBUFFERED"):
        env.pop(key, None)
    server = subprocess.Popen(
        [
            sys.executable,
            *("-m", "infra.deploy_local", "--assembly", str(synthesized.assembly_dir)),
            *("--serve", str(port)),
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignoring_stop_signals,
    )
    stopped_in: float | None = None
    try:
        # WHEN it has deployed the stack and printed its outputs, and the signal is sent
        assert server.stdout is not None and server.stderr is not None
        printed = ""
        for line in server.stdout:
            printed += line
            if line == "}\n":
                break
        said = server.stderr.readline()
        sent = time.monotonic()
        server.send_signal(getattr(signal, stop))
        _, rest = server.communicate(timeout=30)
        stopped_in = time.monotonic() - sent
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=30)
    # THEN stdout is the outputs, and stderr one line saying where it serves
    assert json.loads(printed)["outputs"][c.OUT_TIMER_STATE_MACHINE_ARN]
    assert said.startswith(f"serving on http://127.0.0.1:{port}; Ctrl-C stops")
    assert rest.strip() == "", rest[:2000]
    # AND it stopped within seconds of the signal, cleanly
    assert stopped_in is not None and stopped_in < 5, stopped_in
    assert server.returncode == 0


def test_a_server_that_does_not_stop_is_left_behind_within_the_bound() -> None:
    # GIVEN a moto server whose shutdown never ends
    import threading

    from infra.deploy_local import stop_server

    release = threading.Event()

    class Stuck:
        def stop(self) -> None:
            release.wait()

    # WHEN it is stopped with a bound
    started = time.monotonic()
    stopped = stop_server(Stuck(), timeout=0.2)
    # THEN the call returns after the bound, saying it did not stop
    assert not stopped
    assert time.monotonic() - started < 5
    release.set()

    class Quick:
        def stop(self) -> None:
            pass

    assert stop_server(Quick(), timeout=5)
