"""The agent's events on the bus: building them (agent) and validating them (ingest).

One module for both sides so that the producer and the consumer cannot drift apart.
`docs/events.md` documents the same schema for people; a test checks that the two
agree. A malformed event raises `InvalidEvent`, which names every wrong field
(read with `muster.core.fields`, as settings and scenarios are).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from muster.contract import (
    AGENT_DETAIL_TYPES,
    AGENT_SOURCE,
    CLUSTER_SNAPSHOT,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
)
from muster.core.fields import (
    FieldErrors,
    boolean,
    checked,
    collecting,
    duration,
    one_of,
    problem,
    text,
    whole_number,
)
from muster.core.keys import canonical_key, parse_workload_key
from muster.core.model import (
    Event,
    Kind,
    NodeObserved,
    PodObserved,
    Reason,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.core.printable import printable
from muster.core.reconcile import POD_SCOPE, SCOPES, SnapshotPart
from muster.core.settings import within_runtime
from muster.core.topology import NO_TOPOLOGY, Topology, event_request, event_topology

SCHEMA_VERSION = 1

# A snapshot is cut into parts whose `detail` stays under this many bytes: one
# EventBridge entry (and one PutEvents request) is at most 256 KB, and an SQS
# message of the ingest queue carries the detail with its envelope.
MAX_SNAPSHOT_PART_BYTES = 200 * 1024

WORKLOAD_STATUSES = ("Active", "Succeeded", "Failed", "Deleted")
NODE_DELETED = "deleted"
"""The `unschedulable` reason of a `Node Observed` event for a node gone from the
cluster (0 GPUs): the capacity view drops it, keeping its `seq` only to order
reordered reports, until it expires."""
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")

# Kubernetes labels and annotations that make a workload Muster's.
QUEUE_LABEL = "muster.io/queue"
MIN_AVAILABLE_ANNOTATION = "muster.io/min-available"
TIMEOUT_ANNOTATION = "muster.io/timeout"
PRIORITY_ANNOTATION = "muster.io/priority"
SCHEDULING_GATE = "muster.io/admission"
TOPOLOGY_ANNOTATION = "muster.io/topology"  # required=<level> or preferred=<level>

# A PriorityClass's name is a DNS subdomain; its value a 32-bit integer.
PRIORITY_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
INT32 = (-(2**31), 2**31 - 1)


class InvalidEvent(FieldErrors):
    """An event that does not follow the schema; retrying it cannot help."""

    default = "invalid event"


# --------------------------------------------------------------------------- bounds
# Kubernetes' own limits, checked at the edge so that nothing longer reaches a
# DynamoDB key, an execution name or an API server path.
NAMESPACE_BYTES = 63  # DNS-1123 label
NAME_BYTES = 253  # DNS-1123 subdomain (workloads, pods, nodes)
LABEL_VALUE_BYTES = 63  # the queue label, the node-health label
UID_BYTES = 128
REASON_BYTES = 128
MESSAGE_BYTES = 512
CLUSTER_BYTES = 100  # an EKS cluster name
# The most pods one workload may have (Kubernetes' own bound on an Indexed Job's
# completions, far above the 4,096-pod gangs Muster is built for), and the most GPUs
# one pod may ask for (more than any node has): a NonIndexed Job may say
# `parallelism: 2147483647`, and nothing downstream may expand that per pod.
MAX_WORKLOAD_PODS = 100_000
MAX_POD_GPUS = 1024
MAX_POD_GROUPS = 64  # (pods, GPUs each) groups of one workload: far more than any template set

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def clip_utf8(text: str, budget: int) -> str:
    """`text` cut to at most `budget` UTF-8 bytes, never inside a character."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= budget:
        return text
    return data[:budget].decode("utf-8", errors="ignore")


def tenant_text(text: str | None, budget: int) -> str | None:
    """Free text from the cluster (a pod's reason and message, a container's
    termination message) as events carry it: control characters escaped
    (`muster.core.printable`), then cut to `budget` bytes. Applied where the agent
    builds an event and again where the control plane reads one."""
    return None if text is None else clip_utf8(printable(text), budget)


