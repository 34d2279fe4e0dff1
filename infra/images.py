"""The agent's image repository: the stack creates it, `muster agent-image` fills it."""

from __future__ import annotations

import re

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ecr as ecr
from constructs import Construct

# Older images are expired so the repository does not grow without bound; this many
# stay, enough to roll back across several upgrades.
KEEP_IMAGES = 20


class AgentImageRepository(Construct):
    """ECR repository for the agent image, scanned on push, its tags immutable.

    Its name is the stack's, in lower case, with `-agent` (`muster-agent` for the
    default stack), one per stack as the stack is one per cluster; the stack's
    output `AgentImageRepositoryUri` names it. `muster agent-image` tags the image
    with Muster's version and `muster manifests` pins the agent's Deployment to that
    tag, so a tag must never move: pushing a version again is refused, and a new
    build is a new version (or its own `--tag`). A removal policy of `destroy`
    deletes it only once it is empty (docs/operating.md, uninstall)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stack_name: str,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=repository_name(stack_name),
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            removal_policy=removal_policy,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    description=f"keep the {KEEP_IMAGES} most recent agent images",
                    max_image_count=KEEP_IMAGES,
                )
            ],
        )


def repository_name(stack_name: str) -> str:
    """A valid ECR name from a stack name (letters, digits and single hyphens)."""
    base = re.sub(r"-+", "-", stack_name.lower()).strip("-")
    return f"{base}-agent"
