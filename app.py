#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy`, or `python app.py`.

Configuration comes from cdk.json context; see the README's Deploy section.
Run directly (without the CDK CLI), the app reads cdk.json's context itself
and writes to `$CDK_OUTDIR` (default `cdk.out`).
"""

from __future__ import annotations

import os

# Deprecation notices from inside aws-cdk-lib are not actionable here.
os.environ.setdefault("JSII_DEPRECATED", "quiet")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk

from infra.app import build_app, cdk_json_context

if "CDK_CLI_VERSION" in os.environ or "CDK_CONTEXT_JSON" in os.environ:
    app = cdk.App()  # under the CDK CLI: it passes the context and the output folder
else:
    app = cdk.App(context=cdk_json_context(), outdir=os.environ.get("CDK_OUTDIR") or "cdk.out")
build_app(app).synth()
