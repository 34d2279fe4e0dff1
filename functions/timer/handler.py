"""Timer: a readiness deadline fired; the core re-checks state and attempt before evicting."""

from __future__ import annotations

from typing import Any

from muster.aws.config import RuntimeConfig
from muster.aws.observability import logger, tracer
from muster.aws.records import process_sqs, sqs_processor, timer_record
from muster.aws.wiring import build_control_plane
from muster.runtime.service import ControlPlane

processor = sqs_processor()
_plane: ControlPlane | None = None


def _default() -> ControlPlane:
    global _plane
    if _plane is None:
        _plane = build_control_plane(RuntimeConfig.from_env())
    return _plane


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any], context: Any, plane: ControlPlane | None = None
) -> dict[str, Any]:
    active = plane or _default()
    return process_sqs(event, context, processor, lambda body: timer_record(active, body))
