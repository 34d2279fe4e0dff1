"""Workloads, pods and effects as JSON-safe dictionaries, for storage and messages.

The workload item stores its state and its outbox (effects not yet carried out) as
JSON text, so floats survive DynamoDB without Decimal conversions and a new core
field needs no schema change. Decoding is the exact inverse of encoding.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import fields, replace
from typing import Any

from muster.core import (
    Admit,
    Effect,
    Evict,
    Holding,
    Kind,
    LogEvent,
    Phase,
    Pod,
    Publish,
    Reason,
    RecordView,
    Requeue,
    RunAdmission,
    SnapshotPart,
    StartTimer,
    StopTimer,
    Timer,
    TimerKind,
    Workload,
)
from muster.core.predecessors import running

# The pods are items of their own, and so is the pod listing but for its revision
# (`listed_seq`; `muster.runtime.listing`): the state's size does not grow with the gang.
_WORKLOAD_FIELDS = tuple(f.name for f in fields(Workload) if f.name not in ("pods", "listed"))
NOT_READY_STORED = 20
"""Not-ready pods an eviction keeps in its outbox (the same number its history entry names)."""


def encode_pod(pod: Pod) -> dict[str, Any]:
    return {f.name: getattr(pod, f.name) for f in fields(Pod)}


def decode_pod(doc: dict[str, Any]) -> Pod:
    return Pod(**{f.name: doc[f.name] for f in fields(Pod) if f.name in doc})


def encode_timer(timer: Timer | None) -> dict[str, Any] | None:
    if timer is None:
        return None
    doc = {
        "kind": timer.kind.value,
        "attempt": timer.attempt,
        "episode": timer.episode,
        "deadline": timer.deadline,
    }
    if timer.incarnation:
        doc["incarnation"] = timer.incarnation
    return doc


def decode_timer(doc: dict[str, Any] | None) -> Timer | None:
    if doc is None:
        return None
    return Timer(
        TimerKind(doc["kind"]),
        int(doc["attempt"]),
        int(doc["episode"]),
        doc["deadline"],
        str(doc.get("incarnation", "")),
    )


def encode_workload(w: Workload) -> dict[str, Any]:
    """Everything but the pods and their listing, which are stored on items of their own."""
    doc = {name: getattr(w, name) for name in _WORKLOAD_FIELDS}
    doc["kind"] = w.kind.value
    doc["phase"] = w.phase.value
    doc["timer"] = encode_timer(w.timer)
    doc["fault_timer"] = encode_timer(w.fault_timer)
    doc["evictions"] = dict(w.evictions)
    doc["predecessors"] = [encode_holding(h) for h in w.predecessors]
    return doc


HOLDING_ROWS_PLAIN = 32
"""Pods of a predecessor's holding stored as plain rows; more are stored compressed."""


def encode_holding(h: Holding) -> dict[str, Any]:
    """A predecessor's holding: its pods as rows of what deciding on their later events
    needs (name, revision, ended), compressed for a large gang so that the workload
    item stays small (a 4096-pod gang's rows take tens of KB, not hundreds)."""
    rows = [(p.name, p.seq, int(not running(p))) for p in h.pods.values()]
    doc: dict[str, Any] = {"uid": h.uid, "queue": h.queue, "gpus": h.gpus}
    if h.presumed:
        doc["presumed"] = True
    if len(rows) <= HOLDING_ROWS_PLAIN:
        doc["pods"] = [list(r) for r in rows]
    else:
        # By revision, each row's revision as the step from the one before: small numbers.
        rows.sort(key=lambda r: r[1])
        steps = [[n, seq - (rows[i - 1][1] if i else 0), e] for i, (n, seq, e) in enumerate(rows)]
        packed = zlib.compress(dumps(steps).encode(), 9)
        doc["packed"] = base64.b64encode(packed).decode("ascii")
    return doc


def decode_holding(doc: dict[str, Any]) -> Holding:
    rows = doc.get("pods", ())
    if "packed" in doc:
        rows, seq = [], 0
        for name, step, ended in json.loads(zlib.decompress(base64.b64decode(doc["packed"]))):
            seq += step
            rows.append([name, seq, ended])
    pods = {
        str(name): Pod(str(name), int(seq), deleted=bool(ended))
        if ended
        else Pod(str(name), int(seq))
        for name, seq, ended in rows
    }
    presumed = bool(doc.get("presumed"))
    return Holding(str(doc["uid"]), str(doc["queue"]), int(doc["gpus"]), pods, presumed)


