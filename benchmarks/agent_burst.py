"""How the agent handles a gang starting: watch events in, PutEvents calls out.

A gang of N pods starts: each pod goes through four updates (created, scheduled,
running, Ready) within a second. The agent maps every watch event, coalesces per
pod within its window and batches for PutEvents. The sender here counts requests
and their sizes instead of calling AWS (the mapping, coalescing and batching are
the real code). Prints the events in, entries and PutEvents requests out, and the
agent's CPU time per watch event.

    .venv/bin/python benchmarks/agent_burst.py [--pods 1024] [--window 1.0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from muster.agent.agent import Agent
from muster.agent.sender import Entry, Outbox, batches
from muster.agent.watch import Change
from muster.kube.conventions import JOB_RESOURCE, POD_RESOURCE


class CountingSender:
    def __init__(self) -> None:
        self.entries = 0
        self.requests = 0
        self.largest_request = 0

    def send(self, entries: Sequence[Entry]) -> None:
        for batch in batches(entries):
            self.requests += 1
            self.entries += len(batch)
            self.largest_request = max(self.largest_request, sum(e.size for e in batch))


def pod(i: int, rv: int, step: int) -> dict[str, Any]:
    phase = "Pending" if step < 2 else "Running"
    ready = step == 3
    return {
        "metadata": {
            "name": f"train-{i}",
            "namespace": "ml",
            "uid": f"uid-{i}",
            "resourceVersion": str(rv),
            "labels": {"batch.kubernetes.io/job-name": "train"},
        },
        "spec": {"nodeName": f"node-{i // 8}" if step >= 1 else None},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "state": {"waiting": {"reason": "ContainerCreating"}}
                    if step < 2
                    else {"running": {}}
                }
            ],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=1024)
    parser.add_argument("--window", type=float, default=1.0)
    args = parser.parse_args()

    now = [1_800_000_000.0]
    sender = CountingSender()
    agent = Agent("prod", Outbox(window=args.window), sender, clock=lambda: now[0])
    job = {
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-30T09:00:00Z",
            "labels": {"muster.io/queue": "gpu"},
        },
        "spec": {"parallelism": args.pods, "template": {"spec": {"containers": []}}},
    }
    agent.handle(Change(JOB_RESOURCE, "ADDED", job))
    events = [
        Change(
            POD_RESOURCE,
            "ADDED" if step == 0 else "MODIFIED",
            pod(i, 10 + step * args.pods + i, step),
        )
        for step in range(4)
        for i in range(args.pods)
    ]
    started = time.process_time()
    for n, change in enumerate(events):
        now[0] += 0.9 / len(events)  # the whole burst inside 0.9 s
        agent.handle(change)
        if n % 50 == 0:
            agent.flush()
    now[0] += args.window
    agent.flush()
    cpu = time.process_time() - started
    print(f"gang of {args.pods} pods, coalescing window {args.window:g}s")
    print(f"watch events in:        {len(events) + 1}")
    print(f"events sent:            {sender.entries}")
    print(f"coalesced away:         {agent.outbox.stats['coalesced']}")
    print(f"PutEvents requests:     {sender.requests}")
    print(f"largest request:        {sender.largest_request} bytes")
    print(f"agent CPU per event:    {cpu / len(events) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
