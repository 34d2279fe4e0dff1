"""Reading Kueue's configuration: the path from a Kueue install to Muster's settings.

Kueue configures `waitForPodsReady` in its manager's `Configuration`
(`apiVersion: config.kueue.x-k8s.io/v1beta1` or `v1beta2`). Muster keeps the
same names, so the block carries over field by field; what differs is the
defaults, which depend on the API version, so the import writes every value
Kueue would use explicitly and the result behaves as the source did whatever
Muster's own defaults are. Everything else in a Configuration is named in the
notes: some of it has a Muster counterpart under another name, most of it
configures Kueue's own controller and has no meaning outside the cluster.

Defaults, as Kueue's `apis/config/<version>/defaults.go` sets them:
- v1beta1: `waitForPodsReady` is off unless `enable: true`; when on, `timeout`
  5m and `blockAdmission` true.
- v1beta2: no `enable` field; the block is always on (unless the
  `DisableWaitForPodsReady` feature gate is set) with `timeout` 30m and
  `blockAdmission` false.
- Both: `recoveryTimeout` defaults to `timeout`; `requeuingStrategy.timestamp`
  `Eviction`, `backoffBaseSeconds` 60, `backoffMaxSeconds` 3600,
  `backoffLimitCount` unset (requeue forever).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.core.settings import SettingsError, parse_settings

GROUP = "config.kueue.x-k8s.io"
VERSIONS = ("v1beta1", "v1beta2")
KIND = "Configuration"

_BLOCK_KEYS = {"enable", "timeout", "blockAdmission", "requeuingStrategy", "recoveryTimeout"}
_STRATEGY_KEYS = {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}
_DEFAULTS = {
    "v1beta1": {"timeout": "5m", "blockAdmission": True},
    "v1beta2": {"timeout": "30m", "blockAdmission": False},
}

# Kueue's job integrations Muster handles itself (muster.kube.conventions).
_SUPPORTED_FRAMEWORKS = {"batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob", "pod"}

# Parts of a Configuration that configure Kueue's own controller process.
_CONTROLLER_KEYS = {
    "namespace",
    "webhook",
    "leaderElection",
    "metrics",
    "health",
    "pprofBindAddress",
    "controller",
    "tls",
    "clientConnection",
    "internalCertManagement",
    "visibilityServer",
    "queueVisibility",
}

# Other parts, each with what Muster has instead (or why it has nothing).
_OTHER_KEYS = {
    "manageJobsWithoutQueueName": (
        "Muster manages only workloads labelled muster.io/queue; unlabelled jobs run "
        "as if Muster were not there"
    ),
    "managedJobsNamespaceSelector": (
        "Muster has no namespace selector; queueAccess says which namespaces may use which queue"
    ),
    "fairSharing": "no equivalent: Muster orders by priority, then by the requeuing timestamp",
    "admissionFairSharing": "no equivalent: Muster has no usage-based ordering",
    "multiKueue": "no equivalent: Muster manages one cluster per deployment",
    "resources": (
        "no equivalent: Muster counts GPUs from pod requests (gpuQuota, capacityCheck) and "
        "does not transform resources"
    ),
    "objectRetentionPolicies": (
        "no equivalent: Muster keeps a per-workload history with a TTL "
        "(the stack's history retention)"
    ),
    "featureGates": "Kueue's feature gates have no meaning for Muster",
}


@dataclass
class Imported:
    """Muster's settings document from a Kueue source, and what did not carry over."""

    settings: dict[str, Any]
    source: str  # what the input was read as
    notes: list[str] = field(default_factory=list)


def looks_like_kueue(doc: Any) -> bool:
    """A Kueue Configuration, or a document with a `waitForPodsReady` block or `enable`."""
    if not isinstance(doc, Mapping):
        return False
    api = doc.get("apiVersion")
    if isinstance(api, str) and api.startswith(f"{GROUP}/"):
        return True
    return "waitForPodsReady" in doc or "enable" in doc


