"""Random cluster histories: what users and the cluster do to Jobs and nodes, and when.

A history is a list of timed actions on a small cluster. It says nothing of
Muster: the driver plays it against the simulator's cluster model (the truth)
while the control plane admits and evicts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from muster.core.keys import parse_workload_key, workload_key
from muster.core.model import Kind


@dataclass(frozen=True, slots=True)
class Action:
    """`create` / `delete` / `recreate` a Job (`job`), `fail` / `repair` / `flap` a node,
    `gap` (no agent runs until `until`), `resync` (the agent relists)."""

    at: float
    what: str
    job: str = ""
    node: str = ""
    pods: int = 0
    gpus_per_pod: int = 0
    startup: float = 0.0
    never_ready: bool = False
    until: float = 0.0


@dataclass(frozen=True, slots=True)
class History:
    seed: int
    nodes: int
    gpus_per_node: int
    horizon: float  # the perturbed part ends here; then the agent relists and all settles
    actions: tuple[Action, ...] = field(default_factory=tuple)


def generate(seed: int, *, jobs: int = 5, nodes: int = 3, horizon: float = 400.0) -> History:
    """A history of `jobs` Jobs on `nodes` nodes of 4 GPUs within `horizon` seconds."""
    rng = random.Random(seed)
    actions: list[Action] = []
    names = [f"ml/job{i}" for i in range(jobs)]
    for name in names:
        actions.append(_create(rng, name, rng.uniform(0, horizon * 0.3), "create"))
    node_names = [f"node-{i}" for i in range(nodes)]
    for _ in range(rng.randint(2, 10)):
        kind = rng.choice(("delete", "recreate", "recreate", "fail", "flap", "flap"))
        at = rng.uniform(horizon * 0.1, horizon * 0.9)
        if kind == "delete":
            actions.append(Action(at, "delete", job=rng.choice(names)))
        elif kind == "recreate":
            job = rng.choice(names)
            actions.append(Action(at, "delete", job=job))
            actions.append(_create(rng, job, at + rng.choice((0.0, 0.5, 5.0, 30.0)), "create"))
        elif kind == "fail":
            node = rng.choice(node_names)
            actions.append(Action(at, "fail", node=node))
            actions.append(Action(at + rng.uniform(5, 120), "repair", node=node))
        else:
            node = rng.choice(node_names)
            actions.append(Action(at, "flap", node=node))
            actions.append(Action(at + rng.uniform(1, 40), "unflap", node=node))
    for _ in range(rng.randint(0, 3)):
        start = rng.uniform(0, horizon * 0.8)
        until = start + rng.uniform(5, 90)
        actions.append(Action(start, "gap", until=until))
        if rng.random() < 0.7:  # a deletion no watch will report
            job = rng.choice(names)
            actions.append(Action(rng.uniform(start, until), "delete", job=job))
            if rng.random() < 0.5:
                actions.append(_create(rng, job, rng.uniform(start, until + 20), "create"))
    for t in range(60, int(horizon), 120):
        actions.append(Action(float(t), "resync"))
    actions.sort(key=lambda a: a.at)
    return History(seed, nodes, 4, horizon, tuple(actions))


def _create(rng: random.Random, job: str, at: float, what: str) -> Action:
    return Action(
        at,
        what,
        job=job,
        pods=rng.randint(1, 3),
        gpus_per_pod=rng.choice((1, 2, 4)),
        startup=rng.uniform(2, 40),
        never_ready=rng.random() < 0.15,
    )


# Settings an administrator changes mid-flight (opt-in: `with_settings_toggles`).
# `job` names the change: "dryRun" on, "recoveryOff" (`recoveryTimeout: 0s`), or ""
# back to the history's own settings.
SETTINGS_TOGGLES = ("dryRun", "recoveryOff")


def with_settings_toggles(history: History, seed: int) -> History:
    """`history` with one to three settings changes and their undoing, all before its
    horizon: `dryRun` on and off, `recoveryTimeout` to 0s and back."""
    rng = random.Random(seed * 104_729 + 7)
    actions = list(history.actions)
    for _ in range(rng.randint(1, 3)):
        start = rng.uniform(0, history.horizon * 0.7)
        end = min(start + rng.uniform(20, 200), history.horizon * 0.95)
        actions.append(Action(start, "settings", job=rng.choice(SETTINGS_TOGGLES)))
        actions.append(Action(end, "settings", job=""))
    actions.sort(key=lambda a: a.at)
    return History(
        history.seed, history.nodes, history.gpus_per_node, history.horizon, tuple(actions)
    )


# --------------------------------------------------------------------------- opt-in: kinds


def generate_shared_names(
    seed: int, *, jobs: int = 5, nodes: int = 3, horizon: float = 400.0, shared: int = 2
) -> History:
    """`generate`'s history plus PyTorchJobs named as `shared` of its Jobs (the same
    namespace and name, another kind): created, and some deleted and re-created, among
    the Jobs' own changes. Two workloads, never one re-created as the other."""
    base = generate(seed, jobs=jobs, nodes=nodes, horizon=horizon)
    rng = random.Random(seed * 104_729 + 7)
    names = sorted({a.job for a in base.actions if a.job})
    actions = list(base.actions)
    for job in rng.sample(names, min(shared, len(names))):
        namespace, name, _ = parse_workload_key(job)
        twin = workload_key(Kind.PYTORCHJOB, namespace, name)
        actions.append(_create(rng, twin, rng.uniform(0, horizon * 0.3), "create"))
        if rng.random() < 0.6:
            at = rng.uniform(horizon * 0.3, horizon * 0.9)
            actions.append(Action(at, "delete", job=twin))
            if rng.random() < 0.5:
                actions.append(_create(rng, twin, at + rng.choice((0.0, 5.0, 30.0)), "create"))
    actions.sort(key=lambda a: a.at)
    return History(base.seed, base.nodes, base.gpus_per_node, base.horizon, tuple(actions))
