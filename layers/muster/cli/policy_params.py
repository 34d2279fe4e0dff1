"""`muster policy-params`: the admission policies' params ConfigMap, from a settings file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from muster.cli import EXIT_BAD_INPUT, EXIT_OK
from muster.core.settings import SettingsError, load_settings_text
from muster.kube.policy_params import DEFAULT_OWNER_CONTROLLERS, render


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "policy-params",
        help="render the admission policies' params ConfigMap from a settings file",
        description=(
            "Print the ConfigMap muster-system/muster-policy-params for the settings' "
            "queueAccess block; pipe it to `kubectl apply -f -`."
        ),
    )
    p.add_argument("--settings", required=True, help="settings file (YAML or JSON)")
    p.add_argument(
        "--owner-controller",
        action="append",
        default=None,
        help="user name of a controller whose children are exempt (repeatable; "
        "default: the JobSet and Kubeflow training operator service accounts)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings_text(Path(args.settings).read_text(), args.settings)
    except (OSError, SettingsError) as exc:
        print(f"muster policy-params: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    owners = args.owner_controller or DEFAULT_OWNER_CONTROLLERS
    yaml.safe_dump(render(settings, owners), sys.stdout, sort_keys=False)
    return EXIT_OK
