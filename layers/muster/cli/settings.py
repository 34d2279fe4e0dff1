"""`muster settings get | set | validate | import`: the run-time settings of a deployment.

`get` and `set` read settings through `Deployment.settings()`, the one path; `set`
validates the merged record with the core's parser before it writes, so a bad
value is named and nothing is written. `validate` and `import` work offline.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from muster.admin.errors import BadInput
from muster.admin.render import annotated_yaml, scalar
from muster.admin.settings import (
    apply_changes,
    imported_document,
    read_kueue,
    read_text,
    settings_changes,
    validated,
)
from muster.cli import EXIT_OK
from muster.cli.command import (
    connect_to,
    deployment_arguments,
    reporting_handler,
    write_output_file,
)
from muster.contract import LOCAL_STACK_NAME
from muster.core import load_settings_text
from muster.kueue import Imported


def get_command(args: argparse.Namespace, out: TextIO) -> int:
    deployment = connect_to(args)
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
        f"# deployment: MUSTER_SETTINGS of function {deployment.function_name} "
        f"({deployed_from(deployment.stack)})\n"
        + (
            f"# runtime record: version {version}, set with `muster settings set`\n"
            if version is not None
            else "# runtime record: none (nothing changed since the deployment)\n"
        )
        + "# each value's source is in its comment\n"
    )
    out.write(annotated_yaml(effective.to_dict(), sources.deployment, sources.record))
    return EXIT_OK


def deployed_from(stack: str) -> str:
    """Where a stack's deployment settings were written down."""
    if stack == LOCAL_STACK_NAME:
        return "the scenario's settings in scaled time, as `muster local` deployed them"
    return "muster:settings of cdk.json or -c at deploy time"


def set_command(args: argparse.Namespace, out: TextIO) -> int:
    changes = settings_changes(args.file, args.assignments)
    deployment = connect_to(args)
    change = apply_changes(deployment, changes)
    out.write(
        f"settings of cluster {deployment.config.cluster_name} updated"
        + (
            f" (runtime record version {change.record_version})"
            if change.record_version is not None
            else ""
        )
        + "\n"
    )
    if change.repaired:
        out.write("  (the record was invalid before; changes are shown from the deployment's)\n")
    for path, old, new in change.changed:
        out.write(
            f"  {path}: {scalar(old) if old is not None else '(unset)'} -> "
            f"{scalar(new) if new is not None else '(unset)'}\n"
        )
    if not change.changed:
        out.write("  (the effective settings did not change)\n")
    out.write(
        "admission pass requested; the functions pick up the change within their "
        "settings cache time (10 s)\n"
    )
    return EXIT_OK


def validate_command(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.file)
    text = read_text(path)
    kueue = _noted(read_kueue(text, path))
    if kueue is not None:
        out.write(
            f"{path}: read as a {kueue.source}; `muster settings import {path}` writes it "
            "as Muster's settings document\n"
        )
        text = json.dumps(kueue.settings)
    settings = validated(lambda: load_settings_text(text, str(path)))
    out.write(f"{path}: valid; the settings it describes, with defaults filled in:\n")
    out.write(yaml.safe_dump(settings.to_dict(), sort_keys=True))
    return EXIT_OK


def import_command(args: argparse.Namespace, out: TextIO) -> int:
    """Kueue's waitForPodsReady as Muster's settings document; what does not carry over on stderr."""
    path = Path(args.file)
    kueue = _noted(read_kueue(read_text(path), path, args.api_version, required=True))
    if kueue is None:  # pragma: no cover - required=True always imports or raises
        raise BadInput(f"{path}: not a Kueue configuration")
    document = imported_document(path, kueue)
    if args.output:
        write_output_file(Path(args.output), document)
        print(f"muster settings import: wrote {args.output}", file=sys.stderr)
    else:
        out.write(document)
    return EXIT_OK


def _noted(kueue: Imported | None) -> Imported | None:
    """What of a Kueue configuration does not carry over as it is, on stderr, each
    labelled with what Muster has for it (`in Muster`, `no equivalent`, ...)."""
    for note in kueue.notes if kueue is not None else ():
        print(note, file=sys.stderr)
    return kueue


def register(subparsers: Any) -> None:
    target = deployment_arguments()
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
            "Read a Kueue Configuration (config.kueue.x-k8s.io/v1beta1 or v1beta2), the "
            "ConfigMap that holds it (kubectl -n kueue-system get configmap "
            "kueue-manager-config -o yaml) or a bare waitForPodsReady block and write "
            "Muster's settings document, with Kueue's defaults for that version filled in. "
            "What does not carry over as it is is listed on stderr, each part with what "
            "Muster has for it. Offline: no AWS calls."
        ),
    )
    i.add_argument("file", help="Kueue configuration or its ConfigMap (YAML or JSON)")
    i.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    i.add_argument(
        "--api-version",
        choices=["v1beta1", "v1beta2"],
        help="whose defaults a bare block gets (default: v1beta1 if it has `enable`, else v1beta2)",
    )
    i.set_defaults(handler=reporting_handler(import_command))
