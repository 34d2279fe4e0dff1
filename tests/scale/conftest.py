"""DynamoDB on moto with the scale harness's limits on a client, and the stack's budgets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws
from muster.harness.limits import DynamoLimits, ManualTimeline
from muster.harness.scale import Budgets
from muster.local.resources import create_resources

from infra import constants

TIMEOUTS = constants.FUNCTION_TIMEOUT_SECONDS
BATCH_SIZES = constants.BATCH_SIZE
BUDGETS = Budgets(TIMEOUTS, BATCH_SIZES, constants.BATCHING_WINDOW_SECONDS)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Set for the test only: a metrics switch left on would silence later tests' EMF.
    for key, value in {
        "AWS_ACCESS_KEY_ID": "scale",
        "AWS_SECRET_ACCESS_KEY": "scale",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }.items():
        if key not in os.environ:
            monkeypatch.setenv(key, value)
    with mock_aws():
        yield


@dataclass
class Table:
    name: str
    client: Any  # with the limits on
    raw: Any
    limits: DynamoLimits
    timeline: ManualTimeline


@pytest.fixture
def table(aws: None) -> Table:
    session = boto3.Session(region_name="us-east-1")
    name = create_resources(session, "limits")["MUSTER_TABLE_NAME"]
    raw = session.client("dynamodb")
    timeline = ManualTimeline()
    limits = DynamoLimits(timeline, raw, name)
    client = limits.attach(session.client("dynamodb"))
    return Table(name, client, raw, limits, timeline)
