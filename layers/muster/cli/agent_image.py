"""`muster agent-image`: build the agent's image and push it to the stack's repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from muster.agent_image import (
    LOCAL_IMAGE,
    agent_dockerfile,
    build,
    checkout_root,
    describe_context,
    push,
    stack_repository,
)
from muster.cli import EXIT_OK
from muster.cli.command import reporting_handler
from muster.manifests import OUT_AGENT_IMAGE_REPOSITORY_URI, agent_image_tag


def agent_image_command(args: argparse.Namespace, out: TextIO) -> int:
    root = Path(args.context) if args.context else checkout_root()
    dockerfile = agent_dockerfile(root)
    tag = args.tag or agent_image_tag()
    stack = None
    if args.repository:
        repository = args.repository
    elif args.no_push:
        repository = LOCAL_IMAGE  # a build alone: no stack, no AWS
    else:
        stack = stack_repository(args.stack, args.region, args.endpoint)
        repository = stack.outputs[OUT_AGENT_IMAGE_REPOSITORY_URI]
    image = f"{repository}:{tag}"
    print(describe_context(root, dockerfile), file=sys.stderr)
    build(dockerfile, root, image)
    if args.no_push:
        print(image, file=out)
        return EXIT_OK
    if stack is None:
        import boto3

        session: Any = boto3.session.Session(region_name=args.region)
    else:
        session = stack.session
    push(image, repository, session)
    print(image, file=out)
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent-image",
        help="build the agent image from deploy/agent.Dockerfile and push it to the stack's repository",
        description=(
            "Build the agent's image (docker build -f deploy/agent.Dockerfile), log in to the "
            "stack's ECR registry and push it, tagged with this version, where "
            "`muster manifests` expects it. Needs Docker."
        ),
    )
    p.add_argument("--stack", help="CloudFormation stack (default Muster)")
    p.add_argument("--region", help="AWS region of the stack (default: your AWS configuration's)")
    p.add_argument("--endpoint", metavar="URL", help="a local deployment's AWS endpoint")
    p.add_argument("--repository", help="push here instead of the stack's repository")
    p.add_argument("--tag", help=f"image tag (default {agent_image_tag()}, this version)")
    p.add_argument("--context", metavar="DIR", help="build context (default: this checkout)")
    p.add_argument(
        "--no-push",
        action="store_true",
        help=f"build only, without the stack or AWS (tagged {LOCAL_IMAGE}:TAG unless --repository)",
    )
    p.set_defaults(handler=reporting_handler(agent_image_command))
