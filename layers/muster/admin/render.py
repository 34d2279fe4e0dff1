"""The commands' text: tables, times, the status and describe views, annotated settings.

Everything here turns a view (a plain mapping from `muster.runtime.views` or the
settings) into text; nothing reads AWS. A view holds tenant text (a container's
termination message, an API server's error): every line and table cell goes out
through `printable`, so a control character in it is shown, never obeyed, and a
newline in a field cannot start a line of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from muster.core import Phase
from muster.core.decide import INADMISSIBLE
from muster.core.printable import printable

PHASE_ORDER = [p.value for p in Phase]


def format_status(doc: Mapping[str, Any], *, include_finished: bool = False) -> str:
    """Workloads by queue and phase, counts per queue, and who holds admission."""
    lines = [f"Cluster {doc.get('cluster', '?')}"]
    lines += workload_lines(doc, include_finished)
    lines += queue_count_lines(doc)
    lines += quarantined_lines(doc)
    lines += admission_lines(doc)
    return text_of(lines)


def workload_lines(doc: Mapping[str, Any], include_finished: bool) -> list[str]:
    """One row per workload, by queue then phase, with a word on the two counts if it matters."""
    rows: list[dict[str, Any]] = [
        w
        for phase in PHASE_ORDER
        for w in doc["phases"].get(phase, [])
        if include_finished or phase != Phase.FINISHED.value
    ]
    if not rows:
        return ["", "No workloads" + ("" if include_finished else " (besides finished ones)")]
    rows.sort(key=lambda w: (w["queue"], PHASE_ORDER.index(w["phase"]), w["workload"]))
    lines = [""]
    lines += table(
        ["WORKLOAD", "QUEUE", "PHASE", "ATTEMPT", "REQUEUES", "READY", "EVICTIONS", "REASON"],
        [
            [
                w["workload"],
                w["queue"],
                w["phase"],
                str(w["attempt"]),
                str(w["requeueCount"]),
                f"{w['readyPods']}/{w['gangSize']}",
                str(w.get("evictions", 0)),
                status_reason(w),
            ]
            for w in rows
        ],
    )
    if any(w["phase"] == Phase.DEACTIVATED.value for w in rows):
        lines += [
            "",
            "REQUEUES counts requeues since the workload was last activated, as Kueue "
            "does (deactivation resets it); EVICTIONS counts every eviction it had.",
        ]
    return lines


def queue_count_lines(doc: Mapping[str, Any]) -> list[str]:
    """How many workloads each queue has in each phase, and all of them together."""
    queues = sorted({w["queue"] for p in doc["phases"].values() for w in p})
    if not queues:
        return []
    counts = [
        [q, *(str(sum(w["queue"] == q for w in doc["phases"].get(p, []))) for p in PHASE_ORDER)]
        for q in queues
    ]
    totals = ["all", *(str(doc["counts"].get(p, 0)) for p in PHASE_ORDER)]
    return ["", *table(["QUEUE", *PHASE_ORDER], [*counts, totals])]


def quarantined_lines(doc: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for q in doc.get("quarantined") or []:
        lines.append("")
        lines.append(
            f"QUARANTINED: {q['workload']} after {q['tries']} failed tries ({q['error']}); "
            f"fix the cause, then: muster release {q['workload']}"
        )
    return lines


def admission_lines(doc: Mapping[str, Any]) -> list[str]:
    """Who holds admission, what blockAdmission waits for, and the planner's outlook."""
    admitted = doc.get("admitted") or []
    lines = [
        "",
        "Admission held by: " + (", ".join(admitted) if admitted else "nobody (all quota free)"),
    ]
    outlook = doc.get("admission") or {}
    blocker = outlook.get("blockedBy") or (
        outlook.get("notReady") if doc.get("blockAdmission") else None
    )
    if blocker:
        lines.append(f"blockAdmission: no admission until {blocker} is PodsReady")
    elif doc.get("blockAdmission"):
        lines.append(
            "blockAdmission: on; every admitted workload is PodsReady, so it blocks nothing now"
        )
    if outlook.get("admissible"):
        lines.append(
            "Admissible now (the next admission pass admits): " + ", ".join(outlook["admissible"])
        )
    for key, why in sorted((outlook.get("waiting") or {}).items()):
        lines.append(f"Waiting: {key}: {why}")
    for key, why in sorted((outlook.get("unchecked") or {}).items()):
        lines.append(f"Unchecked: {key}: {why}")
    return lines


