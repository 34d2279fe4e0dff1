"""Topology-aware admission: a gang inside one network block (opt-in, `topologyLevels`).

A distributed training job is only as fast as its slowest link, and a gang spread
across network spines trains slower than one inside a block. On EKS the EC2
instance topology shows as node labels `topology.k8s.aws/network-node-layer-1..3`
(layer 3 is the closest to the instance) beside `topology.kubernetes.io/zone`;
HyperPod clusters carry the same labels. The agent reports them with each node's
capacity (`NodeCapacity.topology`, as (level, value) pairs, widest level first).

A workload asks with `muster.io/topology: required=<level>` or `preferred=<level>`
(Kueue's `podset-required-topology` / `podset-preferred-topology`). With
`capacityCheck` on and the level named in its queue's `topologyLevels`:

- `required`: admitted only if the whole gang fits inside one domain of that
  level, after the reservations the capacity check already keeps; else it waits
  (`TopologySkip`, the reason `muster status` shows).
- `preferred`: the smallest domain of that level that fits, else of the next
  wider level the queue names, else anywhere (the plain capacity check).

A `required` level the queue does not name keeps the workload from admission
(`refusal`, shown as `Inadmissible`); a `preferred` one is ignored, with a note.

A domain is named by its node labels from the widest level down to its own
(`zone=a,network-node-layer-1=b,...`, the `domain` string): two blocks that share
a layer-3 value under different spines are two domains, and the node selector
that keeps the pods there (`domain_selector`) names every label of the path.

Everything is pure and works from (count, GPUs each) groups, never per pod.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from muster.core.fields import problem

# The levels, widest first: a domain of a level lies inside one domain of each wider one.
LEVELS: tuple[str, ...] = (
    "zone",
    "network-node-layer-1",
    "network-node-layer-2",
    "network-node-layer-3",
)
LABELS: Mapping[str, str] = {
    "zone": "topology.kubernetes.io/zone",
    "network-node-layer-1": "topology.k8s.aws/network-node-layer-1",
    "network-node-layer-2": "topology.k8s.aws/network-node-layer-2",
    "network-node-layer-3": "topology.k8s.aws/network-node-layer-3",
}
LABEL_KEYS = frozenset(LABELS.values())
# A gang packed onto one node (`nodePacking`, `core.packing`) is kept there by the
# label every node carries; its domain is `hostname=<node>`, not a topology level.
NODE = "hostname"
NODE_LABEL = "kubernetes.io/hostname"
_LEVEL_OF = {label: level for level, label in LABELS.items()} | {level: level for level in LEVELS}
_RANK = {level: i for i, level in enumerate(LEVELS)}
MODES = ("required", "preferred")
VALUE_BYTES = 63  # a Kubernetes label value
_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

Topology = tuple[tuple[str, str], ...]  # (level, label value), widest level first
Pods = tuple[tuple[int, int], ...]  # (count, GPUs each), largest first
NO_TOPOLOGY: Topology = ()


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """What a workload asks for: `mode` is "required" or "preferred"; `level` a short name."""

    mode: str
    level: str

    def __str__(self) -> str:
        return f"{self.mode}={self.level}"

    @property
    def required(self) -> bool:
        return self.mode == "required"


def level_name(name: str) -> str | None:
    """The short level name of `name` (a short name or its node label key), or None."""
    return _LEVEL_OF.get(name.strip())


def _unknown_level(name: str) -> str:
    hint = difflib.get_close_matches(name, [*LEVELS, *LABELS.values()], n=1)
    suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
    return f"unknown topology level {name!r}{suggestion} (known: {', '.join(LEVELS)})"


def parse_request(text: str) -> TopologyRequest:
    """`required=<level>` or `preferred=<level>`; `ValueError` says what is wrong."""
    mode, sep, name = str(text).strip().partition("=")
    mode = mode.strip()
    if not sep or mode not in MODES:
        raise ValueError(
            f"expected required=<level> or preferred=<level> (levels: {', '.join(LEVELS)}), "
            f"got {str(text)[:80]!r}"
        )
    level = level_name(name)
    if level is None:
        raise ValueError(_unknown_level(name.strip()[:80]))
    return TopologyRequest(mode, level)


def request_of(text: str) -> TopologyRequest | None:
    """The request a workload holds (its canonical text; "" for none)."""
    if not text:
        return None
    try:
        return parse_request(text)
    except ValueError:
        return None


def node_topology(labels: Mapping[str, Any]) -> Topology:
    """A node's topology from its labels: the known levels it carries, widest first.

    Nodes are the administrator's, but their labels are bounded all the same: a
    value that is not a Kubernetes label value is left out.
    """
    found: list[tuple[str, str]] = []
    for level in LEVELS:
        value = labels.get(LABELS[level])
        if isinstance(value, str) and valid_value(value):
            found.append((level, value))
    return tuple(found)


def valid_value(value: str) -> bool:
    return len(value.encode()) <= VALUE_BYTES and _VALUE.fullmatch(value) is not None


def event_request(value: object) -> str:
    """The `topology` of a `Workload Observed` event: "" or a request, canonical."""
    if value is None or value == "":
        return ""
    try:
        if not isinstance(value, str):
            raise ValueError(f"expected required=<level> or preferred=<level>, got {value!r}")
        return str(parse_request(value))
    except ValueError as exc:
        problem(f"topology: {exc}")
        return ""


def event_topology(value: object) -> Topology:
    """The `topology` of a `Node Observed` event (level -> label value): every wrong
    entry is a mistake of its own."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        problem("topology: expected an object of level -> label value")
        return ()
    for key, label in value.items():
        if key not in _RANK:
            problem(f"topology: {_unknown_level(str(key)[:80])}")
        elif not isinstance(label, str) or not valid_value(label):
            problem(
                f"topology.{key}: {str(label)[:80]!r} is not a Kubernetes label value "
                f"(at most {VALUE_BYTES} of A-Z, a-z, 0-9, '-', '_', '.')"
            )
    return tuple((level, value[level]) for level in LEVELS if level in value)


