"""At-least-once delivery on moto: crashes between effects, races, bad events."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from muster.aws.dynamo import DynamoStore
from muster.core import PodObserved
from muster.lambdas.wiring import build_sweeper
from muster.runtime import status
from muster.runtime.messages import retry_delay
from muster.schema import POD_OBSERVED, WORKLOAD_OBSERVED, workload_detail

from .conftest import CLUSTER, ControlPlaneOnMoto
from .test_lifecycle import FAST, submit

pytestmark = pytest.mark.slow


def fail_once(client: Any, operation: str) -> list[int]:
    """Make the next `operation` call of `client` fail as a network error would."""
    calls: list[int] = []

    def hook(**kwargs: Any) -> None:
        if not calls:
            calls.append(1)
            raise ConnectionError(f"injected failure of {operation}")

    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register(f"before-call.{service}.{operation}", hook)
    return calls


def queue_depth(aws: ControlPlaneOnMoto, url: str) -> int:
    attrs = aws.session.client("sqs").get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_crash_between_eviction_and_requeue_is_repaired_by_redelivery(aws: ControlPlaneOnMoto):
    aws.settings = FAST
    submit(aws, "team-a/crash", 1)
    aws.settle(timers=False)
    # GIVEN the requeue send will fail once, after the eviction has been carried out
    injected = fail_once(aws.plane("timer").messages.client, "SendMessage")
    # WHEN the deadline fires (the failed record is redelivered by SQS)
    aws.until("team-a/crash", "Requeued", admission=False)
    # THEN the eviction happened (twice: idempotent), the requeue went out, and the
    # workload was readmitted after its backoff
    assert injected == [1]
    assert aws.cluster.calls.count(("evict", "team-a/crash", 1)) == 2
    state = aws.state("team-a/crash")
    assert state["phase"] == "Requeued"
    aws.until("team-a/crash", "Admitted")
    # (on a loaded machine the second attempt's short deadline may already have passed)
    admits = [c[2] for c in aws.cluster.calls if c[:2] == ("admit", "team-a/crash")]
    assert admits[0] == 1 and next(a for a in admits if a != 1) == 2


def test_crash_before_the_timer_started_is_repaired(aws: ControlPlaneOnMoto):
    aws.settings = FAST
    # GIVEN the timer start of the admission fails once (state written, timer not started)
    fail_once(aws.plane("admission").timers.client, "StartExecution")
    submit(aws, "team-a/notimer", 1)
    aws.settle()  # the failed pass asks for another, after a backoff (not at once)
    assert aws.executions() == []
    time.sleep(retry_delay(1) + 0.5)
    aws.settle()  # the retry finishes the admission
    assert [e["name"] for e in aws.executions()] == ["team-a.notimer.a1.startup.e1"]
    # AND the timer does its job
    aws.until("team-a/notimer", "Requeued", admission=False)


def test_malformed_events_are_rejected_counted_and_not_retried(aws: ControlPlaneOnMoto, capsys):
    good = workload_detail(
        cluster=CLUSTER, workload="team-a/ok", kind="Job", queue="q", gang_size=1, seq=1
    )
    aws.agent(WORKLOAD_OBSERVED, {**good, "gangSize": 0})  # gangSize must be at least 1
    aws.agent(POD_OBSERVED, {"schemaVersion": 2})
    aws.agent("Pod Exploded", good)
    aws.settle()
    # THEN each was rejected with a metric, none waits for a retry, none went to the DLQ
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    invalid = [m for m in emf if "InvalidEvents" in m]
    assert len(invalid) == 3
    assert invalid[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Muster"
    assert invalid[0]["service"] == "muster"
    # exactly the documented dimensions, so an alarm on InvalidEvents sees every one
    assert invalid[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    assert queue_depth(aws, aws.resources["ingest"]) == 0
    assert aws.plane("ingest").store.load("team-a/ok") is None


class RacingStore(DynamoStore):
    """A DynamoStore that lets another writer in just before its first pod write."""

    interleave: Any = None

    def write_pod(
        self, key: str, write: Any, epoch: int, ready_delta: int, now: float = 0.0, **kw: Any
    ) -> None:
        if self.interleave is not None:
            run, self.interleave = self.interleave, None
            run()
        super().write_pod(key, write, epoch, ready_delta, now, **kw)


def test_two_concurrent_last_pods_on_dynamodb(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    submit(aws, "team-a/race", 2)
    aws.settle()
    first, second = aws.plane("ingest"), aws.plane("timer")  # two function instances
    original = first.store
    assert isinstance(original, DynamoStore)
    racing = RacingStore(original.client, original.table, original.cluster)
    first.store = racing

    # GIVEN p1's event is applied by another instance after p0's event read the gang
    # (so it saw p1 not ready) and before p0's pod is written
    racing.interleave = lambda: second.handle(
        PodObserved("team-a/race", "p1", 1, uid="p1-uid", phase="Running", ready=True, node="n1")
    )
    # WHEN p0's event completes
    first.handle(
        PodObserved("team-a/race", "p0", 1, uid="p0-uid", phase="Running", ready=True, node="n1")
    )
    # THEN the later writer saw both pods ready: the gang is PodsReady, once
    assert aws.state("team-a/race")["phase"] == "Running"
    assert [h["event"] for h in aws.state("team-a/race")["history"]].count("PodsReady") == 1


class RacingAdmissionStore(DynamoStore):
    interleave: Any = None

    def admit(self, *args: Any, **kwargs: Any) -> int:
        if self.interleave is not None:
            run, self.interleave = self.interleave, None
            run()
        return super().admit(*args, **kwargs)


def test_racing_admission_passes_hold_the_lock_once(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s", "blockAdmission": True}
    submit(aws, "team-a/one", 1)
    submit(aws, "team-b/two", 1)
    aws.drain("ingest")
    first = aws.plane("admission")
    original = first.store
    assert isinstance(original, DynamoStore)
    racing = RacingAdmissionStore(original.client, original.table, original.cluster)
    first.store = racing
    other = aws.plane("timer")  # another instance that runs a pass concurrently
    racing.interleave = other.admission_pass
    first.admission_pass()
    admitted = [c for c in aws.cluster.calls if c[0] == "admit"]
    assert len(admitted) == 1
    assert first.stats.conflicts >= 1
    view = status(original)
    assert view["counts"]["Admitted"] == 1 and view["counts"]["Pending"] == 1


def test_a_lost_timer_and_a_lost_requeue_are_resent_by_the_sweeper(aws: ControlPlaneOnMoto):
    # GIVEN a workload admitted with a one-second deadline whose timer execution is lost
    aws.settings = {**FAST, "timeout": "1s"}
    submit(aws, "team-a/lost", 1)
    aws.plane("admission").timers.start = lambda *args: None  # type: ignore[method-assign]
    aws.settle(timers=False)
    assert aws.state("team-a/lost")["phase"] == "Admitted"
    assert aws.executions() == []
    sweeper = build_sweeper(aws.config, session=aws.session)
    sweeper.grace = 0.0
    time.sleep(1.5)
    assert aws.drain("timer") == 0  # no signal will come
    # WHEN the sweeper runs (the scheduled function, with real queues)
    report = sweeper.run(time.time())
    # THEN it sent the deadline signal to the timer queue, and the timer function evicts
    assert report.deadlines == ["team-a/lost"]
    assert aws.drain("timer") == 1
    assert aws.state("team-a/lost")["phase"] == "Requeued"
    # GIVEN its requeue message is lost too (e.g. it went to the DLQ)
    sqs = aws.session.client("sqs")
    sqs.purge_queue(QueueUrl=aws.resources["MUSTER_ADMISSION_QUEUE_URL"])
    requeue_at = aws.state("team-a/lost")["requeueAt"]
    time.sleep(max(0.0, requeue_at + 0.2 - time.time()))
    # WHEN the sweeper runs after the requeue time
    report = sweeper.run(time.time())
    # THEN the requeue goes out again and the admission function readmits it
    assert report.requeues == ["team-a/lost"]
    aws.drain("admission")
    assert aws.state("team-a/lost")["phase"] in ("Pending", "Admitted")
    aws.drain("admission")
    assert aws.cluster.calls[-1] == ("admit", "team-a/lost", 2)
