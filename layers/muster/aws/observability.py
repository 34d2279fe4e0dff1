"""The Powertools singletons every handler shares: one logger, one tracer.

The logger is named after the service (`muster`), so the runtime's standard-library loggers
(`muster.runtime`) write through it as structured JSON with the correlation id.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Tracer

logger = Logger(service="muster")
tracer = Tracer(service="muster")