# --------------------------------------------------------------------------- settings


def parse_levels(doc: Mapping[str, Any], base: tuple[str, ...], path: str) -> tuple[str, ...]:
    """`topologyLevels`: the levels a queue's workloads may ask for (short names or label
    keys), as short names widest first; every wrong entry is a mistake of its own."""
    if "topologyLevels" not in doc:
        return base
    raw = doc["topologyLevels"]
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        problem(f"{path}topologyLevels: expected a list of level names, got {raw!r}")
        return base
    levels: set[str] = set()
    for i, name in enumerate(raw):
        level = level_name(name)
        if level is None:
            problem(f"{path}topologyLevels[{i}]: {_unknown_level(name)}")
        else:
            levels.add(level)
    return tuple(sorted(levels, key=_RANK.__getitem__))


def levels_need_capacity(doc: Mapping[str, Any], queues: Mapping[str, Mapping[str, Any]]) -> None:
    """With `capacityCheck` off, naming topology levels is a mistake: the capacity check
    is what fits a gang into one domain, so the levels would do nothing."""
    named = [("", doc)] + [(f"queues.{name}.", raw) for name, raw in queues.items()]
    for path, raw in named:
        if raw.get("topologyLevels"):
            problem(
                f"{path}topologyLevels: needs capacityCheck: true (the capacity check is "
                "what fits a gang into one domain)"
            )


def levels_document(levels: tuple[str, ...]) -> dict[str, Any]:
    return {"topologyLevels": list(levels)} if levels else {}


def refusal(text: str, queue: str, levels: tuple[str, ...]) -> str | None:
    """Why a `required` topology keeps a workload from admission on `queue`, or None.

    A `preferred` one never does: a level the queue does not name is ignored.
    """
    request = request_of(text)
    if request is None or not request.required or request.level in levels:
        return None
    named = ", ".join(levels) if levels else "none"
    return f"topology {request} is not allowed on queue {queue} (its topologyLevels: {named})"


