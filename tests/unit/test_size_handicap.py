"""`sizeHandicap`: each GPU beyond a gang's first puts it later in queue order."""

from __future__ import annotations

import pytest
from muster.core import plan_admission
from muster.core.admission import AdmissionQueue, Usage
from muster.core.model import Workload
from muster.core.settings import SettingsError

from tests.unit.conftest import settings


def queued(key: str, gpus: int, created: float) -> Workload:
    return Workload(key, "q", gpus, gpus=gpus, created_at=created, queued_at=created)


# A 4-GPU gang queued at 0 and a 1-GPU job at 100 s, with room for one of them.
WIDE, SMALL = queued("t/wide", 4, 0.0), queued("t/small", 1, 100.0)


@pytest.mark.parametrize(
    ("handicap", "first"),
    [
        (None, "t/wide"),  # plain queue order: the older first
        ("10s", "t/wide"),  # 3 GPUs x 10 s = 30 s later: still ahead of 100 s
        ("1m", "t/small"),  # 3 x 60 s = 180 s later: behind the 1-GPU job
    ],
)
def test_a_gang_queues_later_by_its_gpus_beyond_the_first(handicap: str | None, first: str) -> None:
    doc = {"gpuQuota": 4} | ({"sizeHandicap": handicap} if handicap else {})
    s = settings(**doc)
    # WHEN a pass plans both (the planner the Lambdas call, and the queue the simulator keeps)
    plan = plan_admission([WIDE, SMALL], [], s, 200)
    kept = AdmissionQueue.of(s, [WIDE, SMALL]).plan(200, Usage())
    # THEN only the one first in order is admitted (the other does not fit the quota after it)
    assert plan.admit == kept.admit == (first,)


def test_the_handicap_is_a_duration_per_queue_and_shown_only_when_set() -> None:
    s = settings(sizeHandicap="10m", queues={"big": {"sizeHandicap": "0s"}})
    assert s.defaults.size_handicap == 600 and s.for_queue("big").size_handicap == 0
    assert s.to_dict()["sizeHandicap"] == "10m" and "sizeHandicap" not in settings().to_dict()
    with pytest.raises(SettingsError, match="sizeHandicap: duration '-1m' is negative"):
        settings(sizeHandicap="-1m")
