"""Tuner: one setting on one seed of `muster tune --on aws` (`muster.lambdas.tune`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from muster.aws.observability import logger, tracer
from muster.botocore_config import BOTOCORE_RETRIES
from muster.lambdas.tune import run_setting, tuner_bucket
from muster.sim.tune_item import run_item

_s3: Any = None


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext, s3: Any = None) -> dict[str, Any]:
    global _s3
    if s3 is None:
        if _s3 is None:
            import boto3

            _s3 = boto3.client("s3", config=BOTOCORE_RETRIES)
        s3 = _s3
    return run_setting(event, s3, tuner_bucket(), run_item)
