"""Random cluster histories, perturbed, through the control plane: how many diverge, how fast.

Each history is played on the simulator's cluster model (the truth) with the
agent's events duplicated, reordered, lost, redelivered late and dropped in agent
gaps (with deletions in them), through the real `ControlPlane` on the in-memory
adapters; then the agent relists and everything settles, and Muster's view is
compared with the truth (see `muster.harness`). Prints the histories that diverged
(the goal is none), the faults injected, what the histories' triggers did, and the
agent events per second.

By default every history also holds the triggers the plain ones never do
(`muster.harness.histories.generate_triggers`): pod groups run again under their
name, their members replaced and pods added beyond their gang, pods outliving
their deleted Job while it is re-created, a Job's name shared by a JobSet, PyTorchJob or pod group, settings
changed mid-flight (dryRun, recoveryTimeout, blockAdmission, quotas lowered),
releases the API server refuses, PutEvents entries throttled, a node's NotReady
delivered after its later Ready, admission passes interleaved with other events,
and a tenant's attacks: Jobs grown after admission, deleted with their pods
orphaned (some re-created under their name while the orphans run), pods forged
with a Job's labels; and the quota is checked at every admission and release, as
the store and as the cluster see it (counting what runs: grown Jobs, orphaned and
terminating pods, those of a Job re-created meanwhile and those heard bound only
after the deletion included).

    .venv/bin/python benchmarks/faults.py [--histories 10000] [--start 0] [--heavy] [--plain]

`--heavy` multiplies the faults: 40% duplicated, 30% lost, reordering within
20 s, 30% redelivered up to two minutes late. `--plain`: the histories without
the triggers (Jobs created, deleted and re-created, node failures and flaps,
agent gaps).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from muster.harness import Perturbation, run_history
from muster.harness.histories import generate, generate_triggers

# What each trigger count says, in the order printed.
TRIGGERS = {
    "podGroupRerun": "pod group runs again",
    "membersReplaced": "pod group members replaced",
    "podsBeyondTheGang": "pods added to a pod group beyond its gang",
    "podsOutlivingTheirJob": "Jobs deleted with their pods still terminating",
    "sharedNames": "workloads sharing a name with another kind",
    "settings:dryRun": "settings changed: dryRun on",
    "settings:recoveryOff": "settings changed: recoveryTimeout 0s",
    "settings:blockAdmission": "settings changed: blockAdmission toggled",
    "settings:quotaLowered": "settings changed: cluster quota lowered",
    "settings:queueQuotaLowered": "settings changed: queue quota lowered",
    "refusedAdmits": "releases refused (403)",
    "throttledEntries": "PutEvents entries throttled",
    "lateNodeConditions": "NotReady delivered after the node's Ready",
    "interleavedPasses": "admission passes interleaved with other events",
    "grownWhileReleased": "Jobs grown while released",
    "grownWhileHeld": "Jobs grown while held",
    "orphaningDeletes": "Jobs deleted with their pods orphaned",
    "recreatedWhileOrphansRun": "Jobs re-created while their orphans run",
    "relistsWhileOrphansRun": "relists while orphans run (gaps, resyncs, the last)",
    "forgedPods": "pods forged with a Job's labels",
    "forgedPodsReported": "forged pods another Job controls (reported)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--heavy", action="store_true", help="many more faults")
    parser.add_argument("--plain", action="store_true", help="histories without the triggers")
    args = parser.parse_args()
    perturbation = (
        Perturbation(duplicate=0.4, loss=0.3, window=20.0, redelivery=0.3)
        if args.heavy
        else Perturbation()
    )
    started = time.perf_counter()
    events = 0
    diverged: list[tuple[int, list[str]]] = []
    faults: Counter[str] = Counter()
    drawn: Counter[str] = Counter()
    for seed in range(args.start, args.start + args.histories):
        history = generate(seed) if args.plain else generate_triggers(seed)
        try:
            outcome = run_history(seed, perturbation=perturbation, history=history)
        except Exception as exc:  # a history the control plane could not play is one diverged
            diverged.append((seed, [f"raised {exc!r}", traceback.format_exc(limit=-2)]))
            continue
        events += outcome.events
        faults.update(outcome.faults)
        drawn.update(outcome.triggers)
        if outcome.diverged:
            diverged.append((seed, outcome.divergences))
    elapsed = time.perf_counter() - started
    print(f"histories: {args.histories} (seeds {args.start}..{args.start + args.histories - 1})")
    print(f"diverged: {len(diverged)}")
    for seed, problems in diverged[:10]:
        print(f"  seed {seed}: {'; '.join(problems[:3])}")
    print(f"agent events delivered: {events}")
    print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
    if not args.plain:
        print("triggers drawn:")
        for key, what in TRIGGERS.items():
            print(f"  {what:50} {drawn[key]}")
    print(f"events per second: {events / elapsed:,.0f} ({elapsed:.1f} s)")
    return 1 if diverged else 0


if __name__ == "__main__":
    raise SystemExit(main())
