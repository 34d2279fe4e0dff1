"""Settings: Kueue's `waitForPodsReady` names, plus Muster's additions.

The defaults are SageMaker HyperPod task governance's (timeout 5m, blockAdmission
off); Kueue's current configuration API defaults the timeout to 30m, and its
older v1beta1 API to 5m with blockAdmission on.

A settings document is a mapping (from YAML, JSON, cdk.json context or the
settings record in DynamoDB). Global values apply to every queue; `queues.<name>`
overrides them for one queue. Parsing is strict: an unknown key, a malformed
duration, a negative limit, a number that is not finite or a duration longer than
the runtime can carry out (a year) is a `SettingsError` naming the field, and one
`SettingsError` carries every mistake of the document with its path (as Kueue's
validation returns a `field.ErrorList`), so three mistakes take one run to find.

Declaring a setting: a field of `QueueSettings` (per queue) or `Settings`
(cluster-wide), its key in `_QUEUE_KEYS` / `_GLOBAL_KEYS` (or its block's own
key set), one line in `_parse_queue` / `_parse_document` that reads it with a
helper of `muster.core.fields` (`boolean`, `number`, `whole_number`, `_duration`
here, `check_keys` for a block) and falls back to the base value on a mistake,
and its entry in `to_dict` / `queue_document`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from muster.core.durations import format_duration
from muster.core.fields import (
    FieldErrors,
    boolean,
    check_keys,
    collecting,
    duration,
    number,
    part,
    problem,
    whole_number,
    yaml_problem,
)
from muster.core.topology import levels_document, levels_need_capacity, parse_levels


class SettingsError(FieldErrors):
    """A settings document that cannot be used; each of its `errors` names the field."""

    default = "invalid settings"


MAX_DURATION_SECONDS = 365 * 86400.0
"""The longest duration the runtime can carry out: a readiness timer is a Step
Functions Standard execution, whose lifetime is at most one year."""


class Timestamp(StrEnum):
    """Which time orders a requeued workload in its queue."""

    EVICTION = "Eviction"
    CREATION = "Creation"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Everything that may differ per queue, fully resolved (no unset inheritance)."""

    timeout: float = 300.0
    recovery_timeout: float | None = None  # None: same as timeout; 0: recovery eviction off
    timestamp: Timestamp = Timestamp.EVICTION
    backoff_limit_count: int | None = None
    backoff_limit_timeout: float | None = None
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 3600.0
    backoff_jitter: float = 0.0
    max_timeout: float | None = None  # cap of a workload's own timeout; None: timeout itself
    gpu_quota: int | None = None
    dry_run: bool = False
    node_replacement_eviction: bool = True
    # `workloadFaults`: stop retrying gangs whose pods fail on their own (off when unset).
    fault_limit_count: int | None = None
    fault_evict_after: float | None = None
    # The topology levels its workloads may ask for (`core.topology`; none: no request honoured).
    topology_levels: tuple[str, ...] = ()
    # `sizeHandicap`: each GPU beyond a gang's first puts it this much later in queue order.
    size_handicap: float = 0.0

    @property
    def effective_recovery_timeout(self) -> float:
        return self.timeout if self.recovery_timeout is None else self.recovery_timeout

    def startup_timeout(self, requested: float | None) -> float:
        """A workload's own timeout, capped by the administrator's maximum."""
        if requested is None:
            return self.timeout
        cap = self.timeout if self.max_timeout is None else self.max_timeout
        return min(requested, cap)


# --------------------------------------------------------------------------- queue access
# Which namespaces may use which queue, and how high a workload's priority may be on
# it: Kueue's LocalQueue → ClusterQueue mapping, as data. Off unless `restrict` is
# true. The cluster's admission policy enforces the same rules at creation (its
# params are rendered from this block by `muster policy-params`); the core
# refuses whatever reaches it anyway, and says why.


