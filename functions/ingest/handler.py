"""Ingest: agent events (EventBridge -> SQS) applied to the workloads they concern."""

from __future__ import annotations

from typing import Any

from muster.aws.config import RuntimeConfig
from muster.aws.observability import logger, tracer
from muster.aws.records import ingest_record, process_sqs, sqs_processor
from muster.aws.wiring import build_control_plane
from muster.runtime.service import ControlPlane

processor = sqs_processor()
_plane: ControlPlane | None = None
_config: RuntimeConfig | None = None


def _default() -> tuple[ControlPlane, RuntimeConfig]:
    global _plane, _config
    if _plane is None or _config is None:
        _config = RuntimeConfig.from_env()
        _plane = build_control_plane(_config)
    return _plane, _config


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(
    event: dict[str, Any],
    context: Any,
    plane: ControlPlane | None = None,
    cluster_name: str | None = None,
) -> dict[str, Any]:
    if plane is None or cluster_name is None:
        plane, config = _default()
        cluster_name = config.cluster_name
    name = cluster_name
    return process_sqs(event, context, processor, lambda body: ingest_record(plane, name, body))
