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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from muster.core import (
    DEFAULT_SETTINGS,
    Settings,
    SettingsError,
    parse_settings,
)
from muster.core.fields import (
    check_keys,
    checked,
    collecting,
    duration,
    mapping,
    problem,
    whole_number,
    yaml_problem,
)
from muster.sim.locate import TraceNotFound, resolve_trace
from muster.sim.specs import (
    DEFAULT_BROKEN_MODES,
    FAILURES,
    NOT_READY,
    NodeFaultSpec,
    ScenarioError,
    TraceSpec,
    WorkloadSpec,
)
from muster.sim.topology import Layout, node_topology, parse_layout, request, trace_requests
from muster.sim.traces import expand_trace

DEFAULT_UNTIL = 7 * 86400.0
MAPPINGS = ("pods-of-8", "pod-per-gpu")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    gpu_quota: int
    settings: Settings
    until: float
    workloads: tuple[WorkloadSpec, ...]
    faults: tuple[NodeFaultSpec, ...] = ()
    trace: TraceSpec | None = None
    seed: int = 0
    description: str = ""
    raw_settings: Mapping[str, Any] = field(default_factory=dict)
    topology: Layout = ()  # `cluster.topology`: (level, nodes per block), widest first

    def node_topology(self, index: int) -> tuple[tuple[str, str], ...]:
        """The topology labels node `index` reports (none without `cluster.topology`)."""
        return node_topology(self.topology, index)

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
_CLUSTER = {"nodes", "gpusPerNode", "gpuQuota", "topology"}
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
    "topology",
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
    "topology",
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
        raise ScenarioError(f"{source}: not valid YAML: {yaml_problem(exc)}") from None
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
    with collecting(ScenarioError):
        scenario = _read(doc, base_dir, seed, name)
    if scenario.trace is not None:  # expanded only for an otherwise sound file
        extra, extra_faults = expand_trace(
            scenario.trace,
            seed=scenario.seed,
            gpus_per_node=scenario.gpus_per_node,
            nodes=scenario.nodes,
            until=scenario.until,
            taken={w.name for w in scenario.workloads},
        )
        if scenario.trace.topology:
            extra = trace_requests(
                extra, scenario.trace.topology, scenario.topology, scenario.gpus_per_node
            )
        node_names = [f"node-{i}" for i in range(scenario.nodes)]
        scenario = replace(
            scenario,
            workloads=scenario.workloads + tuple(extra),
            faults=tuple(
                sorted(
                    (*scenario.faults, *extra_faults),
                    key=lambda f: (f.at, node_names.index(f.node)),
                )
            ),
        )
    if not scenario.workloads:
        raise ScenarioError("workloads: a scenario needs at least one workload or a trace")
    too_big = [
        f"{w.name}: gpusPerPod {w.gpus_per_pod} exceeds cluster.gpusPerNode {scenario.gpus_per_node}"
        for w in scenario.workloads
        if w.gpus_per_pod > scenario.gpus_per_node
    ]
    if too_big:
        raise ScenarioError(*too_big)
    return scenario


def _read(doc: Mapping[str, Any], base_dir: Path, seed: int | None, name: str) -> Scenario:
    """Every field of the file, each mistake recorded with its path (see `collecting`)."""
    check_keys(doc, _TOP, "", "field")
    nodes, per_node, quota, layout = _cluster(doc)
    settings, raw_settings = _settings(doc, quota)
    until = duration(doc, "until", DEFAULT_UNTIL, null_is_default=True)
    file_seed = whole_number(doc, "seed", 0, minimum=0)
    workloads = _workloads(doc, per_node)
    node_names = [f"node-{i}" for i in range(nodes)]
    faults = _faults(doc, node_names)
    trace: TraceSpec | None = None
    if doc.get("trace") is not None:
        trace = checked(None, _trace, doc["trace"], base_dir)
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
        seed=file_seed if seed is None else seed,
        description=str(doc.get("description") or ""),
        raw_settings=dict(raw_settings),
        topology=layout,
    )


def _cluster(doc: Mapping[str, Any]) -> tuple[int, int, int, Layout]:
    """`cluster`: its nodes, GPUs per node, GPU quota and network blocks."""
    cluster: Mapping[str, Any] = {}
    if "cluster" not in doc:
        problem("cluster: missing (e.g. cluster: {nodes: 4, gpusPerNode: 8})")
    else:
        cluster = checked({}, mapping, doc["cluster"], "cluster")
    check_keys(cluster, _CLUSTER, "cluster.", "field")
    nodes = whole_number(cluster, "nodes", 1, "cluster.", minimum=1, required=True)
    per_node = whole_number(cluster, "gpusPerNode", 8, "cluster.", minimum=1)
    quota = whole_number(cluster, "gpuQuota", nodes * per_node, "cluster.", minimum=0)
    return nodes, per_node, quota, parse_layout(cluster.get("topology"), nodes)


def _settings(doc: Mapping[str, Any], quota: int) -> tuple[Settings, Mapping[str, Any]]:
    """`settings` as the core reads them (under the cluster's quota), and as written."""
    raw_settings: Mapping[str, Any] = checked({}, mapping, doc.get("settings") or {}, "settings")
    if "gpuQuota" in raw_settings:
        problem("settings.gpuQuota: set the cluster quota as cluster.gpuQuota")
    settings = DEFAULT_SETTINGS
    given = {k: v for k, v in raw_settings.items() if k != "gpuQuota"}
    # `topologyLevels` and `nodePacking` need `capacityCheck`; the simulator turns the
    # check on per policy (`gang+fit`), so they are read as the check would read them,
    # and do nothing under the policies without it.
    check = given.get("capacityCheck", False)
    if check is False and (_names_levels(given) or given.get("nodePacking") is True):
        given["capacityCheck"] = True
    try:
        settings = parse_settings(given)
        if check is False:
            settings = replace(settings, capacity_check=False)
    except SettingsError as exc:
        for error in exc.errors:
            problem(f"settings.{error}")
    return replace(settings, gpu_quota=quota), raw_settings