@dataclass(frozen=True, slots=True)
class QueueGrant:
    """Who may use one queue, and within which priorities."""

    namespaces: tuple[str, ...] = ()  # "*" for every namespace
    priority_classes: tuple[str, ...] | None = None  # None: any PriorityClass
    max_priority: int = 0  # the highest muster.io/priority on the queue

    def opens_to(self, namespace: str) -> bool:
        return "*" in self.namespaces or namespace in self.namespaces


@dataclass(frozen=True, slots=True)
class QueueAccess:
    restrict: bool = False
    queues: Mapping[str, QueueGrant] = field(default_factory=dict)

    def refusal(
        self, queue: str, workload: str, priority: int, priority_class: str | None = None
    ) -> str | None:
        """Why a workload may not be admitted on `queue`, or None when it may.

        `priority` is the workload's: its PriorityClass's value when its pods have
        one, else `muster.io/priority`. A class the queue lists is allowed at its
        value; without a list, the value is bounded by `maxPriority` as an
        annotation is, so naming `system-node-critical` buys no priority.
        """
        if not self.restrict:
            return None
        namespace = workload.partition("/")[0] if "/" in workload else ""
        grant = self.queues.get(queue)
        if grant is None or not grant.opens_to(namespace):
            return f"queue {queue} is not open to namespace {namespace or '(none)'}"
        allowed = grant.priority_classes
        if priority_class is not None and allowed is not None:
            if priority_class not in allowed:
                names = ", ".join(allowed) or "none"
                return f"PriorityClass {priority_class} is not allowed on queue {queue} ({names})"
            return None
        if priority > grant.max_priority:
            named = f" (PriorityClass {priority_class})" if priority_class is not None else ""
            return f"priority {priority}{named} is above queue {queue}'s bound {grant.max_priority}"
        return None

    def to_dict(self) -> dict[str, Any]:
        queues: dict[str, Any] = {}
        for name, grant in self.queues.items():
            entry: dict[str, Any] = {
                "namespaces": list(grant.namespaces),
                "maxPriority": grant.max_priority,
            }
            if grant.priority_classes is not None:
                entry["priorityClasses"] = list(grant.priority_classes)
            queues[name] = entry
        return {"restrict": self.restrict, "queues": queues}


_ACCESS_KEYS = {"restrict", "queues"}
_GRANT_KEYS = {"namespaces", "priorityClasses", "maxPriority"}
_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


def _parse_access(doc: Any) -> QueueAccess:
    path = "queueAccess."
    if doc is None:
        return QueueAccess()
    if not isinstance(doc, Mapping):
        raise SettingsError("queueAccess: must be a mapping (restrict, queues)")
    check_keys(doc, _ACCESS_KEYS, path)
    raw = doc.get("queues") or {}
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{path}queues: must be a mapping of queue name to grant")
    grants: dict[str, QueueGrant] = {}
    for name, entry in raw.items():
        with part():
            where = f"{path}queues.{name}."
            if not isinstance(name, str) or not re.match(_NAME, name):
                raise SettingsError(f"{path}queues: {name!r} is not a valid queue name")
            if not isinstance(entry, Mapping):
                raise SettingsError(
                    f"{where[:-1]}: must be a mapping ({', '.join(sorted(_GRANT_KEYS))})"
                )
            check_keys(entry, _GRANT_KEYS, where)
            namespaces = _names(entry, "namespaces", where, allow_star=True) or ()
            classes = _names(entry, "priorityClasses", where, allow_star=False)
            bound = entry.get("maxPriority", 0)
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise SettingsError(f"{where}maxPriority: expected a whole number, got {bound!r}")
            grants[name] = QueueGrant(namespaces, classes, bound)
    return QueueAccess(boolean(doc, "restrict", False, path), grants)


