"""The whole lifecycle through real AWS API calls on moto.

The agent's events go onto the bus and a rule routes them into the ingest queue;
the handlers consume real SQS batches; Step Functions executions really wait for
their (one-second) deadlines and signal the timer queue; requeues really wait
out their SQS delay.
"""

from __future__ import annotations

import json

import pytest
from muster.core import parse_settings
from muster.runtime.settings import update_settings
from muster.schema import (
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    node_detail,
    pod_detail,
    workload_detail,
)

from .conftest import CLUSTER, ControlPlaneOnMoto

pytestmark = pytest.mark.slow

FAST = {
    "timeout": "1s",
    "requeuingStrategy": {"backoffBaseSeconds": 1, "backoffMaxSeconds": 4},
}


def submit(aws: ControlPlaneOnMoto, key: str, gang: int = 2, **kw: object) -> None:
    aws.agent(
        WORKLOAD_OBSERVED,
        workload_detail(
            cluster=CLUSTER,
            workload=key,
            kind="Job",
            queue="research",
            gang_size=gang,
            seq=1,
            **kw,  # type: ignore[arg-type]
        ),
    )


def pod(
    aws: ControlPlaneOnMoto,
    key: str,
    name: str,
    seq: int,
    ready: bool,
    node: str = "n1",
    **kw: object,
) -> None:
    aws.agent(
        POD_OBSERVED,
        pod_detail(
            cluster=CLUSTER,
            workload=key,
            pod=name,
            seq=seq,
            uid=f"{name}-uid",
            phase="Running" if ready else "Pending",
            ready=ready,
            node=node,
            **kw,  # type: ignore[arg-type]
        ),
    )


def running(aws: ControlPlaneOnMoto, key: str, gang: int = 2) -> None:
    submit(aws, key, gang)
    aws.settle()
    for i in range(gang):
        pod(aws, key, f"p{i}", 1, True, node=f"n{i}")
    aws.settle()
    assert aws.state(key)["phase"] == "Running"


