"""Lifecycle events on the bus: source `muster.controlplane`, detail-type `Workload <event>`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from muster.contract import CONTROLPLANE_SOURCE
from muster.core import LogEvent
from muster.retry import Backoff, retry
from muster.runtime.codec import dumps
from muster.runtime.messages import rfc3339
from muster.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef


# Per-entry error codes AWS lists as retryable: the call succeeded, the entry did not.
RETRYABLE_ENTRY_CODES = frozenset({"ThrottlingException", "InternalFailure", "InternalException"})
ENTRY_ATTEMPTS = 3


class PublishFailed(Exception):
    """EventBridge refused the entry; the message is retried.

    `transient` when its error code is one AWS lists as retryable (throttling, an
    internal failure): waiting cures it, so it never counts towards quarantine.
    """

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


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
    def __init__(
        self,
        client: EventBridgeClient,
        bus_name: str,
        cluster: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.bus_name = bus_name
        self.cluster = cluster
        self.sleep = sleep

    def publish(
        self,
        event: LogEvent,
        workload: str,
        detail: Mapping[str, Any],
        event_id: str,
        at: float,
    ) -> None:
        entry: PutEventsRequestEntryTypeDef = {
            "Source": CONTROLPLANE_SOURCE,
            "DetailType": f"Workload {event.value}",
            "Detail": dumps(lifecycle_detail(self.cluster, event, workload, detail, event_id, at)),
            "EventBusName": self.bus_name,
            "Resources": [],
        }
        retry(
            lambda: self._put(entry),
            attempts=ENTRY_ATTEMPTS,
            retry_on=PublishFailed,
            backoff=Backoff(0.1, 1.0),
            sleep=self.sleep,
            on_retry=_raise_unless_transient,
        )

    def _put(self, entry: PutEventsRequestEntryTypeDef) -> None:
        reply = self.client.put_events(Entries=[entry])
        if not reply.get("FailedEntryCount"):
            return
        failed = reply.get("Entries") or [{}]
        codes = {str(e.get("ErrorCode") or "") for e in failed if e.get("ErrorCode")}
        raise PublishFailed(
            f"EventBridge refused the entry: {failed}",
            transient=bool(codes) and codes <= RETRYABLE_ENTRY_CODES,
        )


def _raise_unless_transient(_try: int, error: BaseException) -> None:
    """Only retryable entry codes are tried again at once; the others go back to the queue."""
    if isinstance(error, PublishFailed) and not error.transient:
        raise error