def _names(
    doc: Mapping[str, Any], key: str, path: str, *, allow_star: bool
) -> tuple[str, ...] | None:
    if key not in doc or doc[key] is None:
        return None
    value = doc[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"{path}{key}: expected a list of names, got {value!r}")
    for v in value:
        if not (allow_star and v == "*") and not re.match(_NAME, v):
            raise SettingsError(f"{path}{key}: {v!r} is not a valid Kubernetes name")
    return tuple(value)


# --------------------------------------------------------------------------- settings

DEFAULT_QUEUE = "default"  # known whatever the settings name (the examples' queue)


@dataclass(frozen=True, slots=True)
class Settings:
    """Cluster-wide settings with per-queue overrides."""

    defaults: QueueSettings = field(default_factory=QueueSettings)
    block_admission: bool = False
    gpu_quota: int | None = None  # the whole cluster's
    queues: Mapping[str, QueueSettings] = field(default_factory=dict)
    raw_queues: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    access: QueueAccess = field(default_factory=QueueAccess)
    # Admit a gang only where its pods fit the nodes' free GPUs (`core.capacity`).
    capacity_check: bool = False
    # A gang that fits on one node goes to the fullest that holds it (`core.packing`).
    node_packing: bool = False

    def for_queue(self, queue: str) -> QueueSettings:
        return self.queues.get(queue, self.defaults)

    @property
    def named_queues(self) -> frozenset[str]:
        """The queues the settings name (`queues`, `queueAccess.queues`), `default` with them."""
        named = set(self.queues) | set(self.access.queues)
        return frozenset(named | {DEFAULT_QUEUE}) if named else frozenset()

    def refusal(
        self, queue: str, workload: str, priority: int, priority_class: str | None = None
    ) -> str | None:
        """Why the administrator's rules keep a workload on `queue` from admission, or None.

        Once the settings name any queue, a queue they do not name is refused: a
        made-up name (or `Default` for `default`) would escape the named queues'
        quotas and rules. Settings that name none (one pool for the cluster) take
        every queue; `default` is always known. Then `queueAccess` (`QueueAccess`).
        """
        # `named_queues` only when there are any (it is asked at every admission).
        named = self.named_queues if self.queues or self.access.queues else frozenset()
        if named and queue not in named:
            listed = sorted(named)
            shown = ", ".join(listed[:10]) + (
                f" and {len(listed) - 10} more" if len(listed) > 10 else ""
            )
            return f"queue {queue} is not configured (the settings name {shown})"
        return self.access.refusal(queue, workload, priority, priority_class)

    def to_dict(self) -> dict[str, Any]:
        """The settings document (only what differs from the defaults is omitted nowhere)."""
        doc: dict[str, Any] = {"blockAdmission": self.block_admission}
        if self.capacity_check:
            doc["capacityCheck"] = True
        if self.node_packing:
            doc["nodePacking"] = True
        if self.gpu_quota is not None:
            doc["gpuQuota"] = self.gpu_quota
        doc.update(queue_document(self.defaults))
        if self.raw_queues:
            doc["queues"] = {name: dict(raw) for name, raw in self.raw_queues.items()}
        if self.access != QueueAccess():
            doc["queueAccess"] = self.access.to_dict()
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


DEFAULT_SETTINGS = Settings()

_STRATEGY_KEYS = {
    "timestamp",
    "backoffLimitCount",
    "backoffLimitTimeout",
    "backoffBaseSeconds",
    "backoffMaxSeconds",
    "backoffJitter",
}
_FAULT_KEYS = {"limitCount", "evictAfter"}
_QUEUE_KEYS = {
    "workloadFaults",
    "timeout",
    "recoveryTimeout",
    "requeuingStrategy",
    "maxTimeout",
    "gpuQuota",
    "dryRun",
    "nodeReplacementEviction",
    "topologyLevels",
    "sizeHandicap",
}
_GLOBAL_KEYS = _QUEUE_KEYS | {
    "blockAdmission",
    "capacityCheck",
    "nodePacking",
    "queues",
    "queueAccess",
}
_CLUSTER_WIDE = ("blockAdmission", "capacityCheck", "nodePacking")


