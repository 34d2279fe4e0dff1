"""Admission: requeues whose backoff ended, then an admission pass (reserved concurrency 1)."""

from __future__ import annotations

from functools import partial
from typing import Any

from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext
from muster.aws.observability import logger, tracer
from muster.lambdas.records import admission_batch, sqs_processor
from muster.lambdas.wiring import PerContainer, build_control_plane
from muster.runtime.service import ControlPlane

processor = sqs_processor()
deployed = PerContainer(partial(build_control_plane, inline_admission=True))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any], context: LambdaContext, plane: ControlPlane | None = None
) -> PartialItemFailureResponse:
    return admission_batch(plane or deployed.get()[0], event, context, processor)