def import_kueue(doc: Any, api_version: str | None = None) -> Imported:
    """Muster's settings from a Kueue `Configuration` or a bare `waitForPodsReady` block.

    A bare block (no apiVersion) is read with `api_version`'s defaults: by default
    v1beta1's when it has v1beta1's `enable` switch, v1beta2's otherwise. Raises
    `SettingsError` with every mistake and its path; the result is checked by the
    core's parser before it is returned.
    """
    if not isinstance(doc, Mapping):
        raise SettingsError(
            f"expected a Kueue Configuration or a waitForPodsReady block, got {type(doc).__name__}"
        )
    errors: list[str] = []
    notes: list[str] = []
    explicit = "apiVersion" in doc or "kind" in doc
    version, source, block_path, found = _locate(doc, explicit, api_version, errors, notes)
    prefix = f"{block_path}." if block_path else ""
    block = _block(found, block_path, prefix, version, explicit, errors)
    enabled = _enabled(doc, block, version, block_path, errors, notes)
    settings: dict[str, Any] = dict(_DEFAULTS[version])
    for key in ("timeout", "recoveryTimeout", "blockAdmission"):
        if block.get(key) is not None:
            settings[key] = block[key]
    settings["requeuingStrategy"] = _requeuing_strategy(block, prefix, errors)
    if not enabled:
        settings["dryRun"] = True
        notes.append(
            "waitForPodsReady is off in this Configuration, so Kueue never evicts on a "
            "pods-ready timeout; the settings keep its values with dryRun: true (Muster "
            "reports what it would evict and evicts nothing); set dryRun: false to enforce"
        )
    if not errors:
        try:
            parse_settings(settings)
        except SettingsError as exc:
            errors += [f"{prefix}{e}" for e in exc.errors]
    if errors:
        raise SettingsError(*errors)
    notes.append(
        "Kueue adds a random jitter of at most 0.01% to each backoff; Muster's "
        "requeuingStrategy.backoffJitter (0 here) spreads requeues by a fraction you choose"
    )
    return Imported(settings, source, notes)


def _locate(
    doc: Mapping[str, Any],
    explicit: bool,
    api_version: str | None,
    errors: list[str],
    notes: list[str],
) -> tuple[str, str, str, Any]:
    """(version, source, path of the waitForPodsReady block, the block) of a document."""
    if api_version is None:
        inner = doc.get("waitForPodsReady", doc)
        api_version = "v1beta1" if isinstance(inner, Mapping) and "enable" in inner else "v1beta2"
    if explicit:
        version = _version(doc, errors)
        source = f"Kueue Configuration {GROUP}/{version}"
        block_path = "waitForPodsReady"
        block = doc.get("waitForPodsReady")
        notes += _other_parts(doc)
    elif "waitForPodsReady" in doc:
        version = api_version
        source = f"waitForPodsReady block (defaults of {GROUP}/{version})"
        block_path = "waitForPodsReady"
        block = doc["waitForPodsReady"]
        for key in sorted(set(doc) - {"waitForPodsReady"}):
            notes.append(f"{key}: not read (only the waitForPodsReady block is)")
    else:
        version = api_version
        source = f"waitForPodsReady block (defaults of {GROUP}/{version})"
        block_path = ""
        block = doc
    if version not in VERSIONS:
        version = "v1beta2"
    return version, source, block_path, block


def _block(
    block: Any, block_path: str, prefix: str, version: str, explicit: bool, errors: list[str]
) -> Mapping[str, Any]:
    """The waitForPodsReady block ({} if absent or not a mapping), its unknown keys reported."""
    if block is None:
        block = {}
    if not isinstance(block, Mapping):
        errors.append(f"{block_path or 'waitForPodsReady'}: must be a mapping")
        block = {}
    for key in block:
        if key not in _BLOCK_KEYS or (key == "enable" and version == "v1beta2" and explicit):
            errors.append(_unknown(prefix, key, _BLOCK_KEYS))
    return block