def parse_settings(doc: Mapping[str, Any] | None) -> Settings:
    """Settings from a mapping; raises `SettingsError` naming the offending field."""
    if doc is None:
        return DEFAULT_SETTINGS
    if not isinstance(doc, Mapping):
        raise SettingsError(f"settings must be a mapping, got {type(doc).__name__}")
    settings = DEFAULT_SETTINGS
    with collecting(SettingsError):
        settings = _parse_document(doc)
    return settings


def _parse_document(doc: Mapping[str, Any]) -> Settings:
    check_keys(doc, _GLOBAL_KEYS, "")
    defaults = QueueSettings()
    with part():
        defaults = _parse_queue(doc, QueueSettings(), "")
    block = boolean(doc, "blockAdmission", False, "")
    queues: dict[str, QueueSettings] = {}
    raw_queues: dict[str, Mapping[str, Any]] = {}
    raw = doc.get("queues") or {}
    if not isinstance(raw, Mapping):
        problem("queues: must be a mapping of queue name to settings")
        raw = {}
    for name, overrides in raw.items():
        with part():
            path = f"queues.{name}."
            if not isinstance(name, str) or not name:
                raise SettingsError(f"queues: queue names must be non-empty strings, got {name!r}")
            if not isinstance(overrides, Mapping):
                raise SettingsError(f"{path[:-1]}: must be a mapping of settings")
            for key in _CLUSTER_WIDE:
                if key in overrides:
                    problem(f"{path}{key}: {key} is cluster-wide and cannot be set per queue")
            check_keys(overrides, _QUEUE_KEYS | set(_CLUSTER_WIDE), path)
            queues[name] = _parse_queue(overrides, defaults, path)
            raw_queues[name] = dict(overrides)
    access = QueueAccess()
    with part():
        access = _parse_access(doc.get("queueAccess"))
    capacity_check = boolean(doc, "capacityCheck", False, "")
    node_packing = boolean(doc, "nodePacking", False, "")
    if not capacity_check:
        levels_need_capacity(doc, raw_queues)
        if node_packing:
            problem(
                "nodePacking: places gangs by the capacity check's plan, so it needs "
                "capacityCheck: true"
            )
    return Settings(
        defaults=defaults,
        block_admission=block,
        gpu_quota=whole_number(doc, "gpuQuota", None, "", minimum=0),
        queues=queues,
        raw_queues=raw_queues,
        access=access,
        capacity_check=capacity_check,
        node_packing=node_packing,
    )


def load_settings_text(text: str, source: str = "settings") -> Settings:
    """Settings from YAML or JSON text (JSON is YAML); errors name the source."""
    import yaml

    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise SettingsError(f"{source}: not valid YAML or JSON: {yaml_problem(exc)}") from exc
    try:
        return parse_settings(doc or {})
    except SettingsError as exc:
        raise exc.prefixed(source) from exc


def merge_settings(base: Settings, changes: Mapping[str, Any]) -> Settings:
    """Apply a partial settings document on top of `base` (for `muster settings set`)."""
    return parse_settings(merge_documents(base.to_dict(), changes))


