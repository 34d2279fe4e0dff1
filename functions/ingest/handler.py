"""Ingest: agent events (EventBridge -> SQS) applied to the workloads they concern;
a workload's pod events in one batch are applied together (`muster.lambdas.ingest`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext
from muster.aws.observability import logger, tracer
from muster.lambdas.ingest import ingest_batch
from muster.lambdas.records import sqs_processor
from muster.lambdas.wiring import PerContainer, build_control_plane
from muster.runtime.service import ControlPlane

processor = sqs_processor()
deployed = PerContainer(build_control_plane)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any],
    context: LambdaContext,
    plane: ControlPlane | None = None,
    cluster_name: str | None = None,
) -> PartialItemFailureResponse:
    if plane is None or cluster_name is None:
        plane, config = deployed.get()
        cluster_name = config.cluster_name
    return ingest_batch(plane, cluster_name, event, context, processor)
