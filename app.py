#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy`, or `python app.py`.

Configuration comes from cdk.json's context and `-c key=value`, every key described
in docs/install.md ("Context keys"). Run directly (without the CDK CLI), the app reads cdk.json's
context itself, takes `-c key=value` as the CLI does, and writes to `$CDK_OUTDIR`
(default `cdk.out`). A configuration mistake ends it with every wrong key named
and exit code 2, as the `muster` command's bad input does.
"""

from __future__ import annotations

import os
import sys

# Deprecation notices from inside aws-cdk-lib are not actionable here.
os.environ.setdefault("JSII_DEPRECATED", "quiet")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk

from infra.app import build_app, cdk_json_context, command_line_context, config_message
from infra.config import ConfigError

if "CDK_CLI_VERSION" in os.environ or "CDK_CONTEXT_JSON" in os.environ:
    app = cdk.App()  # under the CDK CLI: it passes the context and the output folder
else:
    context = cdk_json_context() | command_line_context(sys.argv[1:])
    app = cdk.App(context=context, outdir=os.environ.get("CDK_OUTDIR") or "cdk.out")
try:
    build_app(app).synth()
except ConfigError as exc:
    print(config_message(exc), file=sys.stderr)
    sys.exit(2)
