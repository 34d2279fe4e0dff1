"""How much CPU an idle `muster local --hold` uses once the scenario is over.

Starts `muster local --hold --quiet` on a small built-in scenario, waits until it
says the control plane keeps serving, then reads the process's CPU time (user +
system, from /proc) over a window of wall time. Linux only.

    python benchmarks/hold_idle_cpu.py [--window 15] [--builtin never-ready]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=float, default=15.0, help="seconds to measure")
    parser.add_argument("--builtin", default="never-ready", help="scenario to play first")
    parser.add_argument("--start-limit", type=float, default=300.0)
    args = parser.parse_args()
    out = Path("out/bench-hold")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "muster.cli",
            "local",
            "--builtin",
            args.builtin,
            "--hold",
            "--quiet",
            "--scale",
            "60",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + args.start_limit
        assert proc.stdout is not None
        for line in proc.stdout:
            if "keeps serving" in line:
                break
            if time.monotonic() > deadline:
                print("the local control plane did not reach --hold in time", file=sys.stderr)
                return 1
        else:
            print("muster local ended before holding", file=sys.stderr)
            return 1
        time.sleep(2.0)  # let the last of the scenario's work settle
        before, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.window)
        used, wall = cpu_seconds(proc.pid) - before, time.monotonic() - t0
        print(
            f"idle --hold: {used:.2f} CPU-seconds in {wall:.1f} s of wall time "
            f"= {100 * used / wall:.1f}% of one core"
        )
        return 0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
