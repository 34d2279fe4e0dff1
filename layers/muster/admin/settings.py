"""`muster settings get | set | validate | import`: the run-time settings of a deployment.

`get` and `set` read settings through `Deployment.settings()`, the one path; `set`
validates the merged record with the core's parser before it writes, so a bad
value is named and nothing is written. `validate` and `import` work offline.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from muster.admin import deployment as found
from muster.admin.command import AdminError, listed, reporting_handler
from muster.admin.render import annotated_yaml, scalar
from muster.cli import EXIT_BAD_INPUT, EXIT_OK
from muster.core import Settings, SettingsError, load_settings_text
from muster.kueue import Imported, import_kueue, looks_like_kueue
from muster.retry import retry
from muster.runtime.ports import Conflict

SETTINGS_CONFLICT_RETRIES = 5


def get_command(args: argparse.Namespace, out: TextIO) -> int:
    deployment = found.connect_to(args)
    sources = deployment.settings()
    effective = sources.effective()
    if args.json:
        out.write(
            json.dumps(
                {
                    "effective": effective.to_dict(),
                    "deployment": sources.deployment,
                    "record": sources.record,
                    "recordVersion": sources.record_version,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
        return EXIT_OK
    version = sources.record_version
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
    out.write(annotated_yaml(effective.to_dict(), sources.deployment, sources.record))
    return EXIT_OK


def set_command(args: argparse.Namespace, out: TextIO) -> int:
    from muster.runtime.settings import update_settings

    changes = settings_changes(args.file, args.assignments)
    deployment = found.connect_to(args)
    store = deployment.store()
    sources = deployment.settings(store)
    # A bad record is what `set` repairs: the functions were using the deployment's settings.
    before = sources.base if sources.problem else sources.effective()
    try:
        # update_settings validates the merged record with the core's parser before
        # it writes: a bad value raises here and nothing is written. On a conflict
        # another administrator wrote meanwhile: the changes are merged into theirs.
        after = retry(
            lambda: _validate(lambda: update_settings(store, sources.base, changes)),
            attempts=SETTINGS_CONFLICT_RETRIES,
            retry_on=Conflict,
        )
    except Conflict:
        raise AdminError("the settings record kept changing meanwhile; try again") from None
    # New settings may admit someone (a longer quota, blockAdmission off, ...).
    deployment.messages().request_admission("settings changed", None)
    changed = _diff(before.to_dict(), after.to_dict())
    record = store.settings_record()
    out.write(
        f"settings of cluster {deployment.config.cluster_name} updated"
        + (f" (runtime record version {record[1]})" if record else "")
        + "\n"
    )
    if sources.problem:
        out.write("  (the record was invalid before; changes are shown from the deployment's)\n")
    for path, old, new in changed:
        out.write(
            f"  {path}: {scalar(old) if old is not None else '(unset)'} -> "
            f"{scalar(new) if new is not None else '(unset)'}\n"
        )
    if not changed:
        out.write("  (the effective settings did not change)\n")
    out.write(
        "admission pass requested; the functions pick up the change within their "
        "settings cache time (10 s)\n"
    )
    return EXIT_OK


def validate_command(args: argparse.Namespace, out: TextIO) -> int:
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


def import_command(args: argparse.Namespace, out: TextIO) -> int:
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
            + listed(exc.prefixed(str(path)).errors),
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


def _validate(check: Callable[[], Settings]) -> Settings:
    try:
        return check()
    except SettingsError as exc:
        raise AdminError(
            f"invalid settings, nothing written: {listed(exc.errors)}", EXIT_BAD_INPUT
        ) from None


def register(subparsers: Any, target: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("settings", help="show, change or check the run-time settings")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    g = actions.add_parser(
        "get", parents=[target], help="effective settings as YAML, with where each comes from"
    )
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.set_defaults(handler=reporting_handler(get_command))
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
    s.set_defaults(handler=reporting_handler(set_command))
    v = actions.add_parser("validate", help="check a settings document offline (no AWS calls)")
    v.add_argument("file", help="settings document (YAML or JSON)")
    v.set_defaults(handler=reporting_handler(validate_command))
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
    i.set_defaults(handler=reporting_handler(import_command))
