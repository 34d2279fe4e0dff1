"""Sweeper: on a schedule, send again whatever a lost message should have moved on."""

from __future__ import annotations

import time
from typing import Any

from muster.aws.config import RuntimeConfig
from muster.aws.observability import logger, tracer
from muster.aws.wiring import build_sweeper
from muster.runtime.sweeper import Sweeper

_sweeper: Sweeper | None = None


def _default() -> Sweeper:
    global _sweeper
    if _sweeper is None:
        _sweeper = build_sweeper(RuntimeConfig.from_env())
    return _sweeper


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any, sweeper: Sweeper | None = None) -> dict[str, Any]:
    report = (sweeper or _default()).run(time.time())
    return {
        "requeues": len(report.requeues),
        "deadlines": len(report.deadlines),
        "repairs": len(report.repairs),
        "admissionRequested": report.admission_requested,
        "quarantined": len(report.quarantined),
    }
