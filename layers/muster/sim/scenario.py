"""Scenario files: the cluster, the settings, the workloads, the faults, a trace.

Parsing is strict and every error names the field (`workloads[2].pods: ...`), so
an administrator fixing a file knows where to look; one `ScenarioError` carries
every mistake of the file, so one run finds them all. A trace is expanded into
workloads here, with every random choice drawn from the seed, so that the same
file and seed always describe the same run.
"""

from __future__ import annotations

import difflib
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from muster.core import (
    DEFAULT_SETTINGS,
    DurationError,
    Settings,
    SettingsError,
    parse_duration,
    parse_settings,
)
from muster.sim.locate import TraceNotFound, resolve_trace

DEFAULT_UNTIL = 7 * 86400.0
MAPPINGS = ("pods-of-8", "pod-per-gpu")

# How a never-ready workload fails, as the kubelet shows it. `NotReady` is a pod that
# runs and never turns Ready with no reason given (a hang); it is the default and
# what a plain `neverReady` workload does.
FAILURES = ("CrashLoopBackOff", "ImagePullBackOff", "NotReady")
NOT_READY = "NotReady"
# The mix a trace's broken jobs draw from with `brokenModes: default`; where the
# shares come from is in docs/simulator.md ("Failure modes").
DEFAULT_BROKEN_MODES: Mapping[str, float] = {
    "CrashLoopBackOff": 0.55,
    "ImagePullBackOff": 0.25,
    "NotReady": 0.20,
}


class ScenarioError(ValueError):
    """A scenario that cannot be run; each of its `errors` names the field."""

    def __init__(self, *errors: str) -> None:
        self.errors: tuple[str, ...] = errors or ("invalid scenario",)
        super().__init__("\n".join(self.errors))

    def prefixed(self, source: str) -> ScenarioError:
        return ScenarioError(*(f"{source}: {e}" for e in self.errors))


class _Problems:
    """Collects the mistakes of one file; a part that fails yields its fallback."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def add(self, message: str) -> None:
        self.errors.append(message)

    def check(self, fallback: Any, parse: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return parse(*args, **kwargs)
        except ScenarioError as exc:
            self.errors.extend(exc.errors)
            return fallback


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    name: str
    queue: str
    submit_at: float
    pods: int
    gpus_per_pod: int
    startup_seconds: float
    run_seconds: float
    priority: int = 0
    never_ready: bool = False
    failure: str | None = None  # how a never-ready workload fails (FAILURES); None: NotReady

    @property
    def failure_mode(self) -> str | None:
        """How it fails (`NotReady` for a plain never-ready one), None when healthy."""
        if not self.never_ready:
            return None
        return self.failure or NOT_READY

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True, slots=True)
class FaultSpec:
    at: float
    node: str
    repair_after: float


@dataclass(frozen=True, slots=True)
class TraceSpec:
    path: Path | None = None
    synthetic: Mapping[str, Any] | None = None
    mapping: str = "pods-of-8"
    broken_fraction: float = 0.0
    node_mtbf_hours: float | None = None
    repair_after: float = 3600.0
    limit: int | None = None  # only the first N jobs
    broken_modes: Mapping[str, float] | None = None  # None: every broken job is NotReady


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    gpu_quota: int
    settings: Settings
    until: float
    workloads: tuple[WorkloadSpec, ...]
    faults: tuple[FaultSpec, ...] = ()
    trace: TraceSpec | None = None
    seed: int = 0
    description: str = ""
    raw_settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def models_failures(self) -> bool:
        """Whether the run reports evictions by classification: the scenario gives a
        failure mode other than `NotReady`, or `workloadFaults` is on. Otherwise its
        event log and summary are exactly what they were before failure modes existed."""
        if self.trace is not None and self.trace.broken_modes is not None:
            return True
        if any(w.failure not in (None, NOT_READY) for w in self.workloads):
            return True
        queues = [self.settings.defaults, *self.settings.queues.values()]
        return any(
            q.fault_limit_count is not None or q.fault_evict_after is not None for q in queues
        )


_TOP = {
    "name",
    "description",
    "cluster",
    "settings",
    "until",
    "seed",
    "workloads",
    "faults",
    "trace",
}
_CLUSTER = {"nodes", "gpusPerNode", "gpuQuota"}
_WORKLOAD = {
    "name",
    "queue",
    "submitAt",
    "pods",
    "gpusPerPod",
    "startupSeconds",
    "runSeconds",
    "priority",
    "neverReady",
    "failure",
}
_FAULT = {"at", "node", "repairAfter"}
_TRACE = {
    "path",
    "synthetic",
    "mapping",
    "brokenFraction",
    "brokenModes",
    "nodeMtbfHours",
    "repairAfter",
    "limit",
}


# ---------------------------------------------------------------------- loading


def load_scenario(path: str | Path, *, seed: int | None = None) -> Scenario:
    """Read and expand a scenario file; relative trace paths are relative to the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read the scenario: {exc.strerror or exc}") from None
    return parse_scenario_text(text, source=str(p), base_dir=p.parent, seed=seed, name=p.stem)


