"""The administrator's commands: `status`, `describe`, `settings`, `reactivate`.

They work against a deployed stack: the stack's outputs name the ingest
function, and that function's environment names the table, the requeue queue
and the deployment's settings, so the commands read and write exactly what the
functions use. With `--endpoint` they talk to a local deployment (`muster local`,
or `python -m infra.deploy_local --serve`) instead of AWS.

Nothing here decides anything: views come from `muster.runtime.views`, settings
are validated by the core's parser, and `reactivate` goes through the same
`ControlPlane` as the Lambdas.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from muster.core import (
    ACTIVE_PHASES,
    Admit,
    Evict,
    Kind,
    Outcome,
    Phase,
    Reactivate,
    Settings,
    SettingsError,
    load_settings_text,
    merge_settings,
    plan_admission,
)
from muster.core.admission import Usage
from muster.core.decide import INADMISSIBLE
from muster.kueue import Imported, import_kueue, looks_like_kueue
from muster.runtime.ports import Conflict

# Stack output keys and the local stack's name; `infra.constants` holds the same
# names (a test checks they agree), but runtime code does not import infra.
OUT_INGEST_FUNCTION_NAME = "IngestFunctionName"
DEFAULT_STACK = "Muster"
LOCAL_STACK = "MusterLocal"
LOCAL_REGION = "us-east-1"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

PHASE_ORDER = [p.value for p in Phase]
SETTINGS_CONFLICT_RETRIES = 5


class AdminError(Exception):
    """A command cannot go on; the message says why, `exit_code` how it ends."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- the deployment


@dataclass(frozen=True)
class Deployment:
    """A deployed control plane as the functions see it."""

    stack: str
    session: Any  # boto3.session.Session
    config: Any  # muster.aws.config.RuntimeConfig
    function_name: str

    def store(self) -> Any:
        from muster.aws.dynamo import DynamoStore

        c = self.config
        return DynamoStore(
            self.session.client("dynamodb"), c.table_name, c.cluster_name, c.history_ttl_days
        )

    def base_settings(self) -> Settings:
        from muster.runtime.settings import settings_from_json

        return settings_from_json(
            self.config.settings_json, f"MUSTER_SETTINGS of {self.function_name}"
        )

    def messages(self) -> Any:
        from muster.aws.sqs import SqsMessages

        return SqsMessages(self.session.client("sqs"), self.config.requeue_queue_url)


