"""The three handlers on in-memory adapters, fed SQS batch events."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from muster.core import Outcome
from muster.harness.lambda_events import LambdaContext, sqs_event
from muster.lambdas.records import sqs_processor, timer_batch, timer_record
from muster.runtime.memory import MemoryStore
from muster.runtime.messages import retry_delay, rfc3339

from functions.admission.handler import handler as admission_handler
from functions.ingest.handler import handler as ingest_handler
from functions.timer.handler import handler as timer_handler

from ..lambda_events import sample
from .conftest import Rig

KEY = "team-a/bert-large"
CTX = LambdaContext()


def _ingest(rig: Rig, *bodies: object) -> dict:
    plane = rig.plane()
    return ingest_handler(sqs_event(*bodies), CTX, plane=plane, cluster_name="training")  # type: ignore[arg-type]


def test_ingest_applies_agent_events(rig: Rig):
    # GIVEN the sample workload and pod events as EventBridge delivers them to SQS
    response = _ingest(rig, sample("workload_observed.json"), sample("pod_observed.json"))
    # THEN both are applied and the batch reports no failures
    assert response == {"batchItemFailures": []}
    snap = rig.store.load(KEY)
    assert snap is not None
    assert snap.workload.gpus == 16 and snap.workload.priority == 10
    assert snap.workload.pods["bert-large-worker-0"].node == "hyperpod-i-0abc123"


def test_malformed_event_is_rejected_counted_and_not_retried(rig: Rig):
    bad = sample("pod_observed_malformed.json")
    response = _ingest(rig, sample("workload_observed.json"), bad, "{not json")
    assert response == {"batchItemFailures": []}  # a retry cannot mend them
    assert rig.metrics.total("InvalidEvents") == 2
    assert rig.store.load(KEY) is not None  # the good event in the batch was applied


def test_malformed_event_log_names_the_field(rig: Rig, caplog):
    _ingest(rig, sample("pod_observed_malformed.json"))
    line = next(r for r in caplog.records if "rejected" in r.getMessage())
    assert "ready: expected true or false, got 'yes'" in line.getMessage()
    assert line.levelname == "WARNING"


def test_unknown_detail_type_and_foreign_cluster_are_rejected(rig: Rig):
    other = sample("workload_observed.json")
    other["detail"]["cluster"] = "someone-else"
    odd = sample("workload_observed.json")
    odd["detail-type"] = "Workload Exploded"
    assert _ingest(rig, other, odd) == {"batchItemFailures": []}
    assert rig.metrics.total("InvalidEvents") == 2
    assert rig.store.load(KEY) is None


def test_pod_before_its_workload_is_reported_for_redelivery(rig: Rig):
    response = _ingest(rig, sample("pod_observed.json"), sample("workload_observed.json"))
    assert response == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    # The redelivery then finds the workload.
    assert _ingest(rig, sample("pod_observed.json")) == {"batchItemFailures": []}


def test_transient_failure_fails_only_that_record(rig: Rig):
    _ingest(rig, sample("workload_observed.json"))
    rig.store.conflict_next = 100  # the workload keeps changing under us
    second = sample("workload_observed.json")
    second["detail"]["seq"] = 2
    second["detail"]["priority"] = 20
    response = _ingest(rig, second, sample("workload_observed.json"))
    # THEN only the record that could not be written goes back to the queue
    assert response == {"batchItemFailures": [{"itemIdentifier": "m0"}]}


def test_a_batch_that_fails_entirely_fails_the_invocation(rig: Rig):
    _ingest(rig, sample("workload_observed.json"))
    rig.store.conflict_next = 100
    second = sample("workload_observed.json")
    second["detail"]["seq"] = 2
    with pytest.raises(BatchProcessingError):
        _ingest(rig, second)


def test_timer_handler_evicts_on_the_current_attempt_only(rig: Rig):
    _ingest(rig, sample("workload_observed.json"))
    rig.admit()
    rig.clock.now += 300
    body = {**sample("deadline_reached.json"), "deadline": rfc3339(rig.clock.now)}
    stale = {**body, "attempt": 7}
    bad = {**body, "kind": "lunch"}
    plane = rig.plane()
    response = timer_handler(sqs_event(stale, bad, body, queue="muster-timer"), CTX, plane=plane)
    assert response == {"batchItemFailures": []}
    assert rig.phase(KEY) == "Requeued"
    assert plane.stats.outcomes == {Outcome.STALE.value: 1, Outcome.APPLIED.value: 1}
    assert rig.metrics.total("InvalidEvents") == 1


def test_admission_handler_runs_one_pass_for_the_batch(rig: Rig):
    _ingest(rig, sample("workload_observed.json"))
    plane = rig.plane(inline_admission=True)
    event = sqs_event(
        sample("admission_request.json"), sample("admission_request.json"), queue="muster-requeue"
    )
    assert admission_handler(event, CTX, plane=plane) == {"batchItemFailures": []}
    assert rig.cluster.calls == [("admit", KEY, 1)]


def test_admission_handler_requeue_then_admits(rig: Rig):
    _ingest(rig, sample("workload_observed.json"))
    rig.admit()
    rig.clock.now += 300
    body = {**sample("deadline_reached.json"), "deadline": rfc3339(rig.clock.now)}
    timer_handler(sqs_event(body), CTX, plane=rig.plane())
    rig.clock.now += 60
    plane = rig.plane(inline_admission=True)
    event = sqs_event(sample("requeue.json"), sample("requeue.json"), queue="muster-requeue")
    assert admission_handler(event, CTX, plane=plane) == {"batchItemFailures": []}
    assert rig.cluster.calls[-1] == ("admit", KEY, 2)


def test_a_failed_effect_asks_for_another_pass_after_a_backoff(rig: Rig):
    _ingest(rig, sample("workload_observed.json"))
    plane = rig.plane(inline_admission=True)
    rig.cluster.fail_next = ConnectionError("API server unreachable")
    admission_handler(sqs_event(sample("admission_request.json")), CTX, plane=plane)
    # The admission is committed; its effects are tried again by a later pass, not at once.
    assert rig.messages.admission_requests[-1] == ("retry workloads set aside", None)
    assert rig.messages.retries[-1] == 1
    assert rig.cluster.calls == []
    retry = json.dumps({"type": "admission", "reason": "retry", "workload": None, "retry": 1})
    admission_handler(sqs_event(retry), CTX, plane=rig.plane(inline_admission=True))
    assert rig.cluster.calls == [("admit", KEY, 1)]


class BrokenLedgerStore(MemoryStore):
    def ledger(self):
        raise RuntimeError("table unavailable")


def test_a_failed_pass_is_retried_with_a_growing_backoff_never_at_once():
    # GIVEN a pass that fails as a whole (the ledger cannot be read)
    rig = Rig(store=BrokenLedgerStore())
    plane = rig.plane(inline_admission=True)
    # WHEN it runs on a first request, then on the retry it asked for
    admission_handler(sqs_event(sample("admission_request.json")), CTX, plane=plane)
    retry = json.dumps({"type": "admission", "reason": "retry", "workload": None, "retry": 1})
    admission_handler(sqs_event(retry), CTX, plane=plane)
    # THEN each failure asks for one more pass, each later than the one before
    assert rig.messages.retries == [1, 2]
    assert [retry_delay(n) for n in rig.messages.retries] == [5.0, 10.0]
    assert retry_delay(30) == 900.0


@pytest.mark.parametrize("body", ['{"type": "requeue", "workload": "a/b"}', "[]", '{"type": 3}'])
def test_malformed_requeue_messages_are_rejected(rig: Rig, body: str):
    plane = rig.plane(inline_admission=True)
    assert admission_handler(sqs_event(body), CTX, plane=plane) == {"batchItemFailures": []}
    assert rig.metrics.total("InvalidEvents") == 1


def test_a_timer_signal_well_before_its_deadline_is_rearmed_for_the_remainder(rig: Rig):
    # GIVEN an admitted workload whose deadline is 300 s away
    _ingest(rig, sample("workload_observed.json"))
    rig.admit()
    deadline = rig.clock.now + 300
    body = {
        **sample("deadline_reached.json"),
        "deadline": rfc3339(deadline),
        "incarnation": "uid-1",
    }
    # WHEN its signal arrives 100 s after admission (200 s early)
    rig.clock.now += 100
    timer_handler(sqs_event(body, queue="muster-timer"), CTX, plane=rig.plane())
    # THEN nothing is evicted, and the signal comes again for the remaining 200 s
    assert rig.phase(KEY) == "Admitted"
    assert [c for c in rig.cluster.calls if c[0] == "evict"] == []
    [(workload, timer, delay)] = rig.messages.deadlines
    assert (workload, timer.attempt, timer.kind.value, delay) == (KEY, 1, "startup", 200.0)
    assert timer.deadline == deadline
    # AND it is still the signal of that object: a re-created one's first timer differs
    assert timer.incarnation == "uid-1"


def test_a_timer_signal_a_little_early_is_held_until_its_deadline(rig: Rig):
    # GIVEN an admitted workload whose deadline is 300 s away
    _ingest(rig, sample("workload_observed.json"))
    rig.admit()
    deadline = rig.clock.now + 300
    body = {**sample("deadline_reached.json"), "deadline": rfc3339(deadline)}
    # WHEN its signal arrives 0.8 s early (a Wait state counts whole seconds)
    rig.clock.now = deadline - 0.8
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        rig.clock.now += seconds

    [record] = sqs_event(body, queue="muster-timer")["Records"]
    timer_record(rig.plane(), SQSRecord(record), sleep=sleep)
    # THEN the handler waits out the remainder, then evicts: not a moment before the deadline
    assert slept == [pytest.approx(0.8)]
    assert rig.phase(KEY) == "Requeued"
    assert rig.messages.deadlines == []
    evicted = [c for c in rig.cluster.calls if c[0] == "evict"]
    assert evicted == [("evict", KEY, 1)]


def test_deeply_nested_json_is_rejected_by_ingest_and_not_retried(rig: Rig):
    deep = "[" * 100_000 + "]" * 100_000
    assert _ingest(rig, deep) == {"batchItemFailures": []}
    assert rig.metrics.total("InvalidEvents") == 1


class _Context:
    def __init__(self, seconds_left: float) -> None:
        self.left = seconds_left

    def get_remaining_time_in_millis(self) -> int:
        return int(self.left * 1000)


def _early_batch(rig: Rig, early: list[float]) -> tuple[list[str], dict]:
    """Workloads admitted at once, and one deadline signal for each, `early` seconds before
    its deadline, all in one batch."""
    keys = [f"team-a/job-{i}" for i in range(len(early))]
    rig.doc["gpuQuota"] = 1000
    for key in keys:
        rig.submit(key, 1)
    assert sorted(rig.admit()) == sorted(keys)
    rig.clock.now += 57
    bodies = [
        {**sample("deadline_reached.json"), "workload": key, "deadline": rfc3339(rig.clock.now + e)}
        for key, e in zip(keys, early, strict=True)
    ]
    return keys, sqs_event(*bodies, queue="muster-timer")


def test_a_batch_of_early_signals_is_held_once_never_past_a_deadline(rig: Rig):
    # GIVEN ten signals a little early (up to 1.9 s) and one 3 s early, in one batch
    early = [1.9 - 0.2 * i for i in range(10)] + [3.0]
    early = [max(e, 0.05) for e in early]
    keys, event = _early_batch(rig, early)
    start = rig.clock.now
    deadlines = {k: start + e for k, e in zip(keys, early, strict=True)}
    slept: list[float] = []
    evicted_at: dict[str, float] = {}

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        rig.clock.now += seconds

    plane = rig.plane()
    evict = rig.cluster.evict

    def watch(effect):  # type: ignore[no-untyped-def]
        evicted_at[effect.workload] = rig.clock.now
        evict(effect)

    rig.cluster.evict = watch  # type: ignore[method-assign]
    # WHEN the timer function takes the batch
    response = timer_batch(plane, event, _Context(30), sqs_processor(), sleep=sleep)
    # THEN it slept once, for the latest of the little-early ones (not 11 times, not 50 s)
    assert response == {"batchItemFailures": []}
    assert slept == [pytest.approx(1.9)]
    # AND every gang it evicted was evicted at or after its deadline
    assert set(evicted_at) == set(keys[:10])
    assert all(evicted_at[k] >= deadlines[k] - 1e-9 for k in evicted_at)
    # AND the one far too early is re-armed for its remainder
    [(workload, _timer, delay)] = rig.messages.deadlines
    assert workload == keys[10] and delay == pytest.approx(deadlines[keys[10]] - rig.clock.now)


def test_a_batch_without_time_to_hold_re_arms_its_early_signals(rig: Rig):
    # GIVEN two signals 1 s early, and a function with 10.5 s left (it keeps 10 for the records)
    keys, event = _early_batch(rig, [1.0, 1.0])
    slept: list[float] = []
    # WHEN the timer function takes the batch
    timer_batch(rig.plane(), event, _Context(10.5), sqs_processor(), sleep=slept.append)
    # THEN it does not sleep, evicts nobody, and re-arms both for the remainder
    assert slept == []
    assert [c for c in rig.cluster.calls if c[0] == "evict"] == []
    assert sorted((w, d) for w, _t, d in rig.messages.deadlines) == [
        (keys[0], pytest.approx(1.0)),
        (keys[1], pytest.approx(1.0)),
    ]