def _requeuing_strategy(block: Mapping[str, Any], prefix: str, errors: list[str]) -> dict[str, Any]:
    """Kueue's requeuingStrategy with its defaults filled in (Muster's field names are Kueue's)."""
    strategy = block.get("requeuingStrategy") or {}
    if not isinstance(strategy, Mapping):
        errors.append(f"{prefix}requeuingStrategy: must be a mapping")
        strategy = {}
    for key in strategy:
        if key not in _STRATEGY_KEYS:
            errors.append(_unknown(f"{prefix}requeuingStrategy.", key, _STRATEGY_KEYS))
    requeuing = {
        "timestamp": strategy.get("timestamp") or "Eviction",
        "backoffBaseSeconds": _or(strategy.get("backoffBaseSeconds"), 60),
        "backoffMaxSeconds": _or(strategy.get("backoffMaxSeconds"), 3600),
    }
    if strategy.get("backoffLimitCount") is not None:
        requeuing["backoffLimitCount"] = strategy["backoffLimitCount"]
    return requeuing


def _version(doc: Mapping[str, Any], errors: list[str]) -> str:
    api = doc.get("apiVersion")
    kind = doc.get("kind")
    group, _, version = str(api or "").partition("/")
    if group != GROUP or version not in VERSIONS:
        known = " or ".join(f"{GROUP}/{v}" for v in VERSIONS)
        errors.append(f"apiVersion: expected {known}, got {api!r}")
    if kind != KIND:
        errors.append(f"kind: expected {KIND}, got {kind!r}")
    return version


def _enabled(
    doc: Mapping[str, Any],
    block: Mapping[str, Any],
    version: str,
    block_path: str,
    errors: list[str],
    notes: list[str],
) -> bool:
    """Whether Kueue would enforce waitForPodsReady with this configuration."""
    prefix = f"{block_path}." if block_path else ""
    enable = block.get("enable")
    if enable is not None and not isinstance(enable, bool):
        errors.append(f"{prefix}enable: expected true or false, got {enable!r}")
    if version == "v1beta1":
        return enable is True
    gates = doc.get("featureGates") if block_path else None
    if isinstance(gates, Mapping) and gates.get("DisableWaitForPodsReady") is True:
        notes.append("featureGates.DisableWaitForPodsReady: true turns waitForPodsReady off")
        return False
    return enable is not False  # a bare block may carry v1beta1's switch


def _other_parts(doc: Mapping[str, Any]) -> list[str]:
    notes: list[str] = []
    controller = sorted(k for k in doc if k in _CONTROLLER_KEYS)
    if controller:
        notes.append(
            f"{', '.join(controller)}: configure Kueue's controller process; no equivalent "
            "(Muster runs outside the cluster; its agent is configured by `muster agent`)"
        )
    for key, why in _OTHER_KEYS.items():
        if key in doc:
            notes.append(f"{key}: {why}")
    integrations = doc.get("integrations")
    if isinstance(integrations, Mapping):
        frameworks = integrations.get("frameworks") or []
        others = [f for f in frameworks if f not in _SUPPORTED_FRAMEWORKS]
        if others:
            notes.append(
                f"integrations.frameworks: {', '.join(map(str, others))} not supported; Muster "
                "handles batch/job, jobset.x-k8s.io/jobset, kubeflow.org/pytorchjob and pod "
                "groups"
            )
        extra = sorted(set(integrations) - {"frameworks"})
        if extra:
            notes.append(f"integrations.{', integrations.'.join(extra)}: no equivalent")
    known = (
        _CONTROLLER_KEYS
        | set(_OTHER_KEYS)
        | {
            "apiVersion",
            "kind",
            "waitForPodsReady",
            "integrations",
        }
    )
    for key in sorted(set(doc) - known, key=str):
        notes.append(f"{key}: not read (no Muster equivalent known)")
    return notes


def _unknown(prefix: str, key: Any, allowed: set[str]) -> str:
    hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
    suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
    return f"{prefix}{key}: not a field of Kueue's waitForPodsReady{suggestion}"


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