def check_name(value: str, field: str, *, label: bool = False) -> str:
    """A Kubernetes object name (DNS-1123 subdomain, or label for a namespace)."""
    limit, pattern, what = (
        (NAMESPACE_BYTES, _LABEL, "a DNS-1123 label (lower-case a-z, 0-9, '-')")
        if label
        else (NAME_BYTES, _SUBDOMAIN, "a DNS-1123 subdomain (lower-case a-z, 0-9, '-', '.')")
    )
    if len(value.encode()) > limit:
        raise InvalidEvent(f"{field}: longer than {limit} bytes, Kubernetes' limit")
    if not pattern.fullmatch(value):
        raise InvalidEvent(f"{field}: {value!r} is not {what}")
    return value


def check_workload_key(key: str, field: str = "workload") -> str:
    """'namespace/name' (a Job) or 'namespace/name@kind' (`muster.core.keys`), both parts
    valid Kubernetes names (no '../x', no 'x?dryRun=All') and the marker a kind's."""
    try:
        namespace, name, _ = parse_workload_key(key)
    except ValueError as exc:
        raise InvalidEvent(f"{field}: {exc}, got {key!r}") from None
    check_name(namespace, f"{field} (namespace)", label=True)
    check_name(name, f"{field} (name)")
    if canonical_key(key) != key:
        raise InvalidEvent(f"{field}: the kind's marker is lower case, got {key!r}")
    return key


def check_key_kind(key: str, kind: Kind, field: str = "workload") -> str:
    """A workload event's key names its kind: a JobSet's `ns/x@jobset` never comes as a
    Job's (or the reverse). A key without a marker is accepted for every kind, as older
    agents send it."""
    _, _, named = parse_workload_key(key)
    if named is not Kind.JOB and named is not kind:
        raise InvalidEvent(f"{field}: {key!r} is the key of a {named.value}, not of a {kind.value}")
    return key


def _label_value(value: str, field: str) -> str:
    if len(value.encode()) > LABEL_VALUE_BYTES or not _LABEL_VALUE.fullmatch(value):
        raise InvalidEvent(
            f"{field}: {value!r} is not a Kubernetes label value "
            f"(at most {LABEL_VALUE_BYTES} of A-Z, a-z, 0-9, '-', '_', '.')"
        )
    return value


# --------------------------------------------------------------------------- building


def workload_detail(
    *,
    cluster: str,
    workload: str,
    kind: Kind | str,
    queue: str,
    gang_size: int,
    seq: int,
    gpus: int = 0,
    priority: int = 0,
    created_at: datetime | None = None,
    timeout: str | None = None,
    status: str = "Active",
    observed_at: datetime | None = None,
    uid: str = "",
    priority_class: str | None = None,
    class_priority: int | None = None,
    shape: tuple[tuple[int, int], ...] = (),
    placement: str = "",
    topology: str = "",
) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "cluster": cluster,
        "observedAt": _iso(observed_at),
        "seq": seq,
        "workload": workload,
        "uid": uid,
        "kind": str(Kind(kind)),
        "queue": queue,
        "gangSize": gang_size,
        "gpus": gpus,
        "priority": priority,
        "createdAt": _iso(created_at),
        "status": status,
    }
    if timeout is not None:
        detail["timeout"] = timeout
    if priority_class is not None:
        detail["priorityClass"] = priority_class
        if class_priority is not None:
            detail["priorityClassValue"] = class_priority
    if shape:
        detail["podGpus"] = [{"pods": n, "gpus": g} for n, g in shape]
    if placement:
        detail["placement"] = placement
    if topology:
        detail["topology"] = topology
    return detail


def pod_detail(
    *,
    cluster: str,
    workload: str,
    pod: str,
    seq: int,
    uid: str = "",
    phase: str = "Pending",
    ready: bool = False,
    node: str | None = None,
    deleted: bool = False,
    reason: str | None = None,
    message: str | None = None,
    observed_at: datetime | None = None,
    scheduled: bool | None = None,
    waiting: str | None = None,
    restarts: int = 0,
    terminated: str | None = None,
    exit_code: int | None = None,
    owner: str = "",
) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "cluster": cluster,
        "observedAt": _iso(observed_at),
        "seq": seq,
        "workload": workload,
        "pod": pod,
        "uid": uid,
        "phase": phase,
        "ready": ready,
        "node": node,
        "deleted": deleted,
        "reason": tenant_text(reason, REASON_BYTES),
        "message": tenant_text(message, MESSAGE_BYTES),
    }
    # What tells a broken job from a busy cluster; left out when the agent saw nothing.
    if scheduled is not None:
        detail["scheduled"] = scheduled
    if waiting is not None:
        detail["waiting"] = tenant_text(waiting, REASON_BYTES)
    if restarts:
        detail["restarts"] = restarts
    if terminated is not None:
        detail["terminated"] = tenant_text(terminated, REASON_BYTES)
    if exit_code is not None:
        detail["exitCode"] = exit_code
    if owner:
        # The uid of the workload object the pod belongs to: a re-created object's
        # pods are told from its predecessor's still terminating ones.
        detail["owner"] = owner
    return detail


