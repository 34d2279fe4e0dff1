"""A scenario's table, written in BatchWriteItem requests of 25 items (no limits, no
virtual time): workloads and their pod items as the DynamoDB store writes them.

Thousands of workloads seeded through their events would cost more wall time on
moto than the scenario itself. The items here are the store's own layout (the
workload item, one item per pod, the phase and node indexes); a test compares a
seeded workload's items with those the store writes for the same workload
(tests/scale/test_harness.py), so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from muster.aws.dynamo.table import POD_PREFIX, STATE, number, workload_pk
from muster.core import Pod, Workload
from muster.runtime.codec import dumps, encode_pod, encode_workload

BATCH_WRITE = 25  # items in one BatchWriteItem


def workload_item(
    w: Workload, *, ready: int = 0, live: int = 0, now: float = 0.0
) -> dict[str, Any]:
    """The workload item of `w` at version 1, epoch 0 (its state without pods)."""
    return {
        "pk": {"S": workload_pk(w.key)},
        "sk": {"S": STATE},
        "workload": {"S": w.key},
        "version": {"N": "1"},
        "epoch": {"N": "0"},
        "phase": {"S": w.phase.value},
        "queue": {"S": w.queue},
        "state": {"S": dumps(encode_workload(replace(w, pods={}, listed={})))},
        "updatedAt": number(now),
        "gsi1pk": {"S": f"PHASE#{w.phase.value}"},
        "gsi1sk": {"S": w.key},
        "readyCount": {"N": str(ready)},
        "liveCount": {"N": str(live)},
    }


def pod_item(w: Workload, pod: Pod) -> dict[str, Any]:
    """The item of one pod of `w`, at revision 1 (on the node index while it runs there)."""
    item: dict[str, Any] = {
        "pk": {"S": workload_pk(w.key)},
        "sk": {"S": POD_PREFIX + pod.name},
        "workload": {"S": w.key},
        "rev": {"N": "1"},
        "epoch": {"N": "0"},
        "owner": {"S": w.uid},
        "pod": {"S": dumps(encode_pod(pod))},
    }
    if pod.node and not pod.retired and not pod.deleted:
        item["gsi1pk"] = {"S": f"NODE#{pod.node}"}
        item["gsi1sk"] = {"S": f"{w.key}#{pod.name}"}
    return item


def items_of(w: Workload, *, now: float = 0.0) -> Iterator[dict[str, Any]]:
    """The workload item and its pods' items."""
    ready = sum(1 for p in w.pods.values() if p.counts_ready)
    yield workload_item(w, ready=ready, live=w.live_pods, now=now)
    for pod in w.pods.values():
        yield pod_item(w, pod)


def seed(raw: Any, table: str, items: Iterable[dict[str, Any]]) -> int:
    """Every item written, 25 to a request (unprocessed ones sent again); how many."""
    written = 0
    batch: list[dict[str, Any]] = []
    for item in items:
        batch.append({"PutRequest": {"Item": item}})
        if len(batch) == BATCH_WRITE:
            written += _write(raw, table, batch)
            batch = []
    if batch:
        written += _write(raw, table, batch)
    return written


def _write(raw: Any, table: str, batch: list[dict[str, Any]]) -> int:
    request: dict[str, Any] = {table: batch}
    while request:
        request = raw.batch_write_item(RequestItems=request).get("UnprocessedItems") or {}
    return len(batch)
