"""Figures the README and docs/simulator.md give about how long things take hold.

The demo's length is the simulator's: the built-in story's end in scenario time,
divided by the local mode's default scale. `make simulate`'s cost is given in CPU
time, which a loaded machine changes far less than wall time.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import time
from pathlib import Path

import pytest
from muster.cli import build_parser, main
from muster.sim.engine import simulate
from muster.sim.scenario import load_builtin

from tests.sim.conftest import REPO


def test_the_readmes_length_of_the_demo_is_the_storys(tmp_path: Path) -> None:
    # GIVEN what the README says of the story `make demo` plays
    readme = " ".join((REPO / "README.md").read_text().split())
    said = re.search(
        r"The story is (\d+) s of scenario time played (\d+) times faster, (\d+) s", readme
    )
    assert said is not None, "the README no longer says how long the demo's story is"
    length, scale, real = (int(x) for x in said.groups())
    # WHEN the story runs in the simulator, and `muster local` is parsed as `make demo` runs it
    makefile = (REPO / "Makefile").read_text()
    demo = re.search(r"^demo:.*\n\t\$\(BIN\)/muster (.+)$", makefile, flags=re.MULTILINE)
    assert demo is not None
    args = build_parser().parse_args(shlex.split(demo.group(1)))
    run = simulate(load_builtin("local-story"), "gang")
    # THEN the README's figures are those
    assert args.scenario is None and args.builtin is None  # the built-in story
    assert (length, scale, real) == (run.summary["makespanSeconds"], args.scale, length / scale)


@pytest.mark.slow
def test_make_simulate_takes_the_cpu_time_docs_simulator_md_says(tmp_path: Path) -> None:
    # GIVEN what docs/simulator.md says of `make simulate`
    doc = (REPO / "docs" / "simulator.md").read_text()
    said = re.search(r"^make simulate .*\(about (\d+) s of CPU time\)", doc, flags=re.MULTILINE)
    assert said is not None, "docs/simulator.md no longer says what `make simulate` costs"
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^simulate:.*\n\t\$\(BIN\)/muster (.+)$", makefile, flags=re.MULTILINE)
    assert target is not None
    argv = [a.replace("out/simulate", str(tmp_path)) for a in shlex.split(target.group(1))]
    # WHEN the command it runs runs here
    started = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    used = time.process_time() - started
    # THEN it takes that, give or take a factor of 3 (machines differ)
    assert int(said.group(1)) / 3 <= used <= 3 * int(said.group(1)), used