def status_reason(w: Mapping[str, Any]) -> str:
    reason = w.get("reason") or ""
    if w.get("quarantined"):
        return f"Quarantined ({reason})" if reason else "Quarantined"
    if w["phase"] == Phase.REQUEUED.value and w.get("requeueAt"):
        reason = f"{reason} (back in queue at {clock(w['requeueAt'])})".strip()
    elif w["phase"] in (Phase.ADMITTED.value, Phase.RECOVERING.value) and w.get("deadline"):
        reason = f"{reason} (deadline {clock(w['deadline'])})".strip()
    return reason


def format_describe(doc: Mapping[str, Any]) -> str:
    """The workload's state and history, readable: "why was my job evicted?"."""
    lines = state_lines(doc)
    lines += quarantine_detail_lines(doc)
    lines += eviction_lines(doc)
    lines += not_ready_lines(doc)
    lines += history_lines(doc["history"])
    return text_of(lines)


def text_of(lines: Sequence[str]) -> str:
    """The lines as printed text: one line each, whatever their fields hold."""
    return "".join(printable(line) + "\n" for line in lines)


def state_lines(doc: Mapping[str, Any]) -> list[str]:
    lines = [
        f"Workload {doc['workload']}",
        f"  queue      {doc['queue']}",
        f"  phase      {doc['phase']}" + reason_text(doc),
        f"  attempt    {doc['attempt']}",
        f"  requeues   {doc['requeueCount']}"
        + (f" (back in queue at {timestamp(doc['requeueAt'])})" if doc.get("requeueAt") else ""),
        f"  ready      {doc['readyPods']}/{doc['gangSize']} pods",
    ]
    if doc.get("gpus"):
        lines.append(f"  gpus       {doc['gpus']}")
    if doc.get("deadline"):
        lines.append(f"  deadline   {timestamp(doc['deadline'])}")
    if doc.get("topology"):
        lines.append(f"  topology   {doc['topology']}")
        if doc.get("domain"):
            active = doc["phase"] in (Phase.ADMITTED, Phase.RUNNING, Phase.RECOVERING)
            lines.append(f"  {'placed in ' if active else 'last in   '} {doc['domain']}")
    if doc.get("waiting"):
        lines.append(f"  waiting    {doc['waiting']}")
    return lines


def quarantine_detail_lines(doc: Mapping[str, Any]) -> list[str]:
    quarantine = doc.get("quarantine")
    if not quarantine:
        return []
    return [
        "",
        f"QUARANTINED since {timestamp(quarantine['since'])} after {quarantine['tries']} failed "
        "tries; nothing is done for it until it is released:",
        f"  {quarantine['error']}",
        "  effects waiting: " + (", ".join(doc.get("pendingEffects") or []) or "none"),
        f"  fix the cause, then: muster release {doc['workload']}",
    ]


def eviction_lines(doc: Mapping[str, Any]) -> list[str]:
    """Why the workload was last evicted, and how often it was evicted for each reason."""
    lines: list[str] = []
    why = last_eviction(doc["history"])
    if why:
        lines += ["", "Why it was last evicted:", *(f"  {line}" for line in why)]
    evictions = doc.get("evictions") or {}
    if evictions:
        lines += ["", "Evictions:"]
        lines += [f"  {label:<32} {n}" for label, n in sorted(evictions.items())]
    return lines


def not_ready_lines(doc: Mapping[str, Any]) -> list[str]:
    not_ready = doc.get("notReadyPods") or []
    if not not_ready:
        return []
    lines = ["", "Pods not ready now:"]
    now = doc.get("diagnosis") or {}
    if now.get("summary"):
        lines.append(f"  {now['summary']}")
    lines += [f"  {line}" for line in pod_table(not_ready)]
    return lines