def node_detail(
    *,
    cluster: str,
    node: str,
    seq: int,
    ready: bool = True,
    health: str | None = None,
    gpus: int | None = None,
    unschedulable: str | None = None,
    foreign_gpus: int = 0,
    observed_at: datetime | None = None,
    topology: Topology = (),
) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "cluster": cluster,
        "observedAt": _iso(observed_at),
        "seq": seq,
        "node": node,
        "ready": ready,
        "health": health,
    }
    if gpus is not None:
        detail["gpus"] = gpus
        detail["schedulable"] = unschedulable is None
        detail["unschedulable"] = tenant_text(unschedulable or None, REASON_BYTES)
        detail["foreignGpus"] = foreign_gpus
        if topology:
            detail["topology"] = dict(topology)
    return detail


def snapshot_details(
    *,
    cluster: str,
    scope: str,
    revision: int,
    snapshot: str,
    workloads: Mapping[str, str] | None = None,
    pods: Mapping[str, Mapping[str, str]] | None = None,
    observed_at: datetime | None = None,
    max_bytes: int = MAX_SNAPSHOT_PART_BYTES,
) -> list[dict[str, Any]]:
    """A snapshot of `scope` at `revision` as `Cluster Snapshot` details, each under `max_bytes`.

    `workloads` (key -> uid) for a workload kind; `pods` (workload -> pod -> uid)
    for `Pod`. A large workload's pods may span parts; the control plane merges
    them once every part has arrived.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
    items: list[tuple[str, str, str]] = (
        [
            (w, p, u)
            for w, members in sorted((pods or {}).items())
            for p, u in sorted(members.items())
        ]
        if scope == POD_SCOPE
        else [(w, "", u) for w, u in sorted((workloads or {}).items())]
    )
    budget = max_bytes - 1024  # the fixed fields
    chunks: list[list[tuple[str, str, str]]] = [[]]
    size = 0
    for item in items:
        cost = len(json.dumps(list(item))) + 8
        if chunks[-1] and size + cost > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += cost
    details = []
    for number, chunk in enumerate(chunks, start=1):
        listed_pods: dict[str, dict[str, str]] = {}
        listed: dict[str, str] = {}
        for w, p, u in chunk:
            if scope == POD_SCOPE:
                listed_pods.setdefault(w, {})[p] = u
            else:
                listed[w] = u
        details.append(
            {
                "schemaVersion": SCHEMA_VERSION,
                "cluster": cluster,
                "observedAt": _iso(observed_at),
                "seq": revision,
                "snapshot": snapshot,
                "part": number,
                "parts": len(chunks),
                "scope": scope,
                "workloads": listed,
                "pods": listed_pods,
            }
        )
    return details


def _iso(when: datetime | None) -> str:
    return (when or datetime.now(UTC)).astimezone(UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- validating


def parse_agent_event(envelope: Mapping[str, Any]) -> tuple[str, Event | SnapshotPart]:
    """(cluster, core event) from an EventBridge event of the agent's."""
    if not isinstance(envelope, Mapping):
        raise InvalidEvent(f"event must be a JSON object, got {type(envelope).__name__}")
    source = envelope.get("source")
    if source != AGENT_SOURCE:
        raise InvalidEvent(f"source: expected {AGENT_SOURCE!r}, got {source!r}")
    detail_type = envelope.get("detail-type")
    detail = envelope.get("detail")
    if not isinstance(detail, Mapping):
        raise InvalidEvent("detail: must be a JSON object")
    return parse_agent_detail(detail_type, detail)


