"""Building the CDK app (shared by app.py, the tests and the local deployment)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.config import ConfigError, load_config
from infra.layer import REPO_ROOT, LayerBuilder
from infra.stack import MusterStack


def build_app(app: cdk.App, layer_builder: LayerBuilder | None = None) -> cdk.App:
    """Add the Muster stack (configured from the app's context) and cdk-nag's checks."""
    config = load_config(app.node.try_get_context)
    account = os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = os.environ.get("CDK_DEFAULT_REGION")
    MusterStack(
        app,
        config.stack_name,
        config=config,
        layer_builder=layer_builder,
        description=f"Muster gang-scheduling control plane for EKS cluster {config.cluster_name}",
        env=cdk.Environment(account=account, region=region) if account and region else None,
    )
    # AwsSolutions at synth: an unacknowledged error fails the synth.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def cdk_json_context(path: Path = REPO_ROOT / "cdk.json") -> dict[str, Any]:
    """The `context` of cdk.json, for running the app without the CDK CLI."""
    return dict(json.loads(path.read_text()).get("context", {}))


def command_line_context(argv: Sequence[str]) -> dict[str, str]:
    """`-c key=value` pairs given to `python app.py`, as the CDK CLI takes them (strings)."""
    parser = argparse.ArgumentParser(
        prog="python app.py",
        description="Synthesise the Muster stack without the CDK CLI (into $CDK_OUTDIR or cdk.out).",
    )
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context value, as for `cdk synth -c` (e.g. muster:clusterName=my-cluster)",
    )
    pairs: dict[str, str] = {}
    for item in parser.parse_args(argv).context:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"-c {item!r}: expected KEY=VALUE, e.g. muster:clusterName=my-cluster")
        pairs[key] = value
    return pairs


def config_message(error: ConfigError) -> str:
    """What a synth with unusable configuration prints: every wrong key, one per line."""
    lines = "\n".join(f"  {e}" for e in error.errors)
    return (
        f"muster: the deployment configuration (cdk.json's context and -c KEY=VALUE) "
        f"has {len(error.errors)} mistake{'s' if len(error.errors) != 1 else ''}:\n{lines}"
    )
