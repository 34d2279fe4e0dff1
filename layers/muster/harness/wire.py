"""The agent's events as they travel: built by the schema's builders, sent as JSON on
the bus, parsed by the ingest's parser (the history harness's `wire` option)."""

from __future__ import annotations

import json
from typing import Any

from muster.core import (
    Event,
    NodeObserved,
    PodObserved,
    SnapshotPart,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.keys import parse_workload_key
from muster.schema import (
    AGENT_SOURCE,
    CLUSTER_SNAPSHOT,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    node_detail,
    parse_agent_event,
    pod_detail,
    snapshot_details,
    workload_detail,
)

CLUSTER = "faults"


def over_the_wire(event: Event | SnapshotPart) -> Event | SnapshotPart:
    """The event as the agent builds it, as JSON on the bus, and as the ingest parses it."""
    detail_type, detail = _agent_detail(event)
    envelope = {"source": AGENT_SOURCE, "detail-type": detail_type, "detail": detail}
    cluster, parsed = parse_agent_event(json.loads(json.dumps(envelope)))
    assert cluster == CLUSTER
    return parsed


def _agent_detail(event: Event | SnapshotPart) -> tuple[str, dict[str, Any]]:
    match event:
        case WorkloadObserved():
            return WORKLOAD_OBSERVED, workload_detail(
                cluster=CLUSTER,
                workload=event.workload,
                kind=event.kind,
                queue=event.queue,
                gang_size=event.gang_size,
                seq=event.seq,
                gpus=event.gpus,
                uid=event.uid,
            )
        case WorkloadFinished():
            return WORKLOAD_OBSERVED, workload_detail(
                cluster=CLUSTER,
                workload=event.workload,
                kind=parse_workload_key(event.workload)[2],
                queue="default",
                gang_size=1,
                seq=event.seq,
                status=event.reason.value,
                uid=event.uid,
            )
        case PodObserved():
            return POD_OBSERVED, pod_detail(
                cluster=CLUSTER,
                workload=event.workload,
                pod=event.pod,
                seq=event.seq,
                uid=event.uid,
                phase=event.phase,
                ready=event.ready,
                node=event.node,
                deleted=event.deleted,
                reason=event.reason,
                scheduled=event.scheduled,
                waiting=event.waiting,
                restarts=event.restarts,
                terminated=event.terminated,
                exit_code=event.exit_code,
                owner=event.owner,
            )
        case NodeObserved():
            return NODE_OBSERVED, node_detail(
                cluster=CLUSTER,
                node=event.node,
                seq=event.seq,
                ready=event.ready,
                gpus=event.gpus,
                unschedulable=None if event.schedulable else event.unschedulable,
                foreign_gpus=event.foreign_gpus,
            )
        case SnapshotPart():
            [detail] = snapshot_details(
                cluster=CLUSTER,
                scope=event.scope,
                revision=event.revision,
                snapshot=event.snapshot,
                workloads=event.workloads,
                pods=event.pods,
            )
            detail.update(part=event.part, parts=event.parts)
            return CLUSTER_SNAPSHOT, detail
    raise TypeError(f"not an agent event: {event!r}")
