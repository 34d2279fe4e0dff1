"""Incarnations, tombstones and listings through the real ingest path on moto (DynamoDB)."""

from __future__ import annotations

import pytest
from muster.schema import (
    CLUSTER_SNAPSHOT,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    pod_detail,
    snapshot_details,
    workload_detail,
)

from .conftest import CLUSTER, ControlPlaneOnMoto

pytestmark = pytest.mark.slow

KEY = "team-a/train"


def observed(aws: ControlPlaneOnMoto, seq: int, uid: str, status: str = "Active") -> None:
    detail = workload_detail(
        cluster=CLUSTER,
        workload=KEY,
        kind="Job",
        queue="q",
        gang_size=2,
        seq=seq,
        uid=uid,
        status=status,
    )
    aws.agent(WORKLOAD_OBSERVED, detail)


def pod(aws: ControlPlaneOnMoto, name: str, seq: int, uid: str, **kw: object) -> None:
    detail = pod_detail(
        cluster=CLUSTER,
        workload=KEY,
        pod=name,
        seq=seq,
        uid=uid,
        phase="Running",
        node="n1",
        **kw,  # type: ignore[arg-type]
    )
    aws.agent(POD_OBSERVED, detail)


def items(aws: ControlPlaneOnMoto) -> list[dict]:
    table = aws.resources["MUSTER_TABLE_NAME"]
    reply = aws.session.client("dynamodb").query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"WL#{KEY}"}},
    )
    return reply["Items"]


def test_a_re_created_job_on_dynamodb_inherits_nothing_and_its_old_items_expire(
    aws: ControlPlaneOnMoto,
):
    aws.settings = {"timeout": "30s"}
    # GIVEN a running Job
    observed(aws, 10, "old")
    aws.settle()
    pod(aws, "train-0", 11, "old-0", ready=True)
    pod(aws, "train-1", 12, "old-1", ready=True)
    aws.settle()
    assert aws.state(KEY)["phase"] == "Running"
    # WHEN it is deleted (its pods' deletions are not seen) and applied again
    observed(aws, 20, "old", status="Deleted")
    aws.settle()
    observed(aws, 30, "new")
    aws.settle()
    # THEN the new object is admitted afresh, with none of the old pods
    state = aws.state(KEY)
    assert (state["phase"], state["attempt"], state["readyPods"]) == ("Admitted", 1, 0)
    stored = {i["sk"]["S"]: i for i in items(aws)}
    assert "expiresAt" not in stored["STATE"]  # the new incarnation does not expire
    for name in ("POD#train-0", "POD#train-1"):
        assert "expiresAt" in stored[name] and "gsi1pk" not in stored[name]
    # and a late "ready" of an old pod is not the new object's
    pod(aws, "train-0", 13, "old-0", ready=True)
    aws.settle()
    assert aws.state(KEY)["readyPods"] == 0


def test_a_listing_in_parts_finishes_a_job_deleted_while_no_agent_ran(aws: ControlPlaneOnMoto):
    aws.settings = {"timeout": "30s"}
    observed(aws, 10, "u1")
    aws.settle()
    assert aws.state(KEY)["phase"] == "Admitted"
    # WHEN a new agent lists Jobs (in parts) and this one is not among them
    others = {f"team-b/job-{i:04d}": f"uid-{i:04d}-5f1c2a9b-4e0b-9d2a" for i in range(3000)}
    parts = snapshot_details(
        cluster=CLUSTER,
        scope="Job",
        revision=100,
        snapshot="s1",
        workloads=others,
        max_bytes=64 * 1024,
    )
    assert len(parts) > 1
    for detail in parts[:-1]:
        aws.agent(CLUSTER_SNAPSHOT, detail)
    aws.settle()
    # THEN nothing changes until the last part arrives
    assert aws.state(KEY)["phase"] == "Admitted"
    aws.agent(CLUSTER_SNAPSHOT, parts[-1])
    aws.settle()
    assert aws.state(KEY)["phase"] == "Finished"
    # and a redelivered part of the same listing changes nothing more
    aws.agent(CLUSTER_SNAPSHOT, parts[0])
    aws.settle()
    assert aws.state(KEY)["phase"] == "Finished"