def builtin_names() -> list[str]:
    """The scenarios shipped with the package, in a stable order."""
    folder = resources.files("muster") / "scenarios"
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    )


def load_builtin(name: str, *, seed: int | None = None) -> Scenario:
    names = builtin_names()
    if name not in names:
        hint = difflib.get_close_matches(name, names, n=1)
        suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ScenarioError(
            f"no built-in scenario {name!r}{suggestion} (built-in: {', '.join(names)})"
        )
    text = (resources.files("muster") / "scenarios" / f"{name}.yaml").read_text(encoding="utf-8")
    return parse_scenario_text(
        text, source=f"built-in {name}", base_dir=Path.cwd(), seed=seed, name=name
    )


def parse_scenario_text(
    text: str,
    *,
    source: str = "scenario",
    base_dir: Path | None = None,
    seed: int | None = None,
    name: str = "scenario",
) -> Scenario:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from None
    try:
        return parse_scenario(doc, base_dir=base_dir or Path.cwd(), seed=seed, name=name)
    except ScenarioError as exc:
        raise exc.prefixed(source) from None


def parse_scenario(
    doc: Any, *, base_dir: Path, seed: int | None = None, name: str = "scenario"
) -> Scenario:
    """A scenario from its mapping; `seed` (the command line's) overrides the file's."""
    if not isinstance(doc, Mapping):
        raise ScenarioError("a scenario must be a mapping with at least 'cluster'")
    p = _Problems()
    p.check(None, _keys, doc, _TOP, "")
    cluster: Mapping[str, Any] = {}
    if "cluster" not in doc:
        p.add("cluster: missing (e.g. cluster: {nodes: 4, gpusPerNode: 8})")
    else:
        cluster = p.check({}, _mapping, doc["cluster"], "cluster")
    p.check(None, _keys, cluster, _CLUSTER, "cluster.")
    nodes = p.check(1, _int, cluster, "nodes", "cluster.", minimum=1, required=True)
    per_node = p.check(8, _int, cluster, "gpusPerNode", "cluster.", minimum=1, default=8)
    quota = p.check(
        nodes * per_node, _int, cluster, "gpuQuota", "cluster.", minimum=0, default=nodes * per_node
    )
    raw_settings = p.check({}, _mapping, doc.get("settings") or {}, "settings")
    if "gpuQuota" in raw_settings:
        p.add("settings.gpuQuota: set the cluster quota as cluster.gpuQuota")
    settings = DEFAULT_SETTINGS
    try:
        settings = parse_settings({k: v for k, v in raw_settings.items() if k != "gpuQuota"})
    except SettingsError as exc:
        p.errors += [f"settings.{e}" for e in exc.errors]
    settings = replace(settings, gpu_quota=quota)
    until = p.check(DEFAULT_UNTIL, _duration, doc, "until", "", DEFAULT_UNTIL)
    file_seed = p.check(0, _int, doc, "seed", "", minimum=0, default=0)
    run_seed = file_seed if seed is None else seed

    workloads: list[WorkloadSpec] = []
    names: set[str] = set()
    raw_workloads = doc.get("workloads") or []
    if not isinstance(raw_workloads, list):
        p.add("workloads: must be a list")
        raw_workloads = []
    for i, raw in enumerate(raw_workloads):
        w = p.check(None, _workload, raw, f"workloads[{i}].", per_node)
        if w is None:
            continue
        if w.name in names:
            p.add(f"workloads[{i}].name: {w.name!r} is used twice")
        names.add(w.name)
        workloads.append(w)

    node_names = [f"node-{i}" for i in range(nodes)]
    faults: list[FaultSpec] = []
    raw_faults = doc.get("faults") or []
    if not isinstance(raw_faults, list):
        p.add("faults: must be a list")
        raw_faults = []
    for i, raw in enumerate(raw_faults):
        fault = p.check(None, _fault, raw, f"faults[{i}].", node_names)
        if fault is not None:
            faults.append(fault)

    trace: TraceSpec | None = None
    if doc.get("trace") is not None:
        trace = p.check(None, _trace, doc["trace"], base_dir)
    if p.errors:  # expand a trace only for an otherwise sound file
        raise ScenarioError(*p.errors)
    if trace is not None:
        from muster.sim.traces import expand_trace

        extra, extra_faults = expand_trace(
            trace, seed=run_seed, gpus_per_node=per_node, nodes=nodes, until=until, taken=names
        )
        workloads.extend(extra)
        faults.extend(extra_faults)
    if not workloads:
        raise ScenarioError("workloads: a scenario needs at least one workload or a trace")
    too_big = [
        f"{w.name}: gpusPerPod {w.gpus_per_pod} exceeds cluster.gpusPerNode {per_node}"
        for w in workloads
        if w.gpus_per_pod > per_node
    ]
    if too_big:
        raise ScenarioError(*too_big)
    return Scenario(
        name=str(doc.get("name") or name),
        nodes=nodes,
        gpus_per_node=per_node,
        gpu_quota=quota,
        settings=settings,
        until=until,
        workloads=tuple(workloads),
        faults=tuple(sorted(faults, key=lambda f: (f.at, node_names.index(f.node)))),
        trace=trace,
        seed=run_seed,
        description=str(doc.get("description") or ""),
        raw_settings=dict(raw_settings),
    )