def parse_agent_detail(
    detail_type: object, detail: Mapping[str, Any]
) -> tuple[str, Event | SnapshotPart]:
    """(cluster, core event) from an agent's detail; `InvalidEvent` names every wrong field."""
    with collecting(InvalidEvent):
        version = detail.get("schemaVersion")
        if version != SCHEMA_VERSION:
            raise InvalidEvent(f"schemaVersion: expected {SCHEMA_VERSION}, got {version!r}")
        cluster = checked("", text, detail, "cluster")
        if len(cluster.encode()) > CLUSTER_BYTES:
            problem(f"cluster: longer than {CLUSTER_BYTES} bytes")
        seq = whole_number(detail, "seq", 0, minimum=0, required=True)
        if detail_type == WORKLOAD_OBSERVED:
            event: Event | SnapshotPart = _workload_event(detail, seq)
        elif detail_type == POD_OBSERVED:
            event = _pod_event(detail, seq)
        elif detail_type == NODE_OBSERVED:
            health = checked(None, text, detail, "health", required=False)
            capacity: dict[str, Any] = {}
            if detail.get("gpus") is not None:
                why = checked(None, text, detail, "unschedulable", required=False)
                capacity = {
                    "gpus": whole_number(detail, "gpus", 0, minimum=0),
                    "schedulable": boolean(detail, "schedulable", None),
                    "unschedulable": tenant_text(why, REASON_BYTES),
                    "foreign_gpus": whole_number(detail, "foreignGpus", 0, minimum=0),
                    "topology": checked(NO_TOPOLOGY, event_topology, detail.get("topology")),
                }
            event = NodeObserved(
                node=checked("", lambda: check_name(text(detail, "node"), "node")),
                ready=boolean(detail, "ready", None),
                health=checked(None, _label_value, health, "health") if health else None,
                seq=seq,
                **capacity,
            )
        elif detail_type == CLUSTER_SNAPSHOT:
            event = _snapshot_part(detail, seq)
        else:
            raise InvalidEvent(
                f"detail-type: expected one of {', '.join(AGENT_DETAIL_TYPES)}, got {detail_type!r}"
            )
    return cluster, event


def _pod_event(detail: Mapping[str, Any], seq: int) -> PodObserved:
    checked("", lambda: one_of(text(detail, "phase"), POD_PHASES, "phase"))
    uid = _uid(detail, "uid")
    owner = _uid(detail, "owner")  # optional: older agents do not send it
    node = checked(None, text, detail, "node", required=False)
    reason = checked(None, text, detail, "reason", required=False)
    message = checked(None, text, detail, "message", required=False)
    # Optional (older agents do not send them): what Kubernetes says about the pod.
    scheduled = detail.get("scheduled")
    if scheduled is not None and not isinstance(scheduled, bool):
        problem(f"scheduled: expected true, false or null, got {scheduled!r}")
        scheduled = None
    waiting = checked(None, text, detail, "waiting", required=False)
    terminated = checked(None, text, detail, "terminated", required=False)
    restarts = whole_number(detail, "restarts", 0, minimum=0, maximum=INT32[1])
    exit_code = whole_number(detail, "exitCode", None, minimum=INT32[0], maximum=INT32[1])
    return PodObserved(
        workload=checked("", _workload_key, detail),
        pod=checked("", lambda: check_name(text(detail, "pod"), "pod")),
        seq=seq,
        uid=uid,
        phase=str(detail.get("phase")),
        ready=boolean(detail, "ready", None),
        node=checked(None, check_name, node, "node") if node is not None else None,
        deleted=boolean(detail, "deleted", False),
        reason=tenant_text(reason, REASON_BYTES),
        message=tenant_text(message, MESSAGE_BYTES),
        scheduled=scheduled,
        waiting=tenant_text(waiting, REASON_BYTES),
        restarts=restarts,
        terminated=tenant_text(terminated, REASON_BYTES),
        exit_code=exit_code,
        owner=owner,
    )


def _uid(detail: Mapping[str, Any], field: str) -> str:
    """An optional object uid ("" when absent)."""
    uid = checked("", text, detail, field, required=False) or ""
    if len(uid.encode()) > UID_BYTES:
        problem(f"{field}: {uid[:40]!r} is not an object uid (at most {UID_BYTES} bytes)")
    return uid


