"""Scale targets, as scenarios at small but telling sizes (the figures: `make bench-scale`).

A target that today's code misses is marked xfail(strict=True) with what fails and
the figure measured, so the mark must go once the fix lands.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from muster.core import Kind
from muster.harness.limits import MAX_ITEM_BYTES
from muster.harness.scale import Budgets
from muster.harness.scale_scenarios import ScaleReport, gang, queue, reconcile

from tests.scale.conftest import BUDGETS, TIMEOUTS

LONG = "w" * 44  # pod names of about 60 characters

_cache: dict[tuple[str, int], ScaleReport] = {}


def run_gang(kind: Kind, pods: int) -> ScaleReport:
    """Each gang runs once per test session (several targets read its figures)."""
    key = (kind.value, pods)
    if key not in _cache:
        from moto import mock_aws

        with mock_aws():
            _cache[key] = gang(kind, pods, budgets=BUDGETS, pod_name=LONG)
    return _cache[key]


@pytest.fixture
def job(aws: None) -> Iterator[ScaleReport]:
    yield run_gang(Kind.JOB, 128)


@pytest.fixture
def group(aws: None) -> Iterator[ScaleReport]:
    yield run_gang(Kind.POD_GROUP, 128)


def test_no_item_exceeds_400_kb(job: ScaleReport) -> None:
    assert 0 < job.largest_item <= MAX_ITEM_BYTES


def test_the_gang_becomes_ready_as_its_pods_do(job: ScaleReport) -> None:
    assert job.admitted == 1 and job.phase == "Running"
    assert job.ready_lag is not None and job.ready_lag <= 120.0


def test_every_invocation_stays_inside_its_budget_for_a_job(job: ScaleReport) -> None:
    assert job.invocations > job.pod_events / 10
    assert job.timed_out == 0 and job.longest <= TIMEOUTS["ingest"]


def test_no_message_is_throttled_or_dead_lettered_for_a_job(job: ScaleReport) -> None:
    assert job.throttled == 0 and job.dead_lettered == 0 and job.records_failed == 0


def test_kubernetes_calls_per_pod_event_are_bounded_for_a_job(job: ScaleReport) -> None:
    assert job.kube_calls / job.pod_events <= 0.1


def test_the_workload_item_stays_small_whatever_the_gang_size(job: ScaleReport) -> None:
    assert job.workload_item < 16 * 1024


def test_the_workload_item_is_measured(job: ScaleReport) -> None:
    assert 0 < job.workload_item <= job.largest_item


def test_one_gang_does_not_heat_one_item_past_dynamodbs_limit(job: ScaleReport) -> None:
    assert 0 < job.hottest_item_wcu <= 1000


def test_write_requests_per_pod_event_in_a_burst(job: ScaleReport) -> None:
    assert job.writes / job.pod_events <= 0.5


def test_kubernetes_calls_per_pod_event_are_bounded_for_a_pod_group(group: ScaleReport) -> None:
    # one ungate a pod (3 events each), a listing, and the group's view and Events on
    # its first 32 pods (which dominate at this size: about 0.4 from 1,024 pods on)
    assert group.kube_calls / group.pod_events <= 1.5


def test_a_pod_group_starts_inside_budgets(group: ScaleReport) -> None:
    assert group.timed_out == 0 and group.records_failed == 0 and group.dead_lettered == 0
    assert group.ready_lag is not None and group.ready_lag <= 120.0


def test_a_pod_group_is_released_once_and_its_pod_events_share_writes(group: ScaleReport) -> None:
    # its pod events neither load the whole group each nor release it again
    assert group.admitted == 1 and group.phase == "Running"
    assert group.writes / group.pod_events <= 0.5
    assert group.reads / group.pod_events <= 1.0


def test_an_admission_pass_reads_in_proportion_to_queue_and_admitted(aws: None) -> None:
    r = queue(200, 20, admit=15, budgets=BUDGETS)
    assert r.admitted == 15
    assert r.admission_passes >= 1
    assert r.admission_reads <= 2 * (200 + 15) + 20
    assert r.timed_out == 0 and r.admission_seconds <= TIMEOUTS["admission"]


@pytest.mark.slow
def test_a_snapshot_showing_nothing_changed_is_reconciled_inside_budgets(aws: None) -> None:
    r = reconcile(400, 5, budgets=BUDGETS)
    assert r.reconciled == r.workloads == 400  # every workload took in the pod snapshot
    assert r.reconcile_seconds is not None  # the snapshot was recorded as acted on
    assert r.timed_out == 0 and r.longest <= TIMEOUTS["ingest"]
    assert r.ingest_longest <= TIMEOUTS["ingest"]
    assert r.dead_lettered == 0 and r.records_failed == 0 and r.throttled == 0
    assert r.kube_calls == 0  # nothing changed: nothing to tell the cluster
    assert r.admission_passes == 0


def test_an_admission_pass_stops_inside_its_budget_and_asks_for_another(aws: None) -> None:
    # 40 admissions take about 4.4 s of modelled time, past a 3 s timeout: each pass
    # stops admitting half-way through its time and asks for the next.
    short = Budgets({**TIMEOUTS, "admission": 3.0}, BUDGETS.batch_sizes, BUDGETS.windows)
    r = queue(40, 40, admit=40, budgets=short)
    assert r.admitted == 40
    assert r.timed_out == 0 and r.records_failed == 0
    assert r.admission_passes >= 3 and r.admission_seconds <= 3.0
