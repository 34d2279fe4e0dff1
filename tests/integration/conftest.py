"""The control plane's AWS resources on moto, built as the stack defines them.

Queues (each with a DLQ), the table with `gsi1` and TTL, the bus with the rule
that routes the agent's events into the ingest queue, and the timer state
machine with the stack's definition, made by `muster.local.resources`. Step
Functions really executes it, so timers really wait; deadlines in these tests
are about a second.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws
from muster.aws.config import RuntimeConfig
from muster.harness.lambda_events import LambdaContext, sqs_event_from_messages
from muster.lambdas.wiring import build_control_plane
from muster.local.resources import CLUSTER, create_resources
from muster.runtime.ports import RecordingCluster
from muster.runtime.service import ControlPlane
from muster.schema import AGENT_SOURCE

from functions.admission.handler import handler as admission_handler
from functions.ingest.handler import handler as ingest_handler
from functions.timer.handler import handler as timer_handler

REGION = "us-east-1"


@dataclass
class ControlPlaneOnMoto:
    """The deployed control plane in miniature: three handlers draining three queues."""

    session: boto3.Session
    resources: dict[str, str]
    cluster: RecordingCluster = field(default_factory=RecordingCluster)
    settings: dict[str, Any] = field(default_factory=dict)
    planes: dict[str, ControlPlane] = field(default_factory=dict)
    context: LambdaContext = field(default_factory=LambdaContext)
    held: dict[str, list[str]] = field(default_factory=dict)  # failed, awaiting redelivery

    @property
    def config(self) -> RuntimeConfig:
        env = {k: v for k, v in self.resources.items() if k.startswith("MUSTER_")}
        env["MUSTER_SETTINGS"] = json.dumps(self.settings)
        return RuntimeConfig.from_env(env)

    def plane(self, function: str) -> ControlPlane:
        if function not in self.planes:
            self.planes[function] = build_control_plane(
                self.config,
                cluster=lambda _config: self.cluster,
                session=self.session,
                inline_admission=function == "admission",
            )
        return self.planes[function]

    # ------------------------------------------------------------------ the agent

    def agent(self, detail_type: str, detail: dict[str, Any]) -> None:
        reply = self.session.client("events").put_events(
            Entries=[
                {
                    "Source": AGENT_SOURCE,
                    "DetailType": detail_type,
                    "Detail": json.dumps(detail),
                    "EventBusName": self.resources["MUSTER_EVENT_BUS_NAME"],
                }
            ]
        )
        assert reply["FailedEntryCount"] == 0

    # ------------------------------------------------------------------ the functions

    def drain(self, function: str, *, redeliver_failures: bool = True) -> int:
        """Feed every visible message of the function's queue to its handler, in batches."""
        queue = self._queue(function)
        url = self.resources[queue]
        handler: Callable[..., dict[str, Any]] = {
            "ingest": ingest_handler,
            "timer": timer_handler,
            "admission": admission_handler,
        }[function]
        sqs = self.session.client("sqs")
        handled = 0
        while True:
            messages = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                return handled
            event = sqs_event_from_messages(messages, queue)
            kwargs: dict[str, Any] = {"plane": self.plane(function)}
            if function == "ingest":
                kwargs["cluster_name"] = CLUSTER
            try:
                response = handler(event, self.context, **kwargs)
                failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            except BatchProcessingError:  # the invocation failed: SQS redelivers them all
                failed = {m["MessageId"] for m in messages}
            for m in messages:
                if m["MessageId"] in failed:
                    if redeliver_failures:
                        sqs.change_message_visibility(
                            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                        )
                    else:
                        self.held.setdefault(function, []).append(m["ReceiptHandle"])
                else:
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            handled += len(messages) - len(failed)
            if failed and not redeliver_failures:
                return handled

    def redeliver(self, function: str) -> None:
        """The visibility timeout of the held (failed) messages ran out."""
        url = self.resources[self._queue(function)]
        for handle in self.held.pop(function, []):
            self.session.client("sqs").change_message_visibility(
                QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0
            )

    @staticmethod
    def _queue(function: str) -> str:
        return {"ingest": "ingest", "timer": "timer", "admission": "MUSTER_ADMISSION_QUEUE_URL"}[
            function
        ]

    def settle(self, *, timers: bool = True, admission: bool = True) -> None:
        """Run the functions until no queue has a visible message.

        `timers=False` leaves fired timers waiting, for steps that must happen
        before a one-second deadline is handled; `admission=False` leaves the
        admission queue waiting, so a one-second backoff cannot readmit a workload
        before its requeued state is looked at.
        """
        while (
            self.drain("ingest")
            + (self.drain("admission") if admission else 0)
            + (self.drain("timer") if timers else 0)
        ):
            pass

    def until(self, key: str, phase: str, timeout: float = 10.0, *, admission: bool = True) -> None:
        """Run the functions until the workload reaches `phase` (timers fire meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.settle(admission=admission)
            if self.state(key)["phase"] == phase:
                return
            time.sleep(0.1)
        raise AssertionError(f"{key} is {self.state(key)['phase']}, not {phase}, after {timeout}s")

    # ------------------------------------------------------------------ looking

    def state(self, key: str) -> dict[str, Any]:
        from muster.runtime import describe

        info = describe(self.plane("ingest").store, key)
        assert info is not None, key
        return info

    def lifecycle(self) -> list[tuple[str, str]]:
        """(detail-type, workload) of the lifecycle events published so far."""
        sqs = self.session.client("sqs")
        out: list[tuple[str, str]] = []
        while True:
            messages = sqs.receive_message(
                QueueUrl=self.resources["observer"], MaxNumberOfMessages=10
            ).get("Messages", [])
            if not messages:
                return out
            for m in messages:
                body = json.loads(m["Body"])
                out.append((body["detail-type"], body["detail"]["workload"]))
                sqs.delete_message(
                    QueueUrl=self.resources["observer"], ReceiptHandle=m["ReceiptHandle"]
                )

    def executions(self, status: str | None = None) -> list[dict[str, Any]]:
        sfn = self.session.client("stepfunctions")
        kwargs: dict[str, Any] = {
            "stateMachineArn": self.resources["MUSTER_TIMER_STATE_MACHINE_ARN"]
        }
        if status:
            kwargs["statusFilter"] = status
        return sfn.list_executions(**kwargs)["executions"]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlaneOnMoto]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_SERVICE_NAME": "muster",
        "POWERTOOLS_METRICS_NAMESPACE": "Muster",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        session = boto3.Session(region_name=REGION)
        # A unique prefix per test: a timer execution still waiting from an earlier
        # test (moto runs them in threads) cannot signal into this test's queues.
        yield ControlPlaneOnMoto(
            session, create_resources(session, f"muster-{uuid.uuid4().hex[:8]}")
        )