def _snapshot_part(detail: Mapping[str, Any], seq: int) -> SnapshotPart:
    scope = checked("", lambda: one_of(text(detail, "scope"), SCOPES, "scope"))
    part = whole_number(detail, "part", 1, minimum=1, required=True)
    parts = whole_number(detail, "parts", part, minimum=part, required=True)
    workloads: dict[str, str] = checked({}, _names, detail.get("workloads"), "workloads")
    pods_doc = detail.get("pods")
    pods: dict[str, dict[str, str]] = {}
    if not isinstance(pods_doc, Mapping):
        problem("pods: expected an object of workload -> {pod: uid}")
    else:
        pods = {str(k): checked({}, _names, v, f"pods.{k}") for k, v in pods_doc.items()}
    snapshot = checked("", text, detail, "snapshot")
    return SnapshotPart(snapshot, part, parts, scope, seq, workloads, pods)


def _names(value: object, field: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidEvent(f"{field}: expected an object of name -> uid strings")
    return dict(value)


def _workload_event(detail: Mapping[str, Any], seq: int) -> Event:
    key = checked("", _workload_key, detail)
    status = checked("", lambda: one_of(text(detail, "status"), WORKLOAD_STATUSES, "status"))
    uid = checked("", text, detail, "uid", required=False) or ""
    if status and status != "Active":
        return WorkloadFinished(key, Reason(status), seq, uid=uid)
    kinds = [k.value for k in Kind]
    kind = checked(Kind.JOB, lambda: Kind(one_of(text(detail, "kind"), kinds, "kind")))
    if key:
        checked("", check_key_kind, key, kind)
    override = duration(detail, "timeout", 0.0, maximum=within_runtime, null_is_default=True)
    priority_class = checked(None, text, detail, "priorityClass", required=False)
    class_priority = None
    if priority_class is not None:
        if not PRIORITY_CLASS_NAME.match(priority_class):
            problem(
                f"priorityClass: expected a Kubernetes name (at most 253 characters: "
                f"a-z, 0-9, '-', '.'), got {priority_class!r}"
            )
        class_priority = whole_number(
            detail, "priorityClassValue", None, minimum=INT32[0], maximum=INT32[1]
        )
    elif detail.get("priorityClassValue") is not None:
        problem("priorityClassValue: only with priorityClass")
    return WorkloadObserved(
        workload=key,
        queue=checked("", lambda: _label_value(text(detail, "queue"), "queue")),
        gang_size=whole_number(
            detail, "gangSize", 1, minimum=1, maximum=MAX_WORKLOAD_PODS, required=True
        ),
        gpus=whole_number(detail, "gpus", 0, minimum=0, maximum=MAX_WORKLOAD_PODS * MAX_POD_GPUS),
        priority=whole_number(detail, "priority", 0),
        kind=kind,
        created_at=checked(0.0, lambda: parse_time(text(detail, "createdAt"), "createdAt")),
        timeout_override=override
        if "timeout" in detail and detail["timeout"] is not None
        else None,
        seq=seq,
        uid=uid,
        priority_class=priority_class,
        class_priority=class_priority,
        shape=_pod_gpus(detail.get("podGpus")),
        placement=clip_utf8(
            checked(None, text, detail, "placement", required=False) or "", REASON_BYTES
        ),
        topology=checked("", event_request, detail.get("topology")),
    )


def _pod_gpus(value: object) -> tuple[tuple[int, int], ...]:
    """`podGpus`: a list of {pods, gpus} groups (absent: unknown)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_POD_GROUPS:
        problem(f"podGpus: expected a list of at most {MAX_POD_GROUPS} {{pods, gpus}} objects")
        return ()
    groups = []
    for i, group in enumerate(value):
        if not isinstance(group, Mapping):
            problem(f"podGpus[{i}]: expected an object with pods and gpus")
            continue
        path = f"podGpus[{i}]."
        groups.append(
            (
                whole_number(
                    group, "pods", 1, path, minimum=1, maximum=MAX_WORKLOAD_PODS, required=True
                ),
                whole_number(
                    group, "gpus", 0, path, minimum=0, maximum=MAX_POD_GPUS, required=True
                ),
            )
        )
    if sum(n for n, _ in groups) > MAX_WORKLOAD_PODS:
        problem(f"podGpus: more than {MAX_WORKLOAD_PODS} pods in all")
    return tuple(groups)


def parse_time(stamp: str, field: str = "time") -> float:
    """Epoch seconds from an RFC 3339 timestamp."""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidEvent(f"{field}: not an RFC 3339 timestamp: {stamp!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _workload_key(detail: Mapping[str, Any]) -> str:
    return check_workload_key(text(detail, "workload"))
