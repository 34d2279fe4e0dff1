"""The deployment's recent history as a trace for the simulator (`muster history export`).

It reads the history entries of the state table (see `muster.aws.history_scan`) and
turns each workload submitted since a moment into one row (`muster.sim.history_trace`),
the rows of the CSV that a scenario's `trace.path` accepts, so that `muster
simulate` and `muster tune` replay the cluster's own last week.
"""

from __future__ import annotations

from muster.admin.deployment import Deployment
from muster.sim.history_trace import TraceRow, trace_rows


def recent_trace(deployment: Deployment, since: float, now: float) -> list[TraceRow]:
    """One row per workload submitted since `since`, from the deployment's history entries."""
    from muster.aws.history_scan import scan_history
    from muster.botocore_config import BOTOCORE_RETRIES

    client = deployment.session.client("dynamodb", config=BOTOCORE_RETRIES)
    histories = scan_history(client, deployment.config.table_name, since)
    return trace_rows(histories, since, now)