def use_endpoint(endpoint: str, region: str | None) -> None:
    """Point boto3 in this process at a local endpoint, with the emulator's dummy credentials."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    os.environ.setdefault("AWS_DEFAULT_REGION", region or LOCAL_REGION)


def connect(stack: str | None, region: str | None, endpoint: str | None) -> Deployment:
    """Find the runtime configuration from the stack's outputs and its ingest function."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from muster.aws.config import ConfigError, RuntimeConfig

    if endpoint:
        use_endpoint(endpoint, region)
    name = stack or (LOCAL_STACK if endpoint else DEFAULT_STACK)
    session = boto3.session.Session(region_name=region or (LOCAL_REGION if endpoint else None))
    where = f"at {endpoint}" if endpoint else f"in {session.region_name or 'the default region'}"
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
        function = outputs.get(OUT_INGEST_FUNCTION_NAME)
        if not function:
            raise AdminError(
                f"stack {name} {where} has no output {OUT_INGEST_FUNCTION_NAME}; "
                f"is it a Muster stack? (outputs: {', '.join(sorted(outputs)) or 'none'})"
            )
        reply = session.client("lambda").get_function_configuration(FunctionName=function)
    except NoCredentialsError:
        raise AdminError(
            "no AWS credentials: configure a profile (AWS_PROFILE) or give --endpoint "
            "for a local deployment"
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if "does not exist" in str(error.get("Message", "")):
            raise AdminError(
                f"no stack named {name} {where}; choose it with --stack"
                + ("" if endpoint else " (and --region)")
            ) from None
        raise AdminError(f"reading stack {name} {where}: {error.get('Message', exc)}") from None
    except BotoCoreError as exc:
        raise AdminError(f"reading stack {name} {where}: {exc}") from None
    env = reply.get("Environment", {}).get("Variables", {})
    try:
        config = RuntimeConfig.from_env(env)
    except ConfigError as exc:
        raise AdminError(f"the environment of function {function}: {exc}") from None
    return Deployment(name, session, config, function)


# --------------------------------------------------------------------------- status


def status_command(args: argparse.Namespace, out: TextIO) -> int:
    from muster.runtime.views import status

    deployment = _connect(args)
    store = deployment.store()
    doc = status(store)
    _fill_ready_counts(store, doc)
    doc["cluster"] = deployment.config.cluster_name
    settings = _effective(deployment, store)
    doc["blockAdmission"] = settings.block_admission
    doc["capacityCheck"] = settings.capacity_check
    doc["admission"] = admission_outlook(store, settings)
    if args.json:
        out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        out.write(format_status(doc, include_finished=args.all))
    return EXIT_OK


def admission_outlook(store: Any, settings: Settings) -> dict[str, Any]:
    """What the core's admission planner would do now: who is admissible, who waits and why."""
    active = [w for p in ACTIVE_PHASES for w in store.by_phase(p.value)]
    nodes = None
    if settings.capacity_check:
        # Where the active gangs' pods are bound, for the capacity check.
        nodes = store.nodes()
        loaded = [store.load(w.key) for w in active]
        active = [snap.workload if snap else w for w, snap in zip(active, loaded, strict=True)]
    plan = plan_admission(store.pending(), active, settings, time.time(), nodes=nodes)
    return {
        "admissible": list(plan.admit),
        "blockedBy": plan.blocked_by,
        "waiting": plan.skipped,
        # Workloads the capacity check cannot judge (admitted on quota alone), and why.
        "unchecked": dict(plan.unchecked),
        # The admitted workload not yet PodsReady that blockAdmission waits for, whether
        # or not anyone is queued behind it (the planner names it only when someone is).
        "notReady": Usage.of(active).blocker,
    }


def _fill_ready_counts(store: Any, doc: dict[str, Any]) -> None:
    """The phase index holds workload items without their pods: read each active gang's count."""
    for phase in (Phase.ADMITTED, Phase.RUNNING, Phase.RECOVERING):
        for w in doc["phases"].get(phase.value, []):
            light = store.load_pod(w["workload"], None)
            if light is not None:
                w["readyPods"] = light.ready_count


def format_status(doc: Mapping[str, Any], *, include_finished: bool = False) -> str:
    """Workloads by queue and phase, counts per queue, and who holds admission."""
    rows: list[dict[str, Any]] = [
        w
        for phase in PHASE_ORDER
        for w in doc["phases"].get(phase, [])
        if include_finished or phase != Phase.FINISHED.value
    ]
    rows.sort(key=lambda w: (w["queue"], PHASE_ORDER.index(w["phase"]), w["workload"]))
    lines = [f"Cluster {doc.get('cluster', '?')}"]
    if rows:
        lines.append("")
        lines += _table(
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
                    _status_reason(w),
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
    else:
        lines += ["", "No workloads" + ("" if include_finished else " (besides finished ones)")]
    queues = sorted({w["queue"] for p in doc["phases"].values() for w in p})
    if queues:
        counts = [
            [q, *(str(sum(w["queue"] == q for w in doc["phases"].get(p, []))) for p in PHASE_ORDER)]
            for q in queues
        ]
        totals = ["all", *(str(doc["counts"].get(p, 0)) for p in PHASE_ORDER)]
        lines += ["", *_table(["QUEUE", *PHASE_ORDER], [*counts, totals])]
    for q in doc.get("quarantined") or []:
        lines.append("")
        lines.append(
            f"QUARANTINED: {q['workload']} after {q['tries']} failed tries ({q['error']}); "
            f"fix the cause, then: muster release {q['workload']}"
        )
    admitted = doc.get("admitted") or []
    lines.append("")
    lines.append(
        "Admission held by: " + (", ".join(admitted) if admitted else "nobody (all quota free)")
    )
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
    return "\n".join(lines) + "\n"


def _status_reason(w: Mapping[str, Any]) -> str:
    reason = w.get("reason") or ""
    if w.get("quarantined"):
        return f"Quarantined ({reason})" if reason else "Quarantined"
    if w["phase"] == Phase.REQUEUED.value and w.get("requeueAt"):
        reason = f"{reason} (back in queue at {_clock(w['requeueAt'])})".strip()
    elif w["phase"] in (Phase.ADMITTED.value, Phase.RECOVERING.value) and w.get("deadline"):
        reason = f"{reason} (deadline {_clock(w['deadline'])})".strip()
    return reason


# --------------------------------------------------------------------------- describe


def describe_command(args: argparse.Namespace, out: TextIO) -> int:
    from muster.runtime.views import describe

    deployment = _connect(args)
    store = deployment.store()
    doc = describe(store, workload_key(store, args.workload))
    if doc is None:
        raise AdminError(
            f"no workload {args.workload} in cluster {deployment.config.cluster_name} "
            f"(workloads are named namespace/name; `muster status` lists them)"
        )
    doc["history"] = _ordered(doc["history"])
    if args.json:
        out.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    else:
        out.write(format_describe(doc))
    return EXIT_OK


def format_describe(doc: Mapping[str, Any]) -> str:
    """The workload's state and history, readable: "why was my job evicted?"."""
    lines = [
        f"Workload {doc['workload']}",
        f"  queue      {doc['queue']}",
        f"  phase      {doc['phase']}" + _reason_text(doc),
        f"  attempt    {doc['attempt']}",
        f"  requeues   {doc['requeueCount']}"
        + (f" (back in queue at {_time(doc['requeueAt'])})" if doc.get("requeueAt") else ""),
        f"  ready      {doc['readyPods']}/{doc['gangSize']} pods",
    ]
    if doc.get("gpus"):
        lines.append(f"  gpus       {doc['gpus']}")
    if doc.get("deadline"):
        lines.append(f"  deadline   {_time(doc['deadline'])}")
    quarantine = doc.get("quarantine")
    if quarantine:
        lines += [
            "",
            f"QUARANTINED since {_time(quarantine['since'])} after {quarantine['tries']} failed "
            "tries; nothing is done for it until it is released:",
            f"  {quarantine['error']}",
            "  effects waiting: " + (", ".join(doc.get("pendingEffects") or []) or "none"),
            f"  fix the cause, then: muster release {doc['workload']}",
        ]
    why = _last_eviction(doc["history"])
    if why:
        lines += ["", "Why it was last evicted:", *(f"  {line}" for line in why)]
    evictions = doc.get("evictions") or {}
    if evictions:
        lines += ["", "Evictions:"]
        lines += [f"  {label:<32} {n}" for label, n in sorted(evictions.items())]
    not_ready = doc.get("notReadyPods") or []
    if not_ready:
        lines += ["", "Pods not ready now:"]
        now = doc.get("diagnosis") or {}
        if now.get("summary"):
            lines.append(f"  {now['summary']}")
        lines += [f"  {line}" for line in _pod_table(not_ready)]
    lines += ["", "History:"]
    if doc["history"]:
        for entry in doc["history"]:
            lines.append(f"  {_history_line(entry)}")
            detail = entry.get("detail") or {}
            summary = (detail.get("diagnosis") or {}).get("summary")
            if summary and entry["event"] == "Evicted":
                lines.append(f"      diagnosis: {summary}")
            for pod in detail.get("notReady") or []:
                lines.append(f"      not ready: {_pod_line(pod)}")
    else:
        lines.append("  (none kept; history entries expire after the deployment's TTL)")
    return "\n".join(lines) + "\n"


def _reason_text(doc: Mapping[str, Any]) -> str:
    if not doc.get("reason"):
        return ""
    # A refusal by the administrator's rules says which rule; other reasons stand alone.
    refused = doc["reason"] == INADMISSIBLE and doc.get("message")
    return f" ({doc['reason']}: {doc['message']})" if refused else f" ({doc['reason']})"


def _last_eviction(history: Sequence[Mapping[str, Any]]) -> list[str]:
    for entry in reversed(history):
        if entry["event"] != "Evicted":
            continue
        d = entry.get("detail") or {}
        cause = f" / {d['cause']}" if d.get("cause") else ""
        lines = [
            f"{_time(entry['at'])}, attempt {d.get('attempt', '?')}: "
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
        if d.get("node"):
            lines.append(f"node {d['node']} was lost or marked for replacement")
        pods = d.get("notReady") or []
        if pods:
            lines.append("not ready:")
            lines += [f"  {_pod_line(p)}" for p in pods]
        return lines
    return []


def _history_line(entry: Mapping[str, Any]) -> str:
    d = dict(entry.get("detail") or {})
    parts = [f"{_time(entry['at'])}  {entry['event']:<16}"]
    for key in ("attempt", "reason", "cause", "count"):
        if d.get(key) is not None:
            parts.append(f"{key}={d[key]}")
    if d.get("requeueAt") is not None:
        parts.append(f"requeueAt={_time(d['requeueAt'])}")
    if d.get("readyPods") is not None and d.get("gangSize") is not None:
        parts.append(f"ready={d['readyPods']}/{d['gangSize']}")
    if d.get("node"):
        parts.append(f"node={d['node']}")
    if d.get("dryRun"):
        parts.append("dryRun")
    return " ".join(parts).rstrip()


def _pod_line(pod: Any) -> str:
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


def _pod_table(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    return _table(
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


def _ordered(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Oldest first: by time, then by the decision that wrote it."""
    return sorted((dict(h) for h in history), key=lambda h: (h["at"], h.get("version", 0)))


# --------------------------------------------------------------------------- settings


def settings_get_command(args: argparse.Namespace, out: TextIO) -> int:
    deployment = _connect(args)
    base = deployment.base_settings()
    deployment_doc = json.loads(deployment.config.settings_json or "{}")
    record = deployment.store().settings_record()
    record_doc, version = record if record else ({}, None)
    effective = merge_settings(base, record_doc) if record_doc else base
    if args.json:
        out.write(
            json.dumps(
                {
                    "effective": effective.to_dict(),
                    "deployment": deployment_doc,
                    "record": record_doc,
                    "recordVersion": version,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
        return EXIT_OK
    out.write(
        f"# Settings of cluster {deployment.config.cluster_name} (stack {deployment.stack})\n"
        f"# deployment: MUSTER_SETTINGS of function {deployment.function_name} (cdk.json muster:settings)\n"
        + (
            f"# runtime record: version {version}, set with `muster settings set`\n"
            if version is not None
            else "# runtime record: none (nothing changed since the deployment)\n"
        )
        + "# each value's source is in its comment\n"
    )
    out.write(annotated_yaml(effective.to_dict(), deployment_doc, record_doc))
    return EXIT_OK


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
                    if _has(record, here)
                    else "deployment"
                    if _has(deployment, here)
                    else "default"
                )
                lines.append(f"{pad}{key}: {_scalar(value)}  # {source}")

    walk(doc, (), 0)
    return "\n".join(lines) + "\n"


def _has(doc: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = doc
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def _scalar(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    return yaml.safe_dump([value], default_flow_style=True, width=1 << 16).strip()[1:-1]


def settings_set_command(args: argparse.Namespace, out: TextIO) -> int:
    from muster.runtime.settings import update_settings

    changes = settings_changes(args.file, args.assignments)
    deployment = _connect(args)
    store = deployment.store()
    base = deployment.base_settings()
    before = _effective(deployment, store)
    for _ in range(SETTINGS_CONFLICT_RETRIES):
        try:
            # update_settings validates the merged record with the core's parser
            # before it writes: a bad value raises here and nothing is written.
            after = _validate(lambda: update_settings(store, base, changes))
            break
        except Conflict:
            continue  # another administrator wrote meanwhile: merge into theirs
    else:
        raise AdminError("the settings record kept changing meanwhile; try again")
    # New settings may admit someone (a longer quota, blockAdmission off, ...).
    deployment.messages().request_admission("settings changed", None)
    changed = _diff(before.to_dict(), after.to_dict())
    record = store.settings_record()
    out.write(
        f"settings of cluster {deployment.config.cluster_name} updated"
        + (f" (runtime record version {record[1]})" if record else "")
        + "\n"
    )
    for path, old, new in changed:
        out.write(
            f"  {path}: {_scalar(old) if old is not None else '(unset)'} -> "
            f"{_scalar(new) if new is not None else '(unset)'}\n"
        )
    if not changed:
        out.write("  (the effective settings did not change)\n")
    out.write(
        "admission pass requested; the functions pick up the change within their "
        "settings cache time (10 s)\n"
    )
    return EXIT_OK


def settings_validate_command(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.file)
    text = _read_text(path)
    kueue = _read_kueue(text, path)
    if kueue is not None:
        out.write(
            f"{path}: read as a {kueue.source}; `muster settings import {path}` writes it "
            "as Muster's settings document\n"
        )
        text = json.dumps(kueue.settings)
    settings = _validate(lambda: load_settings_text(text, str(path)))
    out.write(f"{path}: valid; the settings it describes, with defaults filled in:\n")
    out.write(yaml.safe_dump(settings.to_dict(), sort_keys=True))
    return EXIT_OK


def settings_import_command(args: argparse.Namespace, out: TextIO) -> int:
    """Kueue's waitForPodsReady as Muster's settings document; what does not carry over on stderr."""
    path = Path(args.file)
    kueue = _read_kueue(_read_text(path), path, args.api_version, required=True)
    if kueue is None:  # pragma: no cover - required=True always imports or raises
        raise AdminError(f"{path}: not a Kueue configuration", EXIT_BAD_INPUT)
    document = (
        f"# Muster settings imported from {path} ({kueue.source}).\n"
        "# Kueue's defaults for that version are written out, so nothing depends on\n"
        "# Muster's own defaults. Check with: muster settings validate FILE\n"
        + yaml.safe_dump(kueue.settings, sort_keys=False)
    )
    if args.output:
        Path(args.output).write_text(document)
        print(f"muster settings import: wrote {args.output}", file=sys.stderr)
    else:
        out.write(document)
    return EXIT_OK


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise AdminError(f"{path}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None


def _read_kueue(
    text: str, path: Path, api_version: str | None = None, *, required: bool = False
) -> Imported | None:
    """The Kueue document in `text` imported (notes printed on stderr), or None if it is not one."""
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise AdminError(f"{path}: not valid YAML or JSON: {exc}", EXIT_BAD_INPUT) from None
    if not required and not looks_like_kueue(doc):
        return None
    try:
        imported = import_kueue(doc, api_version)
    except SettingsError as exc:
        raise AdminError(
            "invalid Kueue configuration, nothing written: "
            + _listed(exc.prefixed(str(path)).errors),
            EXIT_BAD_INPUT,
        ) from None
    for note in imported.notes:
        print(f"no equivalent: {note}", file=sys.stderr)
    return imported


def settings_changes(file: str | None, assignments: Sequence[str]) -> dict[str, Any]:
    """A partial settings document from a YAML/JSON file and `dotted.key=value` pairs."""
    changes: dict[str, Any] = {}
    if file:
        path = Path(file)
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise AdminError(f"{path}: {exc.strerror or exc}", EXIT_BAD_INPUT) from None
        except yaml.YAMLError as exc:
            raise AdminError(f"{path}: not valid YAML or JSON: {exc}", EXIT_BAD_INPUT) from None
        if not isinstance(doc, dict):
            raise AdminError(
                f"{path}: expected a mapping of settings, got {type(doc).__name__}", EXIT_BAD_INPUT
            )
        changes = doc
    for pair in assignments:
        key, sep, text = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise AdminError(
                f"{pair!r}: expected KEY=VALUE with a dotted key, e.g. "
                "requeuingStrategy.backoffLimitCount=3 or queues.spot.timeout=10m",
                EXIT_BAD_INPUT,
            )
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        node = changes
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise AdminError(
                    f"{'.'.join(parts[: i + 1])}: is a value, cannot set {key.strip()}",
                    EXIT_BAD_INPUT,
                )
            node = child
        node[parts[-1]] = value
    if not changes:
        raise AdminError(
            "nothing to set: give --file FILE or KEY=VALUE pairs (KEY=null resets a key "
            "to the deployment's value)",
            EXIT_BAD_INPUT,
        )
    return changes


def _validate(check: Callable[[], Settings]) -> Settings:
    try:
        return check()
    except SettingsError as exc:
        raise AdminError(
            f"invalid settings, nothing written: {_listed(exc.errors)}", EXIT_BAD_INPUT
        ) from None


def _listed(errors: Sequence[str]) -> str:
    """One error inline; several, one per line, so that each names its field."""
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} errors:" + "".join(f"\n  {e}" for e in errors)


def _diff(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) or isinstance(new, Mapping):
            out += _diff(
                old if isinstance(old, Mapping) else {},
                new if isinstance(new, Mapping) else {},
                f"{prefix}{key}.",
            )
        elif old != new:
            out.append((f"{prefix}{key}", old, new))
    return out


def _effective(deployment: Deployment, store: Any = None) -> Settings:
    """The settings the functions use now (deployment merged with the runtime record)."""
    from muster.runtime.settings import RuntimeSettings

    return RuntimeSettings(deployment.base_settings(), store or deployment.store())()


# --------------------------------------------------------------------------- reactivate


class ClusterCallRefused(RuntimeError):
    """The command line never acts on the cluster; the admission function does."""


class NoClusterAccess:
    """The cluster port for the command line: it refuses to admit or evict.

    A reactivation only returns the workload to the queue; the admission pass it
    requests runs in the admission function, which admits with the real cluster
    adapter. Muster's view on the workload object (`record`) is not written from
    here: the next function that acts on the workload writes it.
    """

    def __init__(self) -> None:
        self.skipped_views: list[str] = []

    def admit(self, effect: Admit) -> None:
        raise ClusterCallRefused(
            f"{effect.workload}: the command line does not admit workloads; "
            "the admission function does"
        )

    def evict(self, effect: Evict) -> None:
        raise ClusterCallRefused(
            f"{effect.workload}: the command line does not evict workloads; "
            "the control plane's functions do"
        )

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        self.skipped_views.append(workload)


class QuietMetrics:
    """No metrics from the command line (its outcomes are printed instead)."""

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        return None

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        return None


def reactivate_command(args: argparse.Namespace, out: TextIO) -> int:
    from muster.aws.wiring import build_control_plane

    deployment = _connect(args)
    cluster = NoClusterAccess()
    plane = build_control_plane(
        deployment.config, cluster=lambda _config: cluster, session=deployment.session
    )
    plane.metrics = QuietMetrics()
    key = workload_key(plane.store, args.workload)
    current = plane.store.load(key)
    if current is not None and current.quarantine is not None:
        raise AdminError(
            f"{key} is quarantined ({current.quarantine.error}); fix the cause and "
            f"`muster release {key}` first"
        )
    outcomes = plane.handle(Reactivate(key))
    outcome = outcomes[0] if outcomes else Outcome.IGNORED
    if outcome is Outcome.APPLIED:
        out.write(
            f"{key} reactivated: Pending again with its requeue count reset; "
            "admission requested (the admission function admits it when there is room)\n"
        )
        if cluster.skipped_views:
            out.write(
                "  its muster.io status on the cluster object still says Deactivated until "
                "the admission function admits it\n"
            )
        return EXIT_OK
    if outcome is Outcome.UNKNOWN_WORKLOAD:
        raise AdminError(f"no workload {key} in cluster {deployment.config.cluster_name}")
    snap = plane.store.load(key)
    phase = snap.workload.phase.value if snap else "unknown"
    raise AdminError(
        f"{key} is {phase}, not Deactivated; only a Deactivated workload can be reactivated"
    )


def release_command(args: argparse.Namespace, out: TextIO) -> int:
    """Lift a quarantine once its cause is fixed; the admission function tries its effects again."""
    deployment = _connect(args)
    store = deployment.store()
    key = workload_key(store, args.workload)
    snap = store.load(key)
    if snap is None:
        raise AdminError(f"no workload {key} in cluster {deployment.config.cluster_name}")
    if not store.release(key):
        raise AdminError(f"{key} is not quarantined (phase {snap.workload.phase.value})")
    deployment.messages().request_admission("released", key)
    pending = ", ".join(type(e).__name__ for e in snap.outbox) or "none"
    out.write(
        f"{key} released; the admission function carries out its waiting effects "
        f"({pending}) on its next pass, which was requested\n"
    )
    return EXIT_OK


# --------------------------------------------------------------------------- helpers


def _connect(args: argparse.Namespace) -> Deployment:
    return connect(args.stack, args.region, args.endpoint)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _time(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return str(epoch)
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _clock(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return str(epoch)
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%SZ")


def workload_key(store: Any, name: str) -> str:
    """`name` as given, or `default/name` when only that exists (kubectl's default namespace)."""
    if "/" in name or store.load(name) is not None:
        return name
    qualified = f"default/{name}"
    return qualified if store.load(qualified) is not None else name


# --------------------------------------------------------------------------- the command line


def register(subparsers: Any) -> None:
    target = argparse.ArgumentParser(add_help=False)
    where = target.add_argument_group("deployment")
    where.add_argument(
        "--stack",
        help=f"CloudFormation stack (default {DEFAULT_STACK}; {LOCAL_STACK} with --endpoint)",
    )
    where.add_argument("--region", help="AWS region (default: your AWS configuration's)")
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help="a local deployment's AWS endpoint, e.g. http://127.0.0.1:4566 (muster local --port)",
    )

    p = subparsers.add_parser(
        "status", parents=[target], help="workloads by phase and queue, and who holds admission"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", action="store_true", help="list finished workloads too")
    p.set_defaults(handler=reporting_handler(status_command))

    p = subparsers.add_parser(
        "describe",
        parents=[target],
        help="one workload's state and history: why was it evicted?",
    )
    p.add_argument("workload", help="namespace/name")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=reporting_handler(describe_command))

    p = subparsers.add_parser("settings", help="show, change or check the run-time settings")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    g = actions.add_parser(
        "get", parents=[target], help="effective settings as YAML, with where each comes from"
    )
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(handler=reporting_handler(settings_get_command))
    s = actions.add_parser(
        "set",
        parents=[target],
        help="change run-time settings (validated first), then ask for an admission pass",
        description=(
            "Merge changes into the cluster's run-time settings record. Values are YAML "
            "scalars; KEY=null resets a key to the deployment's value. Examples: "
            "timeout=10m  requeuingStrategy.backoffLimitCount=3  queues.spot.timeout=10m"
        ),
    )
    s.add_argument("assignments", nargs="*", metavar="KEY=VALUE", help="dotted key = value")
    s.add_argument("--file", help="a partial settings document (YAML or JSON)")
    s.set_defaults(handler=reporting_handler(settings_set_command))
    v = actions.add_parser("validate", help="check a settings document offline (no AWS calls)")
    v.add_argument("file", help="settings document (YAML or JSON)")
    v.set_defaults(handler=reporting_handler(settings_validate_command))
    i = actions.add_parser(
        "import",
        help="write Muster's settings from a Kueue Configuration or waitForPodsReady block",
        description=(
            "Read a Kueue Configuration (config.kueue.x-k8s.io/v1beta1 or v1beta2) or a bare "
            "waitForPodsReady block and write Muster's settings document, with Kueue's "
            "defaults for that version filled in. What has no equivalent is listed on "
            "stderr. Offline: no AWS calls."
        ),
    )
    i.add_argument("file", help="Kueue configuration (YAML or JSON)")
    i.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    i.add_argument(
        "--api-version",
        choices=["v1beta1", "v1beta2"],
        help="whose defaults a bare block gets (default: v1beta1 if it has `enable`, else v1beta2)",
    )
    i.set_defaults(handler=reporting_handler(settings_import_command))

    p = subparsers.add_parser(
        "reactivate",
        parents=[target],
        help="return a Deactivated workload to its queue (requeue count reset)",
    )
    p.add_argument("workload", help="namespace/name")
    p.set_defaults(handler=reporting_handler(reactivate_command))

    p = subparsers.add_parser(
        "release",
        parents=[target],
        help="release a quarantined workload once the cause is fixed (its effects are tried again)",
    )
    p.add_argument("workload", help="namespace/name")
    p.set_defaults(handler=reporting_handler(release_command))


def reporting_handler(
    command: Callable[[argparse.Namespace, TextIO], int], name: str | None = None
) -> Callable[[argparse.Namespace], int]:
    """A handler that prints an `AdminError` as one line on stderr and returns its exit code.

    Messages start with `name`, by default `muster <command>`."""

    def handler(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = name or f"muster {args.command}"
        try:
            return command(args, sys.stdout)
        except AdminError as exc:
            print(f"{prefix}: {exc}", file=sys.stderr)
            return exc.exit_code
        except ClientError as exc:  # e.g. AccessDenied on the table: name the call
            error = exc.response.get("Error", {})
            print(
                f"{prefix}: {exc.operation_name} failed: "
                f"{error.get('Code', '')} {error.get('Message', '')}".rstrip(),
                file=sys.stderr,
            )
            return EXIT_FAILED
        except BotoCoreError as exc:
            print(f"{prefix}: {exc}", file=sys.stderr)
            return EXIT_FAILED

    return handler
