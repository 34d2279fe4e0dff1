"""Reading Kueue's configuration: the path from a Kueue install to Muster's settings.

Kueue configures `waitForPodsReady` in its manager's `Configuration`
(`apiVersion: config.kueue.x-k8s.io/v1beta1` or `v1beta2`). Muster keeps the
same names, so the block carries over field by field; what differs is the
defaults, which depend on the API version, so the import writes every value
Kueue would use explicitly and the result behaves as the source did whatever
Muster's own defaults are. Everything else in a Configuration is named in the
notes, each labelled with what Muster has for it: a counterpart under another
name or form (`in Muster`), nothing (`no equivalent`: most of it configures
Kueue's own controller and has no meaning outside the cluster), an integration
Muster does not handle (`not supported`), or a field it does not know (`not
read`). The ConfigMap that holds the Configuration in a Kueue install
(`kueue-manager-config`, key `controller_manager_config.yaml`) is read as the
Configuration it holds, so what `kubectl get configmap -o yaml` prints imports as
it is. Every mistake is reported at once, each with its path.

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

import yaml

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

# What a note says Muster has for a part of Kueue's configuration.
IN_MUSTER = "in Muster"  # a counterpart under another name or form
NO_EQUIVALENT = "no equivalent"
NOT_SUPPORTED = "not supported"
NOT_READ = "not read"  # a field Muster does not know, or outside what is read

# Other parts, each with what Muster has instead (or why it has nothing).
_OTHER_KEYS = {
    "manageJobsWithoutQueueName": (
        IN_MUSTER,
        "only workloads labelled muster.io/queue are managed; unlabelled jobs run as if "
        "Muster were not there",
    ),
    "managedJobsNamespaceSelector": (
        IN_MUSTER,
        "no namespace selector; queueAccess says which namespaces may use which queue",
    ),
    "fairSharing": (NO_EQUIVALENT, "Muster orders by priority, then by the requeuing timestamp"),
    "admissionFairSharing": (NO_EQUIVALENT, "Muster has no usage-based ordering"),
    "multiKueue": (NO_EQUIVALENT, "Muster manages one cluster per deployment"),
    "resources": (
        NO_EQUIVALENT,
        "Muster counts GPUs from pod requests (gpuQuota, capacityCheck) and does not "
        "transform resources",
    ),
    "objectRetentionPolicies": (
        IN_MUSTER,
        "a per-workload history with a TTL (the stack's history retention)",
    ),
    "featureGates": (NO_EQUIVALENT, "Kueue's feature gates have no meaning for Muster"),
}

# Where a Kueue install keeps the manager's Configuration (Kueue's own manifests and
# Helm chart: the ConfigMap `kueue-manager-config`, this key).
CONFIGMAP_KEY = "controller_manager_config.yaml"


@dataclass(frozen=True, slots=True)
class Note:
    """One part of a Kueue configuration that does not carry over as it is."""

    label: str  # IN_MUSTER, NO_EQUIVALENT, NOT_SUPPORTED or NOT_READ
    text: str  # what it is, and what Muster has for it

    def __str__(self) -> str:
        return f"{self.label}: {self.text}"


@dataclass
class Imported:
    """Muster's settings document from a Kueue source, and what did not carry over."""

    settings: dict[str, Any]
    source: str  # what the input was read as
    notes: list[Note] = field(default_factory=list)


def looks_like_kueue(doc: Any) -> bool:
    """A Kueue Configuration (or the ConfigMap that holds one), or a document with a
    `waitForPodsReady` block or `enable`."""
    if not isinstance(doc, Mapping):
        return False
    if is_configmap(doc):
        return True
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
    if is_configmap(doc):
        where, inner = configuration_in(doc)
        try:
            found = import_kueue(inner, api_version)
        except SettingsError as exc:
            raise exc.prefixed(where) from None
        found.source = f"{found.source} in {_configmap_name(doc)} ({where})"
        return found
    errors: list[str] = []
    notes: list[Note] = []
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
            Note(
                IN_MUSTER,
                "waitForPodsReady is off in this Configuration, so Kueue never evicts on a "
                "pods-ready timeout; the settings keep its values with dryRun: true (Muster "
                "reports what it would evict and evicts nothing); set dryRun: false to enforce",
            )
        )
    # The values are checked even when the document has other mistakes: one run names
    # them all. Unknown fields are not copied into `settings`, so nothing is named twice.
    try:
        parse_settings(settings)
    except SettingsError as exc:
        errors += [f"{prefix}{e}" for e in exc.errors]
    if errors:
        raise SettingsError(*errors)
    notes.append(
        Note(
            IN_MUSTER,
            "Kueue adds a random jitter of at most 0.01% to each backoff; "
            "requeuingStrategy.backoffJitter (0 here) spreads requeues by a fraction you choose",
        )
    )
    return Imported(settings, source, notes)


