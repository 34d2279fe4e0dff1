"""The Powertools singletons every handler shares: one logger, one tracer.

Their service name comes from `POWERTOOLS_SERVICE_NAME`, which the stack sets to
`muster` (`muster.contract`), the name they fall back to elsewhere (local mode,
tests). The logger is named after the service, so the runtime's standard-library
loggers (`muster.runtime`) write through it as structured JSON with the
correlation id.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Tracer

from muster import contract

SERVICE = os.environ.get(contract.ENV_POWERTOOLS_SERVICE_NAME) or contract.SERVICE_NAME

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