def merge_documents(doc: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A new document: `changes` merged into `doc` key by key; a null removes the key."""
    merged = copy.deepcopy(dict(doc))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_documents(merged[key], value)
        elif value is None:
            merged.pop(key, None)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _parse_queue(doc: Mapping[str, Any], base: QueueSettings, path: str) -> QueueSettings:
    strategy = doc.get("requeuingStrategy", {}) or {}
    if not isinstance(strategy, Mapping):
        problem(f"{path}requeuingStrategy: must be a mapping")
        strategy = {}
    spath = f"{path}requeuingStrategy."
    check_keys(strategy, _STRATEGY_KEYS, spath)
    timeout, recovery, max_timeout = _parse_timeouts(doc, base, path)
    requeuing = _parse_requeuing(strategy, base, spath)
    gpu_quota = base.gpu_quota
    if "gpuQuota" in doc and path:
        gpu_quota = whole_number(doc, "gpuQuota", None, path, minimum=0)
    fault_limit, evict_after = _parse_faults(doc, base, path)
    return QueueSettings(
        timeout=timeout,
        recovery_timeout=recovery,
        **requeuing,
        max_timeout=max_timeout,
        gpu_quota=gpu_quota if path else None,
        dry_run=boolean(doc, "dryRun", base.dry_run, path),
        node_replacement_eviction=boolean(
            doc, "nodeReplacementEviction", base.node_replacement_eviction, path
        ),
        fault_limit_count=fault_limit,
        fault_evict_after=evict_after,
        topology_levels=parse_levels(doc, base.topology_levels, path),
        size_handicap=duration(doc, "sizeHandicap", base.size_handicap, path),
    )


def _parse_timeouts(
    doc: Mapping[str, Any], base: QueueSettings, path: str
) -> tuple[float, float | None, float | None]:
    """`timeout`, `recoveryTimeout` and `maxTimeout`; null unsets the last two."""
    timeout = _duration(doc, "timeout", base.timeout, path)
    if timeout <= 0:
        problem(f"{path}timeout: must be greater than 0s")
        timeout = base.timeout
    recovery = base.recovery_timeout
    if "recoveryTimeout" in doc:
        recovery = (
            None if doc["recoveryTimeout"] is None else _duration(doc, "recoveryTimeout", 0, path)
        )
    max_timeout = base.max_timeout
    if "maxTimeout" in doc:
        max_timeout = None if doc["maxTimeout"] is None else _duration(doc, "maxTimeout", 0, path)
        if max_timeout is not None and max_timeout < timeout:
            # A cap below the default would give a workload that asks for more time
            # less than one that asks for none.
            problem(
                f"{path}maxTimeout: {format_duration(max_timeout)} is below {path}timeout "
                f"{format_duration(timeout)}; it caps a workload's own muster.io/timeout, "
                "so it must be at least timeout (null: capped at timeout)"
            )
            max_timeout = base.max_timeout
    return timeout, recovery, max_timeout


def _parse_requeuing(
    strategy: Mapping[str, Any], base: QueueSettings, spath: str
) -> dict[str, Any]:
    """`requeuingStrategy`, as the `QueueSettings` fields it sets."""
    stamp = strategy.get("timestamp", base.timestamp.value)
    try:
        timestamp = Timestamp(stamp)
    except ValueError:
        problem(f"{spath}timestamp: must be 'Eviction' or 'Creation', got {stamp!r}")
        timestamp = base.timestamp
    limit_timeout = base.backoff_limit_timeout
    if "backoffLimitTimeout" in strategy:
        raw = strategy["backoffLimitTimeout"]
        limit_timeout = (
            None if raw is None else _duration(strategy, "backoffLimitTimeout", 0, spath)
        )
        if limit_timeout is not None and limit_timeout <= 0:
            problem(f"{spath}backoffLimitTimeout: must be greater than 0s")
            limit_timeout = base.backoff_limit_timeout
    limit_count = base.backoff_limit_count
    if "backoffLimitCount" in strategy:
        limit_count = whole_number(strategy, "backoffLimitCount", None, spath, minimum=0)
    base_seconds = number(strategy, "backoffBaseSeconds", base.backoff_base_seconds, spath)
    max_seconds = number(strategy, "backoffMaxSeconds", base.backoff_max_seconds, spath)
    for key, seconds in (("backoffBaseSeconds", base_seconds), ("backoffMaxSeconds", max_seconds)):
        if key in strategy:
            within_runtime(seconds, strategy[key], f"{spath}{key}")
    if max_seconds < base_seconds:
        problem(
            f"{spath}backoffMaxSeconds: {max_seconds:g} is below backoffBaseSeconds {base_seconds:g}"
        )
    jitter = number(strategy, "backoffJitter", base.backoff_jitter, spath)
    if jitter > 1:
        problem(f"{spath}backoffJitter: must be between 0 and 1, got {jitter:g}")
        jitter = base.backoff_jitter
    return {
        "timestamp": timestamp,
        "backoff_limit_count": limit_count,
        "backoff_limit_timeout": limit_timeout,
        "backoff_base_seconds": base_seconds,
        "backoff_max_seconds": max_seconds,
        "backoff_jitter": jitter,
    }


def _parse_faults(
    doc: Mapping[str, Any], base: QueueSettings, path: str
) -> tuple[int | None, float | None]:
    """`workloadFaults.limitCount` and `.evictAfter`; a queue inherits each one unset."""
    limit, after = base.fault_limit_count, base.fault_evict_after
    if "workloadFaults" not in doc:
        return limit, after
    faults = doc["workloadFaults"]
    fpath = f"{path}workloadFaults."
    if faults is None:
        return None, None
    if not isinstance(faults, Mapping):
        problem(f"{path}workloadFaults: must be a mapping (limitCount, evictAfter)")
        return limit, after
    check_keys(faults, _FAULT_KEYS, fpath)
    if "limitCount" in faults:
        limit = whole_number(faults, "limitCount", None, fpath, minimum=0)
    if "evictAfter" in faults:
        if faults["evictAfter"] is None:
            after = None
        else:
            after = _duration(faults, "evictAfter", 0.0, fpath)
            if after <= 0:
                problem(f"{fpath}evictAfter: must be greater than 0s")
                after = base.fault_evict_after
    return limit, after


def _duration(doc: Mapping[str, Any], key: str, default: float, path: str) -> float:
    return duration(doc, key, default, path, maximum=within_runtime)


def within_runtime(seconds: float, value: Any, field: str) -> bool:
    """False (with the mistake recorded) for a wait longer than the runtime can carry out."""
    if seconds > MAX_DURATION_SECONDS:
        problem(
            f"{field}: {value!r} is longer than 365d, the longest wait the runtime can carry "
            "out (a readiness timer is a Step Functions Standard execution, which lives at "
            "most one year)"
        )
        return False
    return True


def queue_document(q: QueueSettings) -> dict[str, Any]:
    """The settings document of one resolved queue (a queue's `gpuQuota` included)."""
    strategy: dict[str, Any] = {
        "timestamp": q.timestamp.value,
        "backoffBaseSeconds": q.backoff_base_seconds,
        "backoffMaxSeconds": q.backoff_max_seconds,
        "backoffJitter": q.backoff_jitter,
    }
    if q.backoff_limit_count is not None:
        strategy["backoffLimitCount"] = q.backoff_limit_count
    if q.backoff_limit_timeout is not None:
        strategy["backoffLimitTimeout"] = format_duration(q.backoff_limit_timeout)
    doc: dict[str, Any] = {
        "timeout": format_duration(q.timeout),
        "requeuingStrategy": strategy,
        "dryRun": q.dry_run,
        "nodeReplacementEviction": q.node_replacement_eviction,
    }
    if q.recovery_timeout is not None:
        doc["recoveryTimeout"] = format_duration(q.recovery_timeout)
    if q.max_timeout is not None:
        doc["maxTimeout"] = format_duration(q.max_timeout)
    if q.gpu_quota is not None:
        doc["gpuQuota"] = q.gpu_quota
    faults: dict[str, Any] = {}
    if q.fault_limit_count is not None:
        faults["limitCount"] = q.fault_limit_count
    if q.fault_evict_after is not None:
        faults["evictAfter"] = format_duration(q.fault_evict_after)
    if faults:
        doc["workloadFaults"] = faults
    if q.size_handicap:
        doc["sizeHandicap"] = format_duration(q.size_handicap)
    return doc | levels_document(q.topology_levels)
