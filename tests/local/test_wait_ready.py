"""`muster local --wait-ready`: the next command of a script finds the control plane serving.

`muster local --hold &` returns at once, and a `muster status` on the next line
fails until the stack is deployed and the scenario played. With `--wait-ready` the
command shows the scenario and returns only once the held control plane serves; it
goes on serving in a process of its own until that is stopped.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from muster.cli import main
from muster.cli.local import LOG_FILE, PID_FILE
from muster.local.run import STACK

pytestmark = pytest.mark.slow

SCENARIO = """
cluster: {nodes: 1, gpusPerNode: 8}
settings: {timeout: 30s}
until: 2m
workloads:
  - {name: quick, queue: q, pods: 1, gpusPerPod: 8, startupSeconds: 5, runSeconds: 10}
"""


def alive(pid: int) -> bool:
    """Whether the process runs (here it is this process's child: reap it once it ends,
    as the shell's init does once `muster local` itself has returned)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        done = 0
    if done == pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_wait_ready_returns_once_the_held_control_plane_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--endpoint` points this process's boto3 at the local endpoint: undo it afterwards.
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, os.environ.get(key, "unset"))
    path = tmp_path / "quick.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    # GIVEN `muster local --wait-ready`
    code = main(["local", str(path), "--scale", "20", "--out", str(out), "--wait-ready"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    pid = int((out / PID_FILE).read_text())
    try:
        # THEN it showed the scenario, and returned with the control plane serving
        assert "quick" in printed and "Finished" in printed
        assert f"serving in the background as process {pid}" in printed
        assert f"kill $(cat {out / PID_FILE})" in printed
        found = re.search(r"keeps serving on (http://\S+) until stopped \(kill (\d+)\)", printed)
        assert found is not None and int(found.group(2)) == pid, printed
        assert alive(pid)
        # AND the next command, run at once, gets its answer
        assert main(["status", "--all", "--endpoint", found.group(1), "--stack", STACK]) == 0
        assert "default/quick" in capsys.readouterr().out
    finally:
        # WHEN it is stopped as the message says
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    # THEN it stops, with everything it started, and takes its process id file with it
    assert not alive(pid)
    assert "stopped, with everything it started" in (out / LOG_FILE).read_text()
    assert not (out / PID_FILE).exists()