def admitted_detail(text: str, domain: str, queue: str, levels: tuple[str, ...]) -> dict[str, Any]:
    """What the `Admitted` event says of a workload's topology: what it asked for, the
    domain it was admitted into (None: anywhere) and, if so, why the request was ignored."""
    request = request_of(text)
    if request is None:
        return {}
    detail: dict[str, Any] = {"topology": str(request), "domain": domain or None}
    if request.level not in levels:
        detail["topologyIgnored"] = f"queue {queue} does not name {request.level} in topologyLevels"
    return detail


# --------------------------------------------------------------------------- domains


def domain_at(topology: Topology, level: str) -> str | None:
    """The node's domain at `level` (its labels down to that level), or None without one."""
    rank = _RANK[level]
    parts: list[str] = []
    has = False
    for name, value in topology:
        if _RANK[name] > rank:
            break
        parts.append(f"{name}={value}")
        has = name == level
    return ",".join(parts) if has else None


def domain_level(domain: str) -> str:
    """The level a domain is of (its last label)."""
    return domain.rpartition(",")[2].partition("=")[0]


def domain_selector(domain: str) -> dict[str, str]:
    """The node selector that keeps pods inside `domain`: label key -> value."""
    selector: dict[str, str] = {}
    for part in domain.split(","):
        name, _, value = part.partition("=")
        if name in LABELS:
            selector[LABELS[name]] = value
        elif name == NODE:
            selector[NODE_LABEL] = value
    return selector


def node_domain(node: str) -> str:
    """The domain of one node (a gang packed onto it)."""
    return f"{NODE}={node}"


def pinned_node(domain: str) -> str | None:
    """The node a gang was packed onto (`node_domain`), or None for a topology domain."""
    name, _, value = domain.partition("=")
    return value if name == NODE and value else None


def common_domain(nodes: Mapping[str, Topology], placed: Iterable[str], level: str) -> str | None:
    """The one domain of `level` that holds every node of `placed` (where a gang's pods
    are bound), or None when they span more than one or a node is in none (unknown
    nodes included). For invariants and reports: was the gang kept inside one block?"""
    found: str | None = None
    for node in placed:
        labels = nodes.get(node)
        domain = domain_at(labels, level) if labels is not None else None
        if domain is None or (found is not None and domain != found):
            return None
        found = domain
    return found


@dataclass(frozen=True, slots=True)
class TopologySkip:
    """A candidate whose gang fits no single domain of its required level now."""

    workload: str
    level: str
    pods: Pods
    best: int  # the most of the gang's pods one domain has room for
    domains: int  # domains of the level among the schedulable nodes
    unjudged: str = ""  # why the check cannot place it at all ("" when it can)

    def __str__(self) -> str:
        if self.unjudged:
            return f"required {self.level} topology cannot be judged: {self.unjudged}"
        need = " + ".join(f"{n} \u00d7 {g}" for n, g in self.pods)
        head = f"needs {need} GPUs in one {self.level} block"
        if not self.domains:
            return f"{head}; no schedulable node reports a {self.level} label"
        return f"{head}; the largest free block has room for {self.best}"


# --------------------------------------------------------------------------- fit


def domains(topology: Sequence[Topology], level: str) -> dict[str, list[int]]:
    """The domains of `level`: name -> the indices of its nodes, in first-fit order."""
    found: dict[str, list[int]] = {}
    for i, labels in enumerate(topology):
        name = domain_at(labels, level)
        if name is not None:
            found.setdefault(name, []).append(i)
    return found