def decode_workload(doc: dict[str, Any], pods: dict[str, Pod] | None = None) -> Workload:
    values = {name: doc[name] for name in _WORKLOAD_FIELDS if name in doc}
    values["kind"] = Kind(values["kind"])
    values["phase"] = Phase(values["phase"])
    values["timer"] = decode_timer(values.get("timer"))
    values["shape"] = tuple((int(n), int(g)) for n, g in values.get("shape") or ())
    values["fault_timer"] = decode_timer(values.get("fault_timer"))
    values["predecessors"] = tuple(decode_holding(h) for h in values.get("predecessors") or ())
    return replace(
        Workload(key=doc["key"], queue=doc["queue"], gang_size=1), **values, pods=pods or {}
    )


def encode_effect(effect: Effect) -> dict[str, Any]:
    match effect:
        case Admit():
            return {
                "type": "Admit",
                "workload": effect.workload,
                "attempt": effect.attempt,
                "kind": effect.kind.value,
                "uid": effect.uid,
                **({"size": effect.size, "gpus": effect.gpus} if effect.size else {}),
            } | ({"domain": effect.domain, "topology": effect.topology} if effect.topology else {})
        case Evict():
            return {
                "type": "Evict",
                "workload": effect.workload,
                "attempt": effect.attempt,
                "kind": effect.kind.value,
                "reason": effect.reason.value,
                "cause": effect.cause.value if effect.cause else None,
                "notReady": [encode_pod(p) for p in effect.not_ready[:NOT_READY_STORED]],
                "uid": effect.uid,
            }
        case StartTimer() | StopTimer():
            return {
                "type": type(effect).__name__,
                "workload": effect.workload,
                "timer": encode_timer(effect.timer),
            }
        case Requeue():
            return {
                "type": "Requeue",
                "workload": effect.workload,
                "count": effect.count,
                "delay": effect.delay,
                "requeueAt": effect.requeue_at,
            }
        case Publish():
            return {
                "type": "Publish",
                "event": effect.event.value,
                "workload": effect.workload,
                "detail": dict(effect.detail),
            }
        case RunAdmission():
            return {"type": "RunAdmission", "reason": effect.reason}
        case RecordView():
            return {"type": "RecordView", "workload": effect.workload}
    raise TypeError(f"not an effect: {effect!r}")  # pragma: no cover - exhaustive match


def decode_effect(doc: dict[str, Any]) -> Effect:
    kind = doc["type"]
    if kind == "Admit":
        return Admit(
            doc["workload"],
            int(doc["attempt"]),
            Kind(doc["kind"]),
            doc.get("uid", ""),
            int(doc.get("size", 0)),
            int(doc.get("gpus", 0)),
            str(doc.get("domain") or ""),
            str(doc.get("topology") or ""),
        )
    if kind == "Evict":
        return Evict(
            doc["workload"],
            int(doc["attempt"]),
            Kind(doc["kind"]),
            Reason(doc["reason"]),
            Reason(doc["cause"]) if doc.get("cause") else None,
            tuple(decode_pod(p) for p in doc.get("notReady", ())),
            doc.get("uid", ""),
        )
    if kind in ("StartTimer", "StopTimer"):
        timer = decode_timer(doc["timer"])
        assert timer is not None
        return (StartTimer if kind == "StartTimer" else StopTimer)(doc["workload"], timer)
    if kind == "Requeue":
        return Requeue(doc["workload"], int(doc["count"]), doc["delay"], doc["requeueAt"])
    if kind == "Publish":
        return Publish(LogEvent(doc["event"]), doc["workload"], doc.get("detail", {}))
    if kind == "RunAdmission":
        return RunAdmission(doc["reason"])
    if kind == "RecordView":
        return RecordView(doc["workload"])
    raise ValueError(f"unknown effect type {kind!r}")


def encode_snapshot_part(part: SnapshotPart) -> dict[str, Any]:
    return {
        "snapshot": part.snapshot,
        "part": part.part,
        "parts": part.parts,
        "scope": part.scope,
        "revision": part.revision,
        "workloads": dict(part.workloads),
        "pods": {k: dict(v) for k, v in part.pods.items()},
    }


def decode_snapshot_part(doc: dict[str, Any]) -> SnapshotPart:
    return SnapshotPart(
        doc["snapshot"],
        int(doc["part"]),
        int(doc["parts"]),
        doc["scope"],
        int(doc["revision"]),
        doc.get("workloads", {}),
        doc.get("pods", {}),
    )


def dumps(value: Any) -> str:
    """Compact JSON; non-ASCII text stays UTF-8 (an escape would take up to 12 bytes a character)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str, ensure_ascii=False)