def test_admitted_gang_ready_in_time_stops_its_timer(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    # GIVEN a workload submitted through the bus
    submit(aws, "team-a/bert", 2, gpus=16)
    aws.settle()
    # THEN the admission function admitted it and its timer execution runs
    assert aws.cluster.calls == [("admit", "team-a/bert", 1)]
    [execution] = aws.executions("RUNNING")
    assert execution["name"] == "team-a.bert.a1.startup.e1"
    # WHEN all pods become ready
    pod(aws, "team-a/bert", "p0", 1, True)
    pod(aws, "team-a/bert", "p1", 1, True, node="n2")
    aws.settle()
    # THEN it is PodsReady, the execution was stopped, and the lifecycle went out on the bus
    assert aws.state("team-a/bert")["phase"] == "Running"
    assert aws.executions("RUNNING") == []
    assert [e["status"] for e in aws.executions()] == ["ABORTED"]
    assert aws.lifecycle() == [
        ("Workload Submitted", "team-a/bert"),
        ("Workload Admitted", "team-a/bert"),
        ("Workload PodsReady", "team-a/bert"),
    ]


def test_timeout_evicts_requeues_with_backoff_and_readmits(aws: ControlPlaneOnMoto):
    aws.settings = FAST
    # GIVEN an admitted gang with a pod that cannot be scheduled
    submit(aws, "team-a/stuck", 2)
    aws.settle(timers=False)
    pod(aws, "team-a/stuck", "p0", 1, True)
    pod(aws, "team-a/stuck", "p1", 1, False, node=None, reason="Unschedulable", message="0/4 nodes")
    aws.settle(timers=False)
    # WHEN its one-second deadline passes (the execution really waits)
    aws.until("team-a/stuck", "Requeued", admission=False)
    # THEN it was evicted, with the reason recorded, and requeued with a 1 s backoff
    state = aws.state("team-a/stuck")
    assert state["phase"] == "Requeued" and state["requeueCount"] == 1
    assert ("evict", "team-a/stuck", 1) in aws.cluster.calls
    evicted = next(h for h in state["history"] if h["event"] == "Evicted")
    assert evicted["detail"]["cause"] == "WaitForStart"
    assert evicted["detail"]["notReady"][0]["reason"] == "Unschedulable"
    requeued = next(h for h in state["history"] if h["event"] == "Requeued")
    assert requeued["detail"]["delaySeconds"] == 1
    # WHEN the requeue's SQS delay has passed
    aws.until("team-a/stuck", "Admitted")
    # THEN it was readmitted for attempt 2, after the deadline plus the backoff
    assert aws.cluster.calls[-1] == ("admit", "team-a/stuck", 2)
    admissions = [h["at"] for h in aws.state("team-a/stuck")["history"] if h["event"] == "Admitted"]
    # by the control plane's own clock: the 1 s deadline, then the 1 s backoff
    assert len(admissions) == 2 and admissions[1] - admissions[0] >= 2.0 - 1e-3, admissions
    assert aws.state("team-a/stuck")["phase"] == "Admitted"


def test_backoff_limit_deactivates(aws: ControlPlaneOnMoto):
    aws.settings = {**FAST, "requeuingStrategy": {"backoffLimitCount": 0}}
    submit(aws, "team-a/never", 1)
    aws.settle()
    aws.until("team-a/never", "Deactivated")
    state = aws.state("team-a/never")
    assert state["phase"] == "Deactivated" and state["reason"] == "RequeuingLimitExceeded"
    assert ("Workload Deactivated", "team-a/never") in aws.lifecycle()


def test_node_failure_then_recovery_in_time(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    running(aws, "team-a/gang", 2)
    aws.agent(NODE_OBSERVED, node_detail(cluster=CLUSTER, node="n1", seq=5, ready=False))
    aws.settle()
    assert aws.state("team-a/gang")["phase"] == "Recovering"
    assert [e["name"] for e in aws.executions("RUNNING")] == ["team-a.gang.a1.recovery.e1"]
    pod(aws, "team-a/gang", "p1", 2, True, node="n3")
    aws.settle()
    assert aws.state("team-a/gang")["phase"] == "Running"
    assert aws.executions("RUNNING") == []


def test_recovery_timeout_evicts(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s", "recoveryTimeout": "1s"}
    running(aws, "team-a/lost", 2)
    pod(aws, "team-a/lost", "p0", 2, False, reason="ContainersNotReady")
    aws.settle(timers=False)
    assert aws.state("team-a/lost")["phase"] == "Recovering"
    aws.until("team-a/lost", "Requeued")
    state = aws.state("team-a/lost")
    assert state["phase"] == "Requeued"
    assert state["evictions"] == {"PodsReadyTimeout/WaitForRecovery": 1}


def test_node_marked_for_replacement_evicts_at_once(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    running(aws, "team-a/hp", 2)
    aws.agent(
        NODE_OBSERVED,
        node_detail(
            cluster=CLUSTER, node="n0", seq=9, ready=True, health="UnschedulablePendingReplacement"
        ),
    )
    aws.settle()
    assert ("evict", "team-a/hp", 1) in aws.cluster.calls
    # requeued at once without counting towards the limit, and readmitted by the same settle
    assert aws.cluster.calls[-1] == ("admit", "team-a/hp", 2)


def test_block_admission_with_two_workloads(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s", "blockAdmission": True}
    submit(aws, "team-a/first", 1, created_at=None)
    aws.settle()
    submit(aws, "team-b/second", 1)
    aws.settle()
    # only the first holds the lock while it is not yet PodsReady
    assert [c for c in aws.cluster.calls if c[0] == "admit"] == [("admit", "team-a/first", 1)]
    assert aws.state("team-b/second")["phase"] == "Pending"
    pod(aws, "team-a/first", "p0", 1, True)
    aws.settle()
    assert aws.cluster.calls[-1] == ("admit", "team-b/second", 1)


def test_duplicate_and_out_of_order_pod_events(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    submit(aws, "team-a/dup", 2)
    aws.settle()
    pod(aws, "team-a/dup", "p0", 3, True)
    pod(aws, "team-a/dup", "p0", 3, True)  # the agent re-sent it
    pod(aws, "team-a/dup", "p0", 2, False)  # an older observation, delivered late
    aws.settle()
    state = aws.state("team-a/dup")
    assert state["readyPods"] == 1 and state["phase"] == "Admitted"
    outcomes = aws.plane("ingest").stats.outcomes
    assert outcomes.get("duplicate") == 1 and outcomes.get("stale") == 1


def test_pod_event_before_its_workload_is_applied_on_redelivery(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    pod(aws, "team-a/late", "p0", 1, True)
    assert aws.drain("ingest", redeliver_failures=False) == 0  # not yet known: back to the queue
    submit(aws, "team-a/late", 1)
    aws.settle()
    aws.redeliver("ingest")
    aws.settle()
    assert aws.state("team-a/late")["phase"] == "Running"


def test_settings_record_in_the_table_overrides_the_deployment(aws: ControlPlaneOnMoto):
    # GIVEN the deployment says 30 minutes, and an administrator set 1 s for one queue
    aws.settings = {"timeout": "30m"}
    store = aws.plane("ingest").store
    update_settings(
        store, parse_settings(aws.settings), {"queues": {"research": {"timeout": "1s"}}}
    )
    # WHEN a workload of that queue is admitted
    submit(aws, "team-a/quick", 1)
    aws.settle(timers=False)
    # THEN its deadline is one second away, and it is evicted when nothing became ready
    state = aws.state("team-a/quick")
    admitted = next(h for h in state["history"] if h["event"] == "Admitted")
    assert admitted["detail"]["timeoutSeconds"] == 1
    aws.until("team-a/quick", "Requeued")


def test_lifecycle_events_and_history_carry_what_consumers_need(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    submit(aws, "team-a/seen", 1)
    aws.settle()
    sqs = aws.session.client("sqs")
    bodies = [
        json.loads(m["Body"])
        for m in sqs.receive_message(QueueUrl=aws.resources["observer"], MaxNumberOfMessages=10)[
            "Messages"
        ]
    ]
    admitted = next(b for b in bodies if b["detail-type"] == "Workload Admitted")
    assert admitted["source"] == "muster.controlplane"
    detail = admitted["detail"]
    assert detail["cluster"] == CLUSTER and detail["workload"] == "team-a/seen"
    assert detail["attempt"] == 1 and detail["id"].startswith("team-a/seen/")
    # history entries expire with the table's TTL
    items = aws.session.client("dynamodb").query(
        TableName=aws.resources["MUSTER_TABLE_NAME"],
        KeyConditionExpression="pk = :pk AND begins_with(sk, :h)",
        ExpressionAttributeValues={":pk": {"S": "WL#team-a/seen"}, ":h": {"S": "HIST#"}},
    )["Items"]
    assert items and all(
        int(i["expiresAt"]["N"]) - float(i["at"]["N"]) >= 30 * 86400 - 1 for i in items
    )
