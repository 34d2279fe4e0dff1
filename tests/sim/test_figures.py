"""One way to write a figure of time: `muster simulate` and `muster tune` read the same."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from muster.cli import main
from muster.sim.figures import format_seconds, format_spread

HOUR, DAY = 3600.0, 86400.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (59.5, "59.5s"),
        (61.3333, "61.3s"),
        (119.9, "119.9s"),
        (120, "2.0m"),
        (41.3 * 60, "41.3m"),
        (2 * HOUR, "2.0h"),
        (55.1 * HOUR, "2.3d"),
        (2 * DAY, "2.0d"),
        (13 * DAY, "13.0d"),
        (math.inf, "-"),
        (math.nan, "-"),
    ],
)
def test_seconds_read_in_the_unit_of_their_size(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_a_spread_over_seeds_reads_in_the_unit_of_its_mean() -> None:
    assert format_spread([7.3 * HOUR, 8.3 * HOUR]) == "7.8±0.5h"
    assert format_spread([50 * HOUR, 60 * HOUR]) == "2.3±0.2d"
    assert format_spread([40.0, 50.0]) == "45±5s"
    assert format_spread([1.0, math.inf]) == "-"


# Plain Kubernetes makes `late` wait three days behind `long`: a queue delay in days.
LONG_QUEUE = """
cluster: {nodes: 1, gpusPerNode: 8}
until: 10d
workloads:
  - {name: long, pods: 1, gpusPerPod: 8, runSeconds: 259200}
  - {name: late, submitAt: 1s, pods: 1, gpusPerPod: 8, runSeconds: 3600}
"""


def test_simulate_and_tune_write_the_same_figure_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "long-queue.yaml"
    path.write_text(LONG_QUEUE)
    # GIVEN what `muster simulate` prints for plain Kubernetes' queue delay p95
    assert main(["simulate", str(path), "--compare", "none"]) == 0
    (row,) = [r for r in capsys.readouterr().out.splitlines() if r.startswith("queue delay p95")]
    simulated = row.split()[-1]
    assert simulated.endswith("d"), row
    # WHEN `muster tune` runs the same scenario
    assert main(["tune", str(path), "--grid", "timeout=5m", "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    # THEN its line for plain Kubernetes writes that figure as simulate does
    found = re.search(r"plain Kubernetes \(none\): .*queue p95 (\S+),", printed)
    assert found is not None, printed
    assert found.group(1) == simulated
