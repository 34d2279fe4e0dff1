"""Timer: a readiness deadline fired; the core re-checks state and attempt before evicting."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext
from muster.aws.observability import logger, tracer
from muster.lambdas.records import sqs_processor, timer_batch
from muster.lambdas.wiring import PerContainer, build_control_plane
from muster.runtime.service import ControlPlane

processor = sqs_processor()
deployed = PerContainer(build_control_plane)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any], context: LambdaContext, plane: ControlPlane | None = None
) -> PartialItemFailureResponse:
    return timer_batch(plane or deployed.get()[0], event, context, processor)
