"""Sweeper: on a schedule, send again whatever a lost message should have moved on."""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from muster.aws.observability import logger, tracer
from muster.lambdas.wiring import PerContainer, build_sweeper
from muster.runtime.sweeper import Sweeper

deployed = PerContainer(build_sweeper)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any], context: LambdaContext, sweeper: Sweeper | None = None
) -> dict[str, Any]:
    report = (sweeper or deployed.get()[0]).run(time.time())
    return {
        "requeues": len(report.requeues),
        "deadlines": len(report.deadlines),
        "repairs": len(report.repairs),
        "admissionRequested": report.admission_requested,
        "quarantined": len(report.quarantined),
    }