def is_configmap(doc: Mapping[str, Any]) -> bool:
    return doc.get("kind") == "ConfigMap" and str(doc.get("apiVersion") or "v1") == "v1"


def configuration_in(doc: Mapping[str, Any]) -> tuple[str, Any]:
    """(where, the document) of the Kueue Configuration a ConfigMap holds in its data:
    under `controller_manager_config.yaml`, or its only key that holds one."""
    data = doc.get("data")
    if not isinstance(data, Mapping) or not data:
        raise SettingsError(
            f"data: a ConfigMap with Kueue's Configuration has it under data.{CONFIGMAP_KEY}; "
            "this one has no data"
        )
    if CONFIGMAP_KEY in data:
        key = CONFIGMAP_KEY
    else:
        held = [k for k, v in data.items() if isinstance(v, str) and GROUP in v]
        if len(held) != 1:
            raise SettingsError(
                f"data: no key {CONFIGMAP_KEY} (where Kueue keeps its Configuration), and "
                + ("no other key holds one" if not held else f"several might: {', '.join(held)}")
                + f"; keys: {', '.join(map(str, data))}"
            )
        key = held[0]
    where = f"data.{key}"
    text = data[key]
    if not isinstance(text, str):
        raise SettingsError(f"{where}: expected the Configuration as YAML text")
    try:
        return where, yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise SettingsError(f"{where}: not valid YAML: {exc}") from None


def _configmap_name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = (
        f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
    )
    return f"ConfigMap {name}" if name else "a ConfigMap"


def _locate(
    doc: Mapping[str, Any],
    explicit: bool,
    api_version: str | None,
    errors: list[str],
    notes: list[Note],
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
        for key in sorted(set(doc) - {"waitForPodsReady"}, key=str):
            notes.append(Note(NOT_READ, f"{key} (only the waitForPodsReady block is read)"))
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
    notes: list[Note],
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
        notes.append(
            Note(
                IN_MUSTER,
                "featureGates.DisableWaitForPodsReady: true turns waitForPodsReady off "
                "(imported as dryRun: true)",
            )
        )
        return False
    return enable is not False  # a bare block may carry v1beta1's switch


def _other_parts(doc: Mapping[str, Any]) -> list[Note]:
    notes: list[Note] = []
    controller = sorted(k for k in doc if k in _CONTROLLER_KEYS)
    if controller:
        notes.append(
            Note(
                NO_EQUIVALENT,
                f"{', '.join(controller)}: configure Kueue's controller process (Muster runs "
                "outside the cluster; its agent is configured by `muster agent`)",
            )
        )
    for key, (label, why) in _OTHER_KEYS.items():
        if key in doc:
            notes.append(Note(label, f"{key}: {why}"))
    integrations = doc.get("integrations")
    if isinstance(integrations, Mapping):
        frameworks = integrations.get("frameworks") or []
        others = [f for f in frameworks if f not in _SUPPORTED_FRAMEWORKS]
        if others:
            notes.append(
                Note(
                    NOT_SUPPORTED,
                    f"integrations.frameworks: {', '.join(map(str, others))}; Muster handles "
                    "batch/job, jobset.x-k8s.io/jobset, kubeflow.org/pytorchjob and pod groups",
                )
            )
        extra = sorted(set(integrations) - {"frameworks"}, key=str)
        if extra:
            notes.append(
                Note(NO_EQUIVALENT, f"integrations.{', integrations.'.join(map(str, extra))}")
            )
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
        notes.append(Note(NOT_READ, f"{key} (no Muster equivalent known)"))
    return notes


def _unknown(prefix: str, key: Any, allowed: set[str]) -> str:
    hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
    suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
    return f"{prefix}{key}: not a field of Kueue's waitForPodsReady{suggestion}"


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value