def first_fit(free: list[int], at: Sequence[int], sizes: Pods) -> int:
    """Place what fits of `sizes` (largest first) on the nodes `at` of `free`, in place;
    returns how many pods were placed. Each node takes as many of a group as fit in
    one step, whatever the group's count (as `capacity.Fitter` does)."""
    placed = 0
    for count, gpus in sizes:
        left = count
        for i in at:
            room = free[i]
            if room >= gpus:
                take = min(left, room // gpus)
                free[i] = room - take * gpus
                left -= take
                if not left:
                    break
        placed += count - left
    return placed


def _natural(name: str) -> tuple[tuple[int, str | int], ...]:
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


DomainIndex = dict[str, dict[str, list[int]]]  # level -> domain -> node indices


def indexed(cache: DomainIndex, topology: Sequence[Topology], level: str) -> dict[str, list[int]]:
    """`domains(topology, level)`, grouped once per view (`cache`, kept by the caller)."""
    found = cache.get(level)
    if found is None:
        found = cache[level] = domains(topology, level)
    return found


def best_domain(
    free: list[int], found: Mapping[str, list[int]], sizes: Pods
) -> tuple[str | None, int, int]:
    """(the smallest of the domains `found` the gang fits in, the most of its pods one
    domain has room for, how many domains there are). Smallest: the fewest free GPUs,
    then by name in natural order. Nothing is taken from `free`.

    A domain with fewer free GPUs than the gang asks for is passed over without a fit;
    how much of the gang the roomiest holds is worked out only when none fits.
    """
    wanted = sum(n * g for n, g in sizes)
    total = sum(n for n, _ in sizes)
    chosen: tuple[int, tuple[tuple[int, str | int], ...], str] | None = None
    for name, at in found.items():
        room = 0
        for i in at:
            room += free[i]
        if room < wanted or (chosen is not None and room > chosen[0]):
            continue
        if first_fit([free[i] for i in at], range(len(at)), sizes) == total:
            key = (room, _natural(name), name)
            if chosen is None or key < chosen:
                chosen = key
    if chosen is not None:
        return chosen[2], total, len(found)
    return None, _most_placed(free, found, sizes), len(found)


def _most_placed(free: list[int], found: Mapping[str, list[int]], sizes: Pods) -> int:
    """The most of the gang's pods one domain has room for (for the waiting reason)."""
    if len(sizes) == 1:
        count, gpus = sizes[0]
        if gpus <= 0:
            return count
        return max(
            (min(count, sum(free[i] // gpus for i in at)) for at in found.values()), default=0
        )
    return max(
        (first_fit([free[i] for i in at], range(len(at)), sizes) for at in found.values()),
        default=0,
    )


def reserve_in(free: list[int], found: Mapping[str, list[int]], domain: str, sizes: Pods) -> int:
    """Take what fits of `sizes` inside `domain` (of the domains `found` at its level)."""
    return first_fit(free, found.get(domain, ()), sizes)


def search_levels(request: TopologyRequest, allowed: Iterable[str]) -> list[str]:
    """The levels tried for `request`, narrowest first: its own, then (preferred) the
    wider ones its queue names."""
    if request.required:
        return [request.level]
    rank = _RANK[request.level]
    wider = sorted((lv for lv in set(allowed) if _RANK[lv] < rank), key=_RANK.__getitem__)
    return [request.level, *reversed(wider)]


__all__ = [
    "LABELS",
    "LABEL_KEYS",
    "LEVELS",
    "NODE",
    "NODE_LABEL",
    "NO_TOPOLOGY",
    "DomainIndex",
    "Topology",
    "TopologyRequest",
    "TopologySkip",
    "admitted_detail",
    "best_domain",
    "common_domain",
    "domain_at",
    "domain_level",
    "domain_selector",
    "domains",
    "event_request",
    "event_topology",
    "first_fit",
    "indexed",
    "level_name",
    "levels_document",
    "levels_need_capacity",
    "node_domain",
    "node_topology",
    "parse_levels",
    "parse_request",
    "pinned_node",
    "refusal",
    "request_of",
    "reserve_in",
    "search_levels",
    "valid_value",
]
