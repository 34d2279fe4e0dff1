"""The synthesized stack deployed into in-process moto, and a driver that makes real state.

The driver feeds events through the same `ControlPlane` the functions build
(`build_control_plane` with the deployed function's environment), on a clock it
moves by hand, so deadlines and backoffs pass without waiting. The commands
under test find everything themselves from the stack's outputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from muster.admin.reactivate import QuietMetrics
from muster.aws.config import RuntimeConfig
from muster.core import (
    DeadlineReached,
    Phase,
    PodObserved,
    Reason,
    RequeueDue,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.lambdas.wiring import build_control_plane
from muster.runtime.ports import RecordingCluster
from muster.runtime.service import ControlPlane

from infra import constants as c
from infra.deploy_local import deploy_assembly
from tests.infra.conftest import STACK, Synthesized, synthesized  # noqa: F401 (fixture)

REGION = "us-east-1"
START = 1_790_000_000.0  # a fixed past instant: timers started from it fire at once in moto


@dataclass
class Clock:
    now: float = START

    def __call__(self) -> float:
        return self.now


@dataclass
class Deployed:
    """The deployed stack and a driver for its control plane."""

    session: boto3.Session
    outputs: dict[str, str]
    config: RuntimeConfig
    clock: Clock = field(default_factory=Clock)
    cluster: RecordingCluster = field(default_factory=RecordingCluster)

    def plane(self, *, inline_admission: bool = False) -> ControlPlane:
        plane = build_control_plane(
            self.config,
            cluster=lambda _config: self.cluster,
            session=self.session,
            inline_admission=inline_admission,
        )
        plane.clock = self.clock
        plane.draw = lambda: 0.0
        plane.metrics = QuietMetrics()
        return plane

    @property
    def store(self) -> Any:
        return self.plane().store

    # ------------------------------------------------------------------ driving

    def submit(self, key: str, gang: int = 2, queue: str = "default", gpus: int = 0) -> None:
        self.plane().handle(
            WorkloadObserved(key, queue, gang, gpus=gpus, seq=1, created_at=self.clock.now)
        )

    def admit(self) -> list[str]:
        return self.plane(inline_admission=True).admission_pass()

    def pod(self, key: str, name: str, seq: int, *, ready: bool, **kw: Any) -> None:
        kw.setdefault("phase", "Running" if ready else "Pending")
        kw.setdefault("uid", f"{name}-{self.phase_attempt(key)}")
        self.plane().handle(PodObserved(key, name, seq, ready=ready, **kw))

    def deadline_passes(self, key: str) -> None:
        """The workload's readiness timer fires (the clock moves past its deadline)."""
        snap = self.store.load(key)
        timer = snap.workload.timer
        assert timer is not None, f"{key} has no timer armed"
        self.clock.now = timer.deadline + 1
        self.plane().handle(DeadlineReached(key, timer.attempt, timer.kind, timer.episode))

    def fault_deadline_passes(self, key: str) -> None:
        """The workload's `workloadFaults.evictAfter` timer fires."""
        snap = self.store.load(key)
        timer = snap.workload.fault_timer
        assert timer is not None, f"{key} has no workloadFaults timer armed"
        self.clock.now = timer.deadline + 1
        self.plane().handle(
            DeadlineReached(key, timer.attempt, timer.kind, timer.episode, timer.incarnation)
        )

    def backoff_ends(self, key: str) -> None:
        w = self.store.load(key).workload
        self.clock.now = (w.requeue_at or self.clock.now) + 1
        self.plane().handle(RequeueDue(key, w.requeue_count))

    def phase(self, key: str) -> str:
        snap = self.store.load(key)
        assert snap is not None, key
        return str(snap.workload.phase.value)

    def phase_attempt(self, key: str) -> int:
        snap = self.store.load(key)
        return snap.workload.attempt if snap else 0

    def finish_all(self) -> None:
        """Every workload of earlier tests deleted, and the admission ledger settled."""
        plane = self.plane()
        for phase in Phase:
            if phase is not Phase.FINISHED:
                for w in plane.store.by_phase(phase.value):
                    plane.handle(WorkloadFinished(w.key, Reason.DELETED))
        self.admit()

    # ------------------------------------------------------------------ looking

    def requeue_messages(self) -> list[dict[str, Any]]:
        """Take every visible message off the admission queue (the admission function's)."""
        sqs = self.session.client("sqs")
        url = self.outputs[c.OUT_ADMISSION_QUEUE_URL]
        bodies: list[dict[str, Any]] = []
        while True:
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not got:
                return bodies
            for m in got:
                bodies.append(json.loads(m["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def settings_record(self) -> tuple[dict[str, Any], int] | None:
        record: tuple[dict[str, Any], int] | None = self.store.settings_record()
        return record

    def clear_settings_record(self) -> None:
        self.session.client("dynamodb").delete_item(
            TableName=self.config.table_name,
            Key={"pk": {"S": "SETTINGS"}, "sk": {"S": f"CLUSTER#{self.config.cluster_name}"}},
        )


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


@pytest.fixture(scope="module")
def deployed(synthesized: Synthesized) -> Iterator[Deployed]:  # noqa: F811 (fixture)
    """The stack `cdk deploy` would create, in moto, once per test module."""
    moto = pytest.importorskip("moto")
    import moto.stepfunctions.models as sfn_models
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    with pytest.MonkeyPatch.context() as mp:
        for key, value in AWS_ENV.items():
            mp.setenv(key, value)
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        mp.delenv("AWS_PROFILE", raising=False)
        # State machines that CloudFormation creates must land in the backend that executes them.
        mp.setattr(sfn_models, "stepfunctions_backends", stepfunctions_parser_backends)
        with moto.mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            session = boto3.Session(region_name=REGION)
            stack = deploy_assembly(synthesized.assembly_dir, STACK, session=session)
            function = stack.outputs[c.OUT_FUNCTION_NAMES[c.INGEST]]
            env = session.client("lambda").get_function_configuration(FunctionName=function)[
                "Environment"
            ]["Variables"]
            yield Deployed(session, dict(stack.outputs), RuntimeConfig.from_env(env))


@pytest.fixture
def aws(deployed: Deployed) -> Iterator[Deployed]:
    """Each test starts with no settings record, no unfinished workload and an empty admission queue."""
    deployed.clear_settings_record()
    deployed.finish_all()
    deployed.requeue_messages()
    yield deployed
    deployed.clear_settings_record()
