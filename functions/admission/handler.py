"""Admission: requeues whose backoff ended, then an admission pass (reserved concurrency 1)."""

from __future__ import annotations

from typing import Any

from muster.aws.config import RuntimeConfig
from muster.aws.observability import logger, tracer
from muster.aws.records import admission_batch, sqs_processor
from muster.aws.wiring import build_control_plane
from muster.runtime.service import ControlPlane

processor = sqs_processor()
_plane: ControlPlane | None = None


def _default() -> ControlPlane:
    global _plane
    if _plane is None:
        _plane = build_control_plane(RuntimeConfig.from_env(), inline_admission=True)
    return _plane


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any], context: Any, plane: ControlPlane | None = None
) -> dict[str, Any]:
    return admission_batch(plane or _default(), event, context, processor)