# ---------------------------------------------------------------------- parts


def _workload(raw: Any, path: str, per_node: int) -> WorkloadSpec:
    """One workload; every wrong field of it is reported, not just the first."""
    doc = _mapping(raw, path[:-1])
    p = _Problems()
    p.check(None, _keys, doc, _WORKLOAD, path)
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        p.add(f"{path}name: a non-empty name is required")
    queue = doc.get("queue", "default")
    if not isinstance(queue, str) or not queue:
        p.add(f"{path}queue: expected a queue name, got {queue!r}")
    never = doc.get("neverReady", False)
    if not isinstance(never, bool):
        p.add(f"{path}neverReady: expected true or false, got {never!r}")
    failure = doc.get("failure")
    if failure is not None:
        if failure not in FAILURES:
            p.add(f"{path}failure: expected one of {', '.join(FAILURES)}, got {failure!r}")
            failure = None
        elif doc.get("neverReady") is False:
            p.add(f"{path}failure: a workload that fails is never ready (drop neverReady: false)")
        else:
            never = True
    spec = WorkloadSpec(
        name=name.strip() if isinstance(name, str) else "",
        queue=queue,
        submit_at=p.check(0.0, _duration, doc, "submitAt", path, 0.0),
        pods=p.check(1, _int, doc, "pods", path, minimum=1, required=True),
        gpus_per_pod=p.check(1, _int, doc, "gpusPerPod", path, minimum=1, default=per_node),
        startup_seconds=p.check(30.0, _duration, doc, "startupSeconds", path, 30.0),
        run_seconds=p.check(3600.0, _duration, doc, "runSeconds", path, 3600.0),
        priority=p.check(0, _int, doc, "priority", path, minimum=-(2**31), default=0),
        never_ready=never is True,
        failure=failure,
    )
    if p.errors:
        raise ScenarioError(*p.errors)
    return spec


def _fault(raw: Any, path: str, node_names: list[str]) -> FaultSpec:
    doc = _mapping(raw, path[:-1])
    _keys(doc, _FAULT, path)
    node = doc.get("node")
    if node not in node_names:
        raise ScenarioError(
            f"{path}node: no node {node!r} (nodes are {node_names[0]} ... {node_names[-1]})"
        )
    if "at" not in doc:
        raise ScenarioError(f"{path}at: missing (when the node fails, e.g. 100s)")
    return FaultSpec(
        at=_duration(doc, "at", path, 0.0),
        node=node,
        repair_after=_duration(doc, "repairAfter", path, math.inf),
    )


