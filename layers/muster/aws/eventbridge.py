"""Lifecycle events on the bus: source `muster.controlplane`, detail-type `Workload <event>`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from muster.contract import CONTROLPLANE_SOURCE
from muster.core import LogEvent
from muster.runtime.codec import dumps
from muster.runtime.messages import rfc3339
from muster.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient


class PublishFailed(Exception):
    """EventBridge refused the entry; the message is retried."""


def lifecycle_detail(
    cluster: str,
    event: LogEvent,
    workload: str,
    detail: Mapping[str, Any],
    event_id: str,
    at: float,
) -> dict[str, Any]:
    """`id` is stable across re-deliveries, so consumers can drop duplicates."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "id": event_id,
        "cluster": cluster,
        "workload": workload,
        "event": event.value,
        "at": rfc3339(at),
        **{k: v for k, v in detail.items() if k not in ("workload", "event", "id")},
    }


class EventBridgeBus:
    def __init__(self, client: EventBridgeClient, bus_name: str, cluster: str) -> None:
        self.client = client
        self.bus_name = bus_name
        self.cluster = cluster

    def publish(
        self,
        event: LogEvent,
        workload: str,
        detail: Mapping[str, Any],
        event_id: str,
        at: float,
    ) -> None:
        reply = self.client.put_events(
            Entries=[
                {
                    "Source": CONTROLPLANE_SOURCE,
                    "DetailType": f"Workload {event.value}",
                    "Detail": dumps(
                        lifecycle_detail(self.cluster, event, workload, detail, event_id, at)
                    ),
                    "EventBusName": self.bus_name,
                    "Resources": [],
                }
            ]
        )
        if reply.get("FailedEntryCount"):
            raise PublishFailed(str(reply.get("Entries")))