def history_lines(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every history entry kept, with an eviction's diagnosis and the pods not ready."""
    lines = ["", "History:"]
    if not history:
        lines.append("  (none kept; history entries expire after the deployment's TTL)")
    for entry in history:
        lines.append(f"  {history_line(entry)}")
        detail = entry.get("detail") or {}
        summary = (detail.get("diagnosis") or {}).get("summary")
        if summary and entry["event"] == "Evicted":
            lines.append(f"      diagnosis: {summary}")
        for pod in detail.get("notReady") or []:
            lines.append(f"      not ready: {pod_line(pod)}")
    return lines


def reason_text(doc: Mapping[str, Any]) -> str:
    if not doc.get("reason"):
        return ""
    # A refusal by the administrator's rules says which rule; other reasons stand alone.
    refused = doc["reason"] == INADMISSIBLE and doc.get("message")
    return f" ({doc['reason']}: {doc['message']})" if refused else f" ({doc['reason']})"


def last_eviction(history: Sequence[Mapping[str, Any]]) -> list[str]:
    for entry in reversed(history):
        if entry["event"] != "Evicted":
            continue
        d = entry.get("detail") or {}
        cause = f" / {d['cause']}" if d.get("cause") else ""
        lines = [
            f"{timestamp(entry['at'])}, attempt {d.get('attempt', '?')}: "
            f"{d.get('reason', '?')}{cause}"
            + (
                f" (evicted early by workloadFaults.evictAfter, {d['timedOut']})"
                if d.get("evictedEarly")
                else f" (after a readiness timeout, {d['timedOut']})"
                if d.get("timedOut")
                else ""
            )
            + (" (dry run: nothing evicted)" if d.get("dryRun") else "")
        ]
        if "readyPods" in d:
            lines.append(f"{d['readyPods']} of {d.get('gangSize', '?')} pods were Ready")
        summary = (d.get("diagnosis") or {}).get("summary")
        if summary:
            lines.append(f"diagnosis: {summary}")
        if d.get("error"):
            lines.append(f"the API server refused to release it: {d['error']}")
        if d.get("node"):
            lines.append(f"node {d['node']} was lost or marked for replacement")
        pods = d.get("notReady") or []
        if pods:
            lines.append("not ready:")
            lines += [f"  {pod_line(p)}" for p in pods]
        return lines
    return []


def history_line(entry: Mapping[str, Any]) -> str:
    d = dict(entry.get("detail") or {})
    parts = [f"{timestamp(entry['at'])}  {entry['event']:<16}"]
    for key in ("attempt", "reason", "cause", "count"):
        if d.get(key) is not None:
            parts.append(f"{key}={d[key]}")
    if d.get("requeueAt") is not None:
        parts.append(f"requeueAt={timestamp(d['requeueAt'])}")
    if d.get("readyPods") is not None and d.get("gangSize") is not None:
        parts.append(f"ready={d['readyPods']}/{d['gangSize']}")
    if d.get("node"):
        parts.append(f"node={d['node']}")
    if d.get("topology"):
        parts.append(f"domain={d.get('domain') or 'anywhere'}")
    if d.get("topologyIgnored"):
        parts.append(f"(topology ignored: {d['topologyIgnored']})")
    if d.get("dryRun"):
        parts.append("dryRun")
    return " ".join(parts).rstrip()


def pod_line(pod: Any) -> str:
    if not isinstance(pod, Mapping):
        return str(pod)
    phase = pod.get("phase") or "?"
    if phase == "Running":
        phase = "Running but not Ready"
    text = f"{pod.get('pod')} on {pod.get('node') or '(unscheduled)'}: {phase}"
    if pod.get("reason"):
        text += f", {pod['reason']}"
    if pod.get("message"):
        text += f": {pod['message']}"
    health = [str(pod["class"])] if pod.get("class") else []
    if pod.get("terminated"):
        health.append(str(pod["terminated"]))
    if pod.get("exitCode") is not None:
        health.append(f"exit code {pod['exitCode']}")
    if pod.get("restarts"):
        health.append(f"{pod['restarts']} restarts")
    if health:
        text += f" [{', '.join(health)}]"
    return text


def pod_table(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    return table(
        ["POD", "NODE", "PHASE", "CLASS", "REASON", "EXIT", "RESTARTS", "MESSAGE"],
        [
            [
                str(p.get("pod")),
                p.get("node") or "-",
                p.get("phase") or "-",
                p.get("class") or "-",
                p.get("reason") or "-",
                str(p["exitCode"]) if p.get("exitCode") is not None else "-",
                str(p.get("restarts") or 0),
                p.get("message") or "",
            ]
            for p in pods
        ],
    )


def ordered(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Oldest first: by time, then by the decision that wrote it."""
    return sorted((dict(h) for h in history), key=lambda h: (h["at"], h.get("version", 0)))


def annotated_yaml(
    doc: Mapping[str, Any], deployment: Mapping[str, Any], record: Mapping[str, Any]
) -> str:
    """The document as YAML, each value marked `runtime record`, `deployment` or `default`."""
    lines: list[str] = []

    def walk(node: Mapping[str, Any], path: tuple[str, ...], depth: int) -> None:
        for key in sorted(node):
            value = node[key]
            here = (*path, key)
            pad = "  " * depth
            if isinstance(value, Mapping) and value:
                lines.append(f"{pad}{key}:")
                walk(value, here, depth + 1)
            else:
                source = (
                    "runtime record"
                    if has_path(record, here)
                    else "deployment"
                    if has_path(deployment, here)
                    else "default"
                )
                lines.append(f"{pad}{key}: {scalar(value)}  # {source}")

    walk(doc, (), 0)
    return "\n".join(lines) + "\n"


def has_path(doc: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = doc
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def scalar(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    return yaml.safe_dump([value], default_flow_style=True, width=1 << 16).strip()[1:-1]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    cells = [[printable(str(cell)) for cell in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def timestamp(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return str(epoch)
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clock(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return str(epoch)
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%SZ")
