"""The run-time settings of a deployment: changes checked, merged and written; documents checked.

`apply_changes` reads settings through `Deployment.settings()`, the one path, and
validates the merged record with the core's parser before it writes, so a bad
value is named and nothing is written. Reading and checking a document, and
importing Kueue's configuration, work offline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from muster.admin.deployment import Deployment
from muster.admin.errors import AdminError, BadInput, listed
from muster.core import Settings, SettingsError
from muster.core.fields import yaml_problem
from muster.kueue import Imported, import_kueue, looks_like_kueue
from muster.retry import retry
from muster.runtime.messages import SETTINGS_CHANGED
from muster.runtime.ports import Conflict

SETTINGS_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class SettingsChange:
    """What `apply_changes` did: the effective settings before and after, and what differs."""

    before: Settings
    after: Settings
    changed: list[tuple[str, Any, Any]]  # (dotted path, old value, new value)
    record_version: int | None
    repaired: bool  # the record was invalid before: `before` is the deployment's settings


def apply_changes(deployment: Deployment, changes: dict[str, Any]) -> SettingsChange:
    """Merge `changes` into the runtime record, validated first, then ask for an admission pass."""
    from muster.runtime.settings import update_settings

    store = deployment.store()
    sources = deployment.settings(store)
    # A bad record is what `set` repairs: the functions were using the deployment's settings.
    before = sources.base if sources.problem else sources.effective()
    try:
        # update_settings validates the merged record with the core's parser before
        # it writes: a bad value raises here and nothing is written. On a conflict
        # another administrator wrote meanwhile: the changes are merged into theirs.
        after = retry(
            lambda: validated(lambda: update_settings(store, sources.base, changes), writes=True),
            attempts=SETTINGS_CONFLICT_RETRIES,
            retry_on=Conflict,
        )
    except Conflict:
        raise AdminError("the settings record kept changing meanwhile; try again") from None
    # New settings may admit someone (a longer quota, blockAdmission off, ...), and
    # bring back deadlines (dryRun off): the admission function acts on both.
    deployment.messages().request_admission(SETTINGS_CHANGED, None)
    changed = _diff(before.to_dict(), after.to_dict())
    record = store.settings_record()
    return SettingsChange(
        before, after, changed, record[1] if record else None, bool(sources.problem)
    )


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror or exc}") from None


def read_kueue(
    text: str, path: Path, api_version: str | None = None, *, required: bool = False
) -> Imported | None:
    """The Kueue document in `text` imported, or None if it is not one (and not `required`)."""
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: not valid YAML or JSON: {yaml_problem(exc)}") from None
    if not required and not looks_like_kueue(doc):
        return None
    try:
        return import_kueue(doc, api_version)
    except SettingsError as exc:
        raise BadInput(
            "invalid Kueue configuration: " + listed(exc.prefixed(str(path)).errors)
        ) from None


def imported_document(path: Path, kueue: Imported) -> str:
    """Kueue's waitForPodsReady as Muster's settings document, saying where it came from."""
    return (
        f"# Muster settings imported from {path} ({kueue.source}).\n"
        "# Kueue's defaults for that version are written out, so nothing depends on\n"
        "# Muster's own defaults. Check with: muster settings validate FILE\n"
        + yaml.safe_dump(kueue.settings, sort_keys=False)
    )


def settings_changes(file: str | None, assignments: Sequence[str]) -> dict[str, Any]:
    """A partial settings document from a YAML/JSON file and `dotted.key=value` pairs."""
    changes: dict[str, Any] = {}
    if file:
        path = Path(file)
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise BadInput(f"{path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise BadInput(f"{path}: not valid YAML or JSON: {yaml_problem(exc)}") from None
        if not isinstance(doc, dict):
            raise BadInput(f"{path}: expected a mapping of settings, got {type(doc).__name__}")
        changes = doc
    for pair in assignments:
        key, sep, text = pair.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise BadInput(
                f"{pair!r}: expected KEY=VALUE with a dotted key, e.g. "
                "requeuingStrategy.backoffLimitCount=3 or queues.spot.timeout=10m"
            )
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        node = changes
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise BadInput(f"{'.'.join(parts[: i + 1])}: is a value, cannot set {key.strip()}")
            node = child
        node[parts[-1]] = value
    if not changes:
        raise BadInput(
            "nothing to set: give --file FILE or KEY=VALUE pairs (KEY=null resets a key "
            "to the deployment's value)"
        )
    return changes


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


def validated(check: Callable[[], Settings], *, writes: bool = False) -> Settings:
    """The settings `check` parses; a bad value is `BadInput` naming every wrong field
    (and, for a `check` that `writes`, saying that nothing was written)."""
    try:
        return check()
    except SettingsError as exc:
        said = "invalid settings, nothing written" if writes else "invalid settings"
        raise BadInput(f"{said}: {listed(exc.errors)}") from None