def _trace(raw: Any, base_dir: Path) -> TraceSpec:
    doc = _mapping(raw, "trace")
    _keys(doc, _TRACE, "trace.")
    has_path, has_synth = doc.get("path") is not None, doc.get("synthetic") is not None
    if has_path == has_synth:
        raise ScenarioError("trace: give exactly one of 'path' (a Philly CSV) or 'synthetic'")
    path: Path | None = None
    if has_path:
        if not isinstance(doc["path"], str):
            raise ScenarioError(f"trace.path: expected a file path, got {doc['path']!r}")
        try:
            path = resolve_trace(Path(doc["path"]), base_dir)
        except TraceNotFound as exc:
            raise ScenarioError(str(exc)) from None
    synthetic = None
    if has_synth:
        synthetic = _mapping(doc["synthetic"], "trace.synthetic")
    mapping = doc.get("mapping", "pods-of-8")
    if mapping not in MAPPINGS:
        raise ScenarioError(
            f"trace.mapping: expected one of {', '.join(MAPPINGS)}, got {mapping!r}"
        )
    fraction = doc.get("brokenFraction", 0.0)
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not 0 <= fraction <= 1
    ):
        raise ScenarioError(
            f"trace.brokenFraction: expected a number from 0 to 1, got {fraction!r}"
        )
    mtbf = doc.get("nodeMtbfHours")
    if mtbf is not None and (
        isinstance(mtbf, bool) or not isinstance(mtbf, int | float) or mtbf <= 0
    ):
        raise ScenarioError(
            f"trace.nodeMtbfHours: expected a positive number of hours, got {mtbf!r}"
        )
    limit = _int(doc, "limit", "trace.", minimum=1, default=0) or None
    modes = _broken_modes(doc.get("brokenModes"))
    return TraceSpec(
        path=path,
        synthetic=synthetic,
        mapping=mapping,
        broken_fraction=float(fraction),
        node_mtbf_hours=float(mtbf) if mtbf is not None else None,
        repair_after=_duration(doc, "repairAfter", "trace.", 3600.0),
        limit=limit,
        broken_modes=modes,
    )


def _broken_modes(raw: Any) -> Mapping[str, float] | None:
    """`brokenModes`: `default` (the cited mix) or a mapping of failure mode to weight."""
    if raw is None:
        return None
    if raw == "default":
        return dict(DEFAULT_BROKEN_MODES)
    if not isinstance(raw, Mapping) or not raw:
        raise ScenarioError(
            "trace.brokenModes: expected 'default' or a mapping of failure mode to weight, "
            f"e.g. {{CrashLoopBackOff: 0.55, ImagePullBackOff: 0.25, NotReady: 0.2}}, got {raw!r}"
        )
    modes: dict[str, float] = {}
    for mode, weight in raw.items():
        if mode not in FAILURES:
            raise ScenarioError(
                f"trace.brokenModes.{mode}: not a failure mode (one of {', '.join(FAILURES)})"
            )
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ScenarioError(
                f"trace.brokenModes.{mode}: expected a weight of 0 or more, got {weight!r}"
            )
        modes[mode] = float(weight)
    if sum(modes.values()) <= 0:
        raise ScenarioError("trace.brokenModes: the weights add up to 0")
    return modes


# ---------------------------------------------------------------------- fields


def _keys(doc: Mapping[str, Any], allowed: set[str], path: str) -> None:
    unknown: list[str] = []
    for key in doc:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
            unknown.append(
                f"{path}{key}: unknown field{suggestion} (known: {', '.join(sorted(allowed))})"
            )
    if unknown:
        raise ScenarioError(*unknown)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{path}: expected a mapping, got {value!r}")
    return value


def _int(
    doc: Mapping[str, Any],
    key: str,
    path: str,
    *,
    minimum: int,
    default: int = 0,
    required: bool = False,
) -> int:
    if key not in doc or doc[key] is None:
        if required:
            raise ScenarioError(f"{path}{key}: missing (a whole number)")
        return default
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{path}{key}: expected a whole number, got {value!r}")
    if value < minimum:
        raise ScenarioError(f"{path}{key}: must be at least {minimum}, got {value}")
    return value


def _duration(doc: Mapping[str, Any], key: str, path: str, default: float) -> float:
    if key not in doc or doc[key] is None:
        return default
    try:
        return parse_duration(doc[key])
    except DurationError as exc:
        raise ScenarioError(f"{path}{key}: {exc}") from None


def seeded(seed: int, purpose: str) -> random.Random:
    """An independent random stream per purpose, so one draw never shifts another."""
    return random.Random(f"{seed}:{purpose}")