def _names_levels(doc: Mapping[str, Any]) -> bool:
    queues = doc.get("queues")
    named = [doc, *(queues.values() if isinstance(queues, Mapping) else ())]
    return any(isinstance(q, Mapping) and q.get("topologyLevels") for q in named)


def _workloads(doc: Mapping[str, Any], per_node: int) -> list[WorkloadSpec]:
    """`workloads`, each with a name of its own."""
    workloads: list[WorkloadSpec] = []
    names: set[str] = set()
    raw_workloads = doc.get("workloads") or []
    if not isinstance(raw_workloads, list):
        problem("workloads: must be a list")
        raw_workloads = []
    for i, raw in enumerate(raw_workloads):
        w = checked(None, _workload, raw, f"workloads[{i}].", per_node)
        if w is None:
            continue
        if w.name in names:
            problem(f"workloads[{i}].name: {w.name!r} is used twice")
        names.add(w.name)
        workloads.append(w)
    return workloads


def _faults(doc: Mapping[str, Any], node_names: list[str]) -> list[NodeFaultSpec]:
    """`faults`, each on one of the cluster's nodes."""
    faults: list[NodeFaultSpec] = []
    raw_faults = doc.get("faults") or []
    if not isinstance(raw_faults, list):
        problem("faults: must be a list")
        raw_faults = []
    for i, raw in enumerate(raw_faults):
        fault = checked(None, _fault, raw, f"faults[{i}].", node_names)
        if fault is not None:
            faults.append(fault)
    return faults


# ---------------------------------------------------------------------- parts


def _workload(raw: Any, path: str, per_node: int) -> WorkloadSpec:
    """One workload; every wrong field of it is reported, not just the first."""
    doc = mapping(raw, path[:-1])
    check_keys(doc, _WORKLOAD, path, "field")
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip():
        problem(f"{path}name: a non-empty name is required")
    queue = doc.get("queue", "default")
    if not isinstance(queue, str) or not queue:
        problem(f"{path}queue: expected a queue name, got {queue!r}")
    never = doc.get("neverReady", False)
    if not isinstance(never, bool):
        problem(f"{path}neverReady: expected true or false, got {never!r}")
    failure = doc.get("failure")
    if failure is not None:
        if failure not in FAILURES:
            problem(f"{path}failure: expected one of {', '.join(FAILURES)}, got {failure!r}")
            failure = None
        elif doc.get("neverReady") is False:
            problem(f"{path}failure: a workload that fails is never ready (drop neverReady: false)")
        else:
            never = True
    return WorkloadSpec(
        name=name.strip() if isinstance(name, str) else "",
        queue=queue,
        submit_at=duration(doc, "submitAt", 0.0, path, null_is_default=True),
        pods=whole_number(doc, "pods", 1, path, minimum=1, required=True),
        gpus_per_pod=whole_number(doc, "gpusPerPod", per_node, path, minimum=1),
        startup_seconds=duration(doc, "startupSeconds", 30.0, path, null_is_default=True),
        run_seconds=duration(doc, "runSeconds", 3600.0, path, null_is_default=True),
        priority=whole_number(doc, "priority", 0, path, minimum=-(2**31)),
        never_ready=never is True,
        failure=failure,
        topology=request(doc.get("topology"), f"{path}topology"),
    )


def _fault(raw: Any, path: str, node_names: list[str]) -> NodeFaultSpec:
    doc = mapping(raw, path[:-1])
    check_keys(doc, _FAULT, path, "field")
    node = doc.get("node")
    if node not in node_names:
        raise ScenarioError(
            f"{path}node: no node {node!r} (nodes are {node_names[0]} ... {node_names[-1]})"
        )
    if "at" not in doc:
        raise ScenarioError(f"{path}at: missing (when the node fails, e.g. 100s)")
    return NodeFaultSpec(
        at=duration(doc, "at", 0.0, path, null_is_default=True),
        node=node,
        repair_after=duration(doc, "repairAfter", math.inf, path, null_is_default=True),
    )


def _trace(raw: Any, base_dir: Path) -> TraceSpec:
    doc = mapping(raw, "trace")
    check_keys(doc, _TRACE, "trace.", "field")
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
        synthetic = mapping(doc["synthetic"], "trace.synthetic")
    trace_mapping = doc.get("mapping", "pods-of-8")
    if trace_mapping not in MAPPINGS:
        raise ScenarioError(
            f"trace.mapping: expected one of {', '.join(MAPPINGS)}, got {trace_mapping!r}"
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
    modes = _broken_modes(doc.get("brokenModes"))
    return TraceSpec(
        path=path,
        synthetic=synthetic,
        mapping=trace_mapping,
        broken_fraction=float(fraction),
        node_mtbf_hours=float(mtbf) if mtbf is not None else None,
        repair_after=duration(doc, "repairAfter", 3600.0, "trace.", null_is_default=True),
        limit=whole_number(doc, "limit", 0, "trace.", minimum=1) or None,
        broken_modes=modes,
        topology=request(doc.get("topology"), "trace.topology"),
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
