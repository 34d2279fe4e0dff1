"""Random cluster histories, perturbed, through the control plane: how many diverge, how fast.

Each history is played on the simulator's cluster model (the truth) with the
agent's events duplicated, reordered, lost, redelivered late and dropped in agent
gaps (with deletions in them), through the real `ControlPlane` on the in-memory
adapters; then the agent relists and everything settles, and Muster's view is
compared with the truth (see `muster.harness`). Prints the histories that diverged
(the goal is none), the faults injected, and the agent events per second.

    .venv/bin/python benchmarks/faults.py [--histories 10000] [--start 0] [--heavy]

`--heavy` multiplies the faults: 40% duplicated, 30% lost, reordering within
20 s, 30% redelivered up to two minutes late.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from muster.harness import Perturbation, run_history
from muster.harness.histories import History, generate_shared_names, with_settings_toggles


def triggers(history: History) -> dict[str, int]:
    """How many actions of each opt-in trigger a history holds."""
    return {
        "settingsChanged": sum(1 for a in history.actions if a.what == "settings" and a.job),
        "kindSharingAName": sum(1 for a in history.actions if "@" in a.job),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--heavy", action="store_true", help="many more faults")
    parser.add_argument(
        "--triggers",
        action="store_true",
        help="histories that also change settings mid-flight (dryRun, recoveryTimeout) and "
        "run a PyTorchJob under a Job's name",
    )
    args = parser.parse_args()
    perturbation = (
        Perturbation(duplicate=0.4, loss=0.3, window=20.0, redelivery=0.3)
        if args.heavy
        else Perturbation()
    )
    started = time.perf_counter()
    events = 0
    diverged: list[tuple[int, list[str]]] = []
    faults: dict[str, int] = {}
    drawn: dict[str, int] = {}
    for seed in range(args.start, args.start + args.histories):
        history = None
        if args.triggers:
            history = with_settings_toggles(generate_shared_names(seed), seed)
            for trigger, count in triggers(history).items():
                drawn[trigger] = drawn.get(trigger, 0) + bool(count)
        outcome = run_history(seed, perturbation=perturbation, history=history)
        events += outcome.events
        for kind, count in outcome.faults.items():
            faults[kind] = faults.get(kind, 0) + count
        if outcome.diverged:
            diverged.append((seed, outcome.divergences))
    elapsed = time.perf_counter() - started
    print(f"histories: {args.histories} (seeds {args.start}..{args.start + args.histories - 1})")
    print(f"diverged: {len(diverged)}")
    for seed, problems in diverged[:10]:
        print(f"  seed {seed}: {'; '.join(problems[:3])}")
    print(f"agent events delivered: {events}")
    print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
    if drawn:
        print(
            "histories drawing each trigger: "
            + ", ".join(f"{k} {v}" for k, v in sorted(drawn.items()))
        )
    print(f"events per second: {events / elapsed:,.0f} ({elapsed:.1f} s)")
    return 1 if diverged else 0


if __name__ == "__main__":
    raise SystemExit(main())
