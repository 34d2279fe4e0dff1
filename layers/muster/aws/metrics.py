"""CloudWatch metrics in embedded metric format, through Powertools.

Each data point is its own EMF document (`single_metric`) so that per-event
dimensions such as an eviction's reason and cause stay with that point; the
`service` dimension is added to every one.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from muster import contract


class EmfMetrics:
    """Namespace and service from Powertools' environment variables, as the stack sets them."""

    def __init__(self, namespace: str | None = None, service: str | None = None) -> None:
        self.namespace = namespace or os.environ.get(
            contract.ENV_POWERTOOLS_METRICS_NAMESPACE, contract.METRICS_NAMESPACE
        )
        self.service = service or os.environ.get(
            contract.ENV_POWERTOOLS_SERVICE_NAME, contract.SERVICE_NAME
        )

    def _emit(self, name: str, unit: MetricUnit, value: float, dimensions: dict[str, str]) -> None:
        if is_metrics_disabled():  # Powertools' switch, which `single_metric` ignores
            return
        with single_metric(
            name=name,
            unit=unit,
            value=value,
            namespace=self.namespace,
            default_dimensions={"service": self.service},
        ) as metric:
            for key, dim in dimensions.items():
                metric.add_dimension(name=key, value=dim)

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self._emit(name, MetricUnit.Count, value, dimensions)

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        self._emit(name, MetricUnit.Seconds, value, dimensions)
