"""The agent's event schema: what the agent builds, the ingest path accepts."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from muster.core import Kind, NodeObserved, PodObserved, Reason, WorkloadFinished, WorkloadObserved
from muster.core.reconcile import SnapshotPart, complete
from muster.schema import (
    AGENT_SOURCE,
    CLUSTER_SNAPSHOT,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    InvalidEvent,
    node_detail,
    parse_agent_event,
    pod_detail,
    snapshot_details,
    workload_detail,
)

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def envelope(detail_type: str, detail: dict) -> dict:
    return {"source": AGENT_SOURCE, "detail-type": detail_type, "detail": detail}


def test_a_workload_observation_round_trips() -> None:
    detail = workload_detail(
        cluster="c1",
        workload="ml/llama",
        kind="PyTorchJob",
        queue="gpu",
        gang_size=16,
        gpus=128,
        priority=2,
        seq=7,
        created_at=WHEN,
        timeout="15m",
    )
    cluster, event = parse_agent_event(envelope(WORKLOAD_OBSERVED, detail))
    assert cluster == "c1"
    assert event == WorkloadObserved(
        "ml/llama",
        "gpu",
        16,
        gpus=128,
        priority=2,
        kind=Kind.PYTORCHJOB,
        created_at=WHEN.timestamp(),
        timeout_override=900.0,
        seq=7,
    )


def test_a_priority_class_and_its_value_round_trip() -> None:
    # GIVEN the pods' PriorityClass, found and not found in the cluster
    found = workload_detail(
        cluster="c",
        workload="ml/a",
        kind="Job",
        queue="q",
        gang_size=2,
        seq=3,
        priority_class="team-high",
        class_priority=100000,
    )
    missing = workload_detail(
        cluster="c",
        workload="ml/a",
        kind="Job",
        queue="q",
        gang_size=2,
        seq=4,
        priority_class="typo-class",
    )
    # WHEN the ingest path parses them
    _, with_value = parse_agent_event(envelope(WORKLOAD_OBSERVED, found))
    _, without = parse_agent_event(envelope(WORKLOAD_OBSERVED, missing))
    # THEN the class and its value arrive; a missing class arrives without a value
    assert isinstance(with_value, WorkloadObserved) and isinstance(without, WorkloadObserved)
    assert (with_value.priority_class, with_value.class_priority) == ("team-high", 100000)
    assert (without.priority_class, without.class_priority) == ("typo-class", None)
    assert "priorityClassValue" not in missing


def test_an_event_without_a_priority_class_still_parses() -> None:
    # GIVEN an event from an agent that knows nothing of PriorityClasses
    old = workload_detail(cluster="c", workload="ml/a", kind="Job", queue="q", gang_size=2, seq=1)
    assert "priorityClass" not in old
    # THEN it parses with no class, its annotation priority as before
    _, event = parse_agent_event(envelope(WORKLOAD_OBSERVED, old))
    assert isinstance(event, WorkloadObserved)
    assert (event.priority_class, event.class_priority, event.priority) == (None, None, 0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"priorityClass": "Not_A_Name"}, "priorityClass: expected a Kubernetes name"),
        ({"priorityClass": "a" * 254}, "priorityClass: expected a Kubernetes name"),
        ({"priorityClass": ""}, "priorityClass: expected a Kubernetes name"),
        ({"priorityClass": 7}, "priorityClass: expected a non-empty string"),
        (
            {"priorityClass": "high", "priorityClassValue": "9"},
            "priorityClassValue: expected a whole",
        ),
        (
            {"priorityClass": "high", "priorityClassValue": 2**31},
            "priorityClassValue: must be at most",
        ),
        (
            {"priorityClass": "high", "priorityClassValue": -(2**31) - 1},
            "priorityClassValue: must be at least",
        ),
        ({"priorityClassValue": 5}, "priorityClassValue: only with priorityClass"),
    ],
)
def test_a_malformed_priority_class_names_the_field(changes: dict, message: str) -> None:
    detail = workload_detail(cluster="c", workload="a/b", kind="Job", queue="q", gang_size=2, seq=1)
    detail.update(changes)
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        parse_agent_event(envelope(WORKLOAD_OBSERVED, detail))


def test_finished_and_deleted_workloads_become_finish_events() -> None:
    for status, reason in (
        ("Succeeded", Reason.SUCCEEDED),
        ("Failed", Reason.FAILED),
        ("Deleted", Reason.DELETED),
    ):
        detail = workload_detail(
            cluster="c", workload="a/b", kind="Job", queue="q", gang_size=1, seq=3, status=status
        )
        assert parse_agent_event(envelope(WORKLOAD_OBSERVED, detail))[1] == WorkloadFinished(
            "a/b", reason, 3
        )


def test_pod_and_node_observations_round_trip() -> None:
    detail = pod_detail(
        cluster="c",
        workload="a/b",
        pod="b-0",
        seq=4,
        uid="u",
        phase="Running",
        ready=True,
        node="n1",
    )
    assert parse_agent_event(envelope(POD_OBSERVED, detail))[1] == PodObserved(
        "a/b", "b-0", 4, uid="u", phase="Running", ready=True, node="n1"
    )
    detail = node_detail(
        cluster="c", node="n1", seq=2, ready=True, health="UnschedulablePendingReplacement"
    )
    assert parse_agent_event(envelope(NODE_OBSERVED, detail))[1] == NodeObserved(
        "n1", True, "UnschedulablePendingReplacement", seq=2
    )


def good_pod() -> dict:
    return pod_detail(cluster="c", workload="a/b", pod="b-0", seq=4)


def failing_pod(**kw: object) -> dict:
    """A pod whose container crash loops, with everything the agent reports about it."""
    fields: dict = {
        "cluster": "c",
        "workload": "a/b",
        "pod": "b-0",
        "seq": 4,
        "phase": "Running",
        "node": "n1",
        "reason": "CrashLoopBackOff",
        "message": "back-off 40s restarting failed container",
        "scheduled": True,
        "waiting": "CrashLoopBackOff",
        "restarts": 3,
        "terminated": "OOMKilled",
        "exit_code": 137,
        "owner": "job-uid-1",
    }
    return pod_detail(**(fields | kw))


def test_what_kubernetes_says_about_a_pod_survives_the_wire() -> None:
    _, event = parse_agent_event(envelope(POD_OBSERVED, failing_pod()))
    assert isinstance(event, PodObserved)
    assert (event.scheduled, event.waiting, event.restarts, event.terminated, event.exit_code) == (
        True,
        "CrashLoopBackOff",
        3,
        "OOMKilled",
        137,
    )


def test_an_older_agents_pod_event_without_those_fields_still_parses() -> None:
    detail = good_pod()
    for key in ("scheduled", "waiting", "restarts", "terminated", "exitCode", "owner"):
        assert key not in detail
    _, event = parse_agent_event(envelope(POD_OBSERVED, detail))
    assert isinstance(event, PodObserved)
    assert (event.scheduled, event.waiting, event.restarts, event.exit_code, event.owner) == (
        None,
        None,
        0,
        None,
        "",
    )


def test_the_pods_owner_survives_the_wire_and_is_bounded() -> None:
    _, event = parse_agent_event(envelope(POD_OBSERVED, failing_pod()))
    assert isinstance(event, PodObserved) and event.owner == "job-uid-1"
    with pytest.raises(InvalidEvent, match=r"owner: .* is not an object uid"):
        parse_agent_event(envelope(POD_OBSERVED, failing_pod(owner="u" * 129)))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("scheduled", "yes", "scheduled: expected true, false or null"),
        ("restarts", -1, "restarts: must be at least 0"),
        ("restarts", 2**31, "restarts: must be at most"),
        ("exitCode", "1", "exitCode: expected a whole number"),
        ("waiting", 7, "waiting: expected a non-empty string"),
    ],
)
def test_malformed_pod_health_fields_name_the_field(
    field: str, value: object, message: str
) -> None:
    detail = failing_pod()
    detail[field] = value
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        parse_agent_event(envelope(POD_OBSERVED, detail))


def test_a_64_pod_gangs_events_stay_far_within_the_bus_limits() -> None:
    # GIVEN the longest names and reasons the schema allows, on every pod of a 64-pod gang
    name = "a" * 63 + "." + "b" * 189
    details = [
        failing_pod(
            workload=f"{'n' * 63}/{name}",
            pod=f"{name[:-3]}-{i:02d}",
            node="m" * 253,
            reason="R" * 500,
            message="é" * 2000,
            waiting="W" * 500,
            terminated="T" * 500,
        )
        for i in range(64)
    ]
    # THEN each pod's event (one PutEvents entry, one SQS message) is a few KB at most,
    # and the reasons are cut to their bound
    sizes = [len(json.dumps(envelope(POD_OBSERVED, d)).encode()) for d in details]
    assert max(sizes) < 4 * 1024 < 256 * 1024
    _, event = parse_agent_event(envelope(POD_OBSERVED, details[0]))
    assert isinstance(event, PodObserved)
    assert len((event.waiting or "").encode()) <= 128


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.update(source="someone.else"), "source: expected 'muster.agent'"),
        (lambda e: e.update({"detail-type": "Pod Exploded"}), "detail-type: expected one of"),
        (lambda e: e.update(detail="nope"), "detail: must be a JSON object"),
        (lambda e: e["detail"].update(schemaVersion=2), "schemaVersion: expected 1, got 2"),
        (lambda e: e["detail"].pop("cluster"), "cluster: required"),
        (lambda e: e["detail"].update(seq="7"), "seq: expected a whole number"),
        (lambda e: e["detail"].update(seq=-1), "seq: must be at least 0"),
        (
            lambda e: e["detail"].update(workload="no-namespace"),
            "workload: expected 'namespace/name'",
        ),
        (lambda e: e["detail"].update(phase="Sleeping"), "phase: expected one of"),
        (lambda e: e["detail"].update(ready="true"), "ready: expected true or false"),
    ],
)
def test_malformed_events_name_the_field(mutate, message: str) -> None:
    event = envelope(POD_OBSERVED, good_pod())
    mutate(event)
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        parse_agent_event(event)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("kind", "CronJob", "kind: expected one of"),
        ("gangSize", 0, "gangSize: must be at least 1"),
        ("timeout", "soon", "timeout: malformed duration"),
        ("createdAt", "yesterday", "createdAt: not an RFC 3339 timestamp"),
        ("status", "Running", "status: expected one of"),
    ],
)
def test_malformed_workload_fields_name_the_field(field: str, value: object, message: str) -> None:
    detail = workload_detail(cluster="c", workload="a/b", kind="Job", queue="q", gang_size=2, seq=1)
    detail[field] = value
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        parse_agent_event(envelope(WORKLOAD_OBSERVED, detail))


def test_the_documented_schema_lists_exactly_the_fields_the_builders_emit() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "events.md").read_text()
    sections = {
        WORKLOAD_OBSERVED: workload_detail(
            cluster="c",
            workload="a/b",
            kind="Job",
            queue="q",
            gang_size=1,
            seq=1,
            timeout="1m",
            priority_class="high",
            class_priority=1000,
            shape=((4, 8),),
            placement="nodeSelector",
            topology="required=network-node-layer-3",
        ),
        POD_OBSERVED: failing_pod(),
        NODE_OBSERVED: node_detail(
            cluster="c",
            node="n",
            seq=1,
            gpus=8,
            foreign_gpus=2,
            topology=(("network-node-layer-3", "nn-1"),),
        ),
        CLUSTER_SNAPSHOT: snapshot_details(
            cluster="c", scope="Pod", revision=1, snapshot="s", pods={"a/b": {"b-0": "u"}}
        )[0],
    }
    common = set(re.findall(r"^\| `(\w+)` \|", doc.split("### ")[0], re.M))
    for title, built in sections.items():
        body = doc.split(f"### `{title}`")[1].split("\n#")[0]
        documented = set(re.findall(r"^\| `(\w+)` \|", body, re.M)) | common
        assert documented == set(built), title


def test_a_listing_is_cut_into_parts_that_parse_back_whole() -> None:
    pods = {f"ns/job-{j}": {f"job-{j}-{i}": f"uid-{j}-{i}" for i in range(50)} for j in range(40)}
    details = snapshot_details(
        cluster="c", scope="Pod", revision=77, snapshot="s1", pods=pods, max_bytes=16 * 1024
    )
    assert len(details) > 2 and all(len(json.dumps(d)) <= 16 * 1024 for d in details)
    parts = [parse_agent_event(envelope(CLUSTER_SNAPSHOT, d))[1] for d in details]
    whole = complete(p for p in parts if isinstance(p, SnapshotPart))
    assert whole is not None and whole.revision == 77 and whole.pods == pods
    assert complete(p for p in parts[1:] if isinstance(p, SnapshotPart)) is None  # one missing


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("scope", "Deployment", "scope: expected one of"),
        ("part", 0, "part: must be at least 1"),
        ("parts", 1, "parts: must be at least 2"),
        ("workloads", {"a/b": 3}, "workloads: expected an object"),
        ("pods", [], "pods: expected an object"),
    ],
)
def test_malformed_listing_fields_name_the_field(field: str, value: object, message: str) -> None:
    detail = snapshot_details(
        cluster="c", scope="Job", revision=5, snapshot="s", workloads={"a/b": "u"}
    )[0]
    detail["part"] = 2 if field == "parts" else detail["part"]
    detail[field] = value
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        parse_agent_event(envelope(CLUSTER_SNAPSHOT, detail))
