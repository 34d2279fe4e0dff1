"""`muster manifests`: the cluster side, rendered from the deployed stack's outputs."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any, TextIO

from muster.admin.errors import BadInput
from muster.cli import EXIT_OK
from muster.cli.command import reporting_handler, write_output_file
from muster.contract import DEFAULT_STACK_NAME
from muster.manifests import (
    agent_image_tag,
    dump,
    load_documents,
    render,
    shipped_manifests_dir,
    stack_outputs,
)


def manifests_command(args: argparse.Namespace, out: TextIO) -> int:
    params = None
    if args.settings:
        from muster.core.settings import SettingsError, load_settings_text
        from muster.kube.policy_params import render as render_params

        try:
            settings = load_settings_text(Path(args.settings).read_text(), args.settings)
        except OSError as exc:
            raise BadInput(f"{args.settings}: {exc.strerror or exc}") from None
        except SettingsError as exc:
            raise BadInput(str(exc)) from None
        params = render_params(settings)
    directory = Path(args.manifests) if args.manifests else shipped_manifests_dir()
    documents = load_documents(directory)
    stack = stack_outputs(args.stack, args.region, args.endpoint)
    rendered = render(documents, stack.outputs, image=args.image, params=params)
    if args.output:
        text = io.StringIO()
        dump(rendered, stack.name, text)
        write_output_file(Path(args.output), text.getvalue())
        print(f"wrote {args.output} ({len(rendered)} objects)", file=sys.stderr)
    else:
        dump(rendered, stack.name, out)
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "manifests",
        help="the cluster-side manifests with the deployed stack's outputs filled in",
        description=(
            "Read the stack's outputs (bus, region, cluster, the agent's namespace, service "
            "account and image repository) and print the manifests of deploy/kubernetes/ "
            "with them filled in, in the order `kubectl apply -f` needs."
        ),
    )
    p.add_argument("--stack", help=f"CloudFormation stack (default {DEFAULT_STACK_NAME})")
    p.add_argument("--region", help="AWS region of the stack (default: your AWS configuration's)")
    p.add_argument(
        "--endpoint", metavar="URL", help="a local deployment's AWS endpoint (muster local --port)"
    )
    p.add_argument(
        "--image",
        help="the agent image (default: the stack's repository, tagged "
        f"{agent_image_tag()}, as `make agent-image` pushes it)",
    )
    p.add_argument(
        "--settings", help="render the policies' params from this settings file's queueAccess"
    )
    p.add_argument(
        "--manifests", metavar="DIR", help="the manifests to fill in (deploy/kubernetes)"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.set_defaults(handler=reporting_handler(manifests_command))
