"""Building the CDK app (shared by app.py, the tests and the local deployment)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.config import load_config
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
