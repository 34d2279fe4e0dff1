"""The local event source mappings: real SQS batches, partial failures, redrive."""

from __future__ import annotations

import io
import json
import os
import textwrap
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from muster.local.moto_server import Endpoint, PortInUse, moto_server
from muster.local.runner import LambdaRunner, SourceMapping, discover, resolver_for

HANDLER = textwrap.dedent(
    """
    import json, os

    SEEN = []

    def handler(event, context):
        failures = []
        for record in event["Records"]:
            body = json.loads(record["body"])
            SEEN.append((body["n"], os.environ["GREETING"], record["eventSource"], context.function_name))
            if body.get("fail"):
                failures.append({"itemIdentifier": record["messageId"]})
        if any(json.loads(r["body"]).get("crash") for r in event["Records"]):
            raise RuntimeError("boom")
        return {"batchItemFailures": failures}
    """
)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    with moto_server() as ep:
        yield ep


def deploy(endpoint: Endpoint, tmp: Path, name: str, max_receive: int = 2) -> tuple[str, str]:
    """GIVEN a function consuming a queue with a DLQ, as a stack would deploy it."""
    (tmp / "ingest").mkdir(parents=True)
    (tmp / "ingest" / "handler.py").write_text(HANDLER)
    iam, lam, sqs = endpoint.client("iam"), endpoint.client("lambda"), endpoint.client("sqs")
    role = iam.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    queue = sqs.create_queue(
        QueueName=f"{name}-queue",
        Attributes={
            "VisibilityTimeout": "1",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive)}
            ),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("handler.py", HANDLER)
    lam.create_function(
        FunctionName=f"{name}-IngestFunction",
        Runtime="python3.12",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
        Environment={"Variables": {"GREETING": "hello"}},
    )
    lam.create_event_source_mapping(
        EventSourceArn=arn,
        FunctionName=f"{name}-IngestFunction",
        BatchSize=5,
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    return queue, dlq


def count(endpoint: Endpoint, url: str) -> int:
    attrs = endpoint.client("sqs").get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_batches_reach_the_handler_and_only_failures_stay(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    queue, dlq = deploy(endpoint, tmp_path, "partial")
    sqs = endpoint.client("sqs")
    mappings = [
        m
        for m in discover(endpoint.client("lambda"), sqs, resolver_for(tmp_path))
        if m.function_name.startswith("partial")
    ]
    assert [(m.batch_size, m.reports_failures, m.environment) for m in mappings] == [
        (5, True, {"GREETING": "hello"})
    ]
    runner = LambdaRunner(sqs, mappings, retry_visibility=0)
    # WHEN three messages arrive, one of which fails every time
    for n in range(3):
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"n": n, "fail": n == 1}))
    runner.drain()
    # THEN the good ones are deleted and the bad one ends in the DLQ after maxReceiveCount
    handler_module = mappings[0].handler.__globals__
    seen = handler_module["SEEN"]
    assert {n for n, *_ in seen} == {0, 1, 2}
    assert all(
        g == "hello" and src == "aws:sqs" and fn.startswith("partial") for _, g, src, fn in seen
    )
    assert [n for n, *_ in seen].count(1) == 2  # received twice, then redriven
    assert count(endpoint, queue) == 0 and count(endpoint, dlq) == 1
    assert (runner.stats.succeeded, runner.stats.failed) == (2, 2)


def test_a_handler_that_raises_returns_the_whole_batch(endpoint: Endpoint, tmp_path: Path) -> None:
    queue, dlq = deploy(endpoint, tmp_path, "crash", max_receive=1)
    sqs = endpoint.client("sqs")
    mappings = [
        m
        for m in discover(endpoint.client("lambda"), sqs, resolver_for(tmp_path))
        if m.function_name.startswith("crash")
    ]
    runner = LambdaRunner(sqs, mappings, retry_visibility=0)
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"n": 7, "crash": True}))
    runner.drain()
    assert count(endpoint, dlq) == 1 and runner.stats.errors and "boom" in runner.stats.errors[0]


def test_a_port_in_use_gets_a_clear_message(endpoint: Endpoint) -> None:
    port = int(endpoint.url.rsplit(":", 1)[1])
    with (
        pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is already in use"),
        moto_server(port=port),
    ):
        pass


class _EmptyQueues:
    """An SQS client whose queues stay empty; it counts the receives."""

    def __init__(self) -> None:
        self.receives = 0

    def receive_message(self, **kwargs: object) -> dict[str, list[object]]:
        self.receives += 1
        return {"Messages": []}


def _idle_polls(idle_interval: float, seconds: float = 0.6) -> int:
    sqs = _EmptyQueues()
    mapping = SourceMapping("f", "url", "arn", 1, False, lambda e, c: None, {})
    runner = LambdaRunner(sqs, [mapping])
    runner.idle_interval = idle_interval
    runner.start(interval=0.005)
    time.sleep(seconds)
    runner.stop()
    return sqs.receives


def test_an_idle_runner_polls_less_once_allowed_to_sleep() -> None:
    # GIVEN empty queues, WHEN the runner may back off to 0.2 s between empty polls
    slow = _idle_polls(0.2)
    # THEN it polls a handful of times in 0.6 s, not once every 5 ms
    assert slow <= 10
    # AND without an idle interval it keeps its fast pace (the scenario's behaviour)
    assert _idle_polls(0.0) > 3 * slow


def test_warming_calls_each_function_once_in_its_environment_before_any_message() -> None:
    # GIVEN two queues served by one function, and one by another that refuses an
    # empty batch as the handlers' batch processing does
    calls: list[tuple[str, int, str | None]] = []

    def builds(event: dict[str, Any], context: Any) -> None:
        calls.append((context.function_name, len(event["Records"]), os.environ.get("GREETING")))

    def refuses(event: dict[str, Any], context: Any) -> None:
        builds(event, context)
        raise ValueError("an empty batch")

    mappings = [
        SourceMapping("ingest", "u1", "a1", 10, True, builds, {"GREETING": "hello"}),
        SourceMapping("ingest", "u2", "a2", 10, True, builds, {"GREETING": "hello"}),
        SourceMapping("timer", "u3", "a3", 10, True, refuses, {}),
    ]
    sqs = _EmptyQueues()
    runner = LambdaRunner(sqs, mappings)
    # WHEN the runner warms them
    runner.warm()
    # THEN each function was called once, with an empty batch, in its own environment
    assert calls == [("ingest", 0, "hello"), ("timer", 0, None)]
    assert "GREETING" not in os.environ
    # AND nothing was received, and a refusal is no error of the run
    assert sqs.receives == 0
    assert runner.stats.errors == [] and runner.stats.batches == 0
