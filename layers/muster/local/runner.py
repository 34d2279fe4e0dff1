"""Lambda's SQS event source mappings, played in-process against a local endpoint.

The runner reads the deployed event source mappings (queue, function, batch size,
partial-batch reporting) and the functions' handler and environment from the
Lambda API, disables the mappings there (moto would otherwise try to run the code
in Docker), and then does what the Lambda service does: poll each queue, hand a
real SQS batch event to the handler, delete what succeeded, and leave failures
to be retried after the visibility timeout or moved to the DLQ by the queue's
redrive policy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class SourceMapping:
    """One event source mapping as the runner executes it."""

    function_name: str
    queue_url: str
    queue_arn: str
    batch_size: int
    reports_failures: bool
    handler: Handler
    environment: dict[str, str]
    timeout: int = 30


@dataclass
class RunnerStats:
    batches: int = 0
    succeeded: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


class LambdaContext:
    """The parts of Lambda's context object that handlers and Powertools read."""

    def __init__(self, function_name: str, timeout: int) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        )
        self.memory_limit_in_mb = 512
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(source_dir: Path, handler: str) -> Handler:
    """Import `module.function` from a function's source folder under a unique name."""
    module_name, _, function = handler.rpartition(".")
    path = source_dir / (module_name.replace(".", "/") + ".py")
    if not path.is_file():
        raise FileNotFoundError(f"handler module {path} does not exist")
    unique = "muster_local_" + hashlib.sha1(str(path).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(unique, path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entry: Handler = getattr(module, function)
    return entry


def discover(
    lambda_client: Any,
    sqs_client: Any,
    resolve: Callable[[str, str], Handler],
) -> list[SourceMapping]:
    """The deployed SQS mappings; `resolve(function_name, handler)` finds the code."""
    mappings: list[SourceMapping] = []
    paginator = lambda_client.get_paginator("list_event_source_mappings")
    for page in paginator.paginate():
        for esm in page["EventSourceMappings"]:
            arn = esm["EventSourceArn"]
            if not arn.startswith("arn:aws:sqs:"):
                continue
            config = lambda_client.get_function_configuration(FunctionName=esm["FunctionArn"])
            name = config["FunctionName"]
            queue_name = arn.rsplit(":", 1)[1]
            queue_url = sqs_client.get_queue_url(QueueName=queue_name)["QueueUrl"]
            mappings.append(
                SourceMapping(
                    function_name=name,
                    queue_url=queue_url,
                    queue_arn=arn,
                    batch_size=int(esm.get("BatchSize") or 10),
                    reports_failures="ReportBatchItemFailures"
                    in (esm.get("FunctionResponseTypes") or []),
                    handler=resolve(name, config["Handler"]),
                    environment=dict((config.get("Environment") or {}).get("Variables") or {}),
                    timeout=int(config.get("Timeout") or 30),
                )
            )
            lambda_client.update_event_source_mapping(UUID=esm["UUID"], Enabled=False)
    return mappings


def resolver_for(
    functions_dir: Path, names: Sequence[str] | None = None
) -> Callable[[str, str], Handler]:
    """Find a function's source folder by its name: `functions/ingest` serves `...Ingest...`."""
    folders = sorted(
        names or [p.name for p in functions_dir.iterdir() if (p / "handler.py").is_file()]
    )
    cache: dict[str, Handler] = {}

    def resolve(function_name: str, handler: str) -> Handler:
        lowered = function_name.lower()
        matches = [f for f in folders if f.lower() in lowered]
        if len(matches) != 1:
            raise LookupError(
                f"cannot tell which of {', '.join(folders)} serves function {function_name!r}"
            )
        folder = matches[0]
        if folder not in cache:
            cache[folder] = load_handler(functions_dir / folder, handler)
        return cache[folder]

    return resolve


class LambdaRunner:
    """Poll every mapped queue and call its handler, one batch at a time."""

    def __init__(
        self,
        sqs_client: Any,
        mappings: Sequence[SourceMapping],
        *,
        base_environment: Mapping[str, str] | None = None,
        retry_visibility: int | None = None,
    ) -> None:
        self._sqs = sqs_client
        self.mappings = list(mappings)
        self._base_env = dict(base_environment or {})
        self._retry_visibility = retry_visibility
        self.stats = RunnerStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The longest pause between polls of empty queues; raised while a finished
        # local run only serves the admin commands (`muster local --hold`).
        self.idle_interval = 0.0

    def poll_once(self) -> int:
        """One receive per mapping; returns the number of messages handled."""
        handled = 0
        for mapping in self.mappings:
            handled += self._poll(mapping)
        return handled

    def warm(self) -> None:
        """Call each function once with an empty batch, before any message waits on it:
        what it builds on its first call (its AWS clients, its settings) is then ready,
        as in a warm Lambda container, and the first event of a story is not late by it.

        Lambda never sends an empty batch, and the handlers' batch processing refuses
        one; they build what they need before that, so the refusal is not an error."""
        seen: set[int] = set()
        for m in self.mappings:
            if id(m.handler) in seen:
                continue
            seen.add(id(m.handler))
            with self._function_environment(m):
                try:
                    m.handler({"Records": []}, LambdaContext(m.function_name, m.timeout))
                except Exception as exc:
                    log.debug("function %s refused the empty batch: %r", m.function_name, exc)

    @contextmanager
    def _function_environment(self, m: SourceMapping) -> Iterator[None]:
        """The process's environment as the function's (its variables, its name), for a call."""
        saved = dict(os.environ)
        os.environ.update(self._base_env)
        os.environ.update(m.environment)
        os.environ["AWS_LAMBDA_FUNCTION_NAME"] = m.function_name
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def drain(self, idle_polls: int = 2, limit: float = 30.0) -> None:
        """Poll until every queue stayed empty `idle_polls` times in a row."""
        deadline = time.monotonic() + limit
        idle = 0
        while idle < idle_polls and time.monotonic() < deadline:
            idle = idle + 1 if self.poll_once() == 0 else 0

    def start(self, interval: float = 0.05) -> None:
        """Poll in a thread: every `interval` while there is work; slower up to
        `idle_interval` (doubling) while every queue stays empty."""

        def loop() -> None:
            wait = interval
            while not self._stop.is_set():
                try:
                    if self.poll_once() == 0:
                        self._stop.wait(wait)
                        wait = min(wait * 2, max(interval, self.idle_interval))
                    else:
                        wait = interval
                except Exception as exc:  # keep serving; the message stays queued
                    log.exception("local runner: poll failed")
                    self.stats.errors.append(repr(exc))
                    self._stop.wait(interval)

        self._thread = threading.Thread(target=loop, name="lambda-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _poll(self, m: SourceMapping) -> int:
        response = self._sqs.receive_message(
            QueueUrl=m.queue_url,
            MaxNumberOfMessages=min(m.batch_size, 10),
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages", [])
        if not messages:
            return 0
        event = {"Records": [self._record(m, msg) for msg in messages]}
        failed_ids = self._invoke(m, event)
        by_id = {msg["MessageId"]: msg for msg in messages}
        for message_id, msg in by_id.items():
            if message_id in failed_ids:
                self.stats.failed += 1
                if self._retry_visibility is not None:
                    self._sqs.change_message_visibility(
                        QueueUrl=m.queue_url,
                        ReceiptHandle=msg["ReceiptHandle"],
                        VisibilityTimeout=self._retry_visibility,
                    )
            else:
                self.stats.succeeded += 1
                self._sqs.delete_message(QueueUrl=m.queue_url, ReceiptHandle=msg["ReceiptHandle"])
        self.stats.batches += 1
        return len(messages)

    def _invoke(self, m: SourceMapping, event: dict[str, Any]) -> set[str]:
        """Call the handler with its environment; the ids of the records that failed."""
        all_ids = {r["messageId"] for r in event["Records"]}
        with self._function_environment(m):
            try:
                result = m.handler(event, LambdaContext(m.function_name, m.timeout))
            except Exception as exc:  # the whole batch returns to the queue, as in Lambda
                log.exception("function %s failed a batch of %d", m.function_name, len(all_ids))
                self.stats.errors.append(f"{m.function_name}: {exc!r}")
                return all_ids
        if not m.reports_failures or not isinstance(result, dict):
            return set()
        failures = result.get("batchItemFailures") or []
        return {f["itemIdentifier"] for f in failures if f.get("itemIdentifier") in all_ids}

    @staticmethod
    def _record(m: SourceMapping, msg: dict[str, Any]) -> dict[str, Any]:
        attributes = msg.get("Attributes", {})
        return {
            "messageId": msg["MessageId"],
            "receiptHandle": msg["ReceiptHandle"],
            "body": msg["Body"],
            "attributes": attributes,
            "messageAttributes": {
                name: {
                    "stringValue": value.get("StringValue"),
                    "binaryValue": value.get("BinaryValue"),
                    "stringListValues": [],
                    "binaryListValues": [],
                    "dataType": value.get("DataType"),
                }
                for name, value in msg.get("MessageAttributes", {}).items()
            },
            "md5OfBody": msg.get("MD5OfBody"),
            "eventSource": "aws:sqs",
            "eventSourceARN": m.queue_arn,
            "awsRegion": m.queue_arn.split(":")[3],
        }
