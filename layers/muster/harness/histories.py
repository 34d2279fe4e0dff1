"""Random cluster histories: what users and the cluster do to Jobs and nodes, and when.

A history is a list of timed actions on a small cluster. It says nothing of
Muster: the driver plays it against the simulator's cluster model (the truth)
while the control plane admits and evicts.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

from muster.core.keys import parse_workload_key, workload_key
from muster.core.model import Kind


@dataclass(frozen=True, slots=True)
class Action:
    """`create` / `delete` a workload (`job`), `fail` / `repair` / `flap` / `unflap` a
    node, `gap` (no agent runs until `until`), `resync` (the agent relists),
    `settings` (an administrator's change, see `SETTINGS_TOGGLES`).

    The triggers (`generate_triggers`) add: `rerun` (a pod group run again under its
    name once its last run has ended), `replace` (a pod group's controller replaces
    `pods` of its members, all of them when 0, the new ones `delay` seconds later),
    `spares` (the owner of a pod group adds `pods` pods beyond its gang:
    `with_pods_beyond_the_gang`), `refuse` (the API server refuses the next attempt's
    release of `job`, every try of it), `throttle` (PutEvents answers `value`% of the
    entries ThrottlingException until `until`), `interleave` (admission passes until
    `until` run while other events are handled). `linger` on a `delete`: the object's
    pods terminate that many seconds later; `late` on an `unflap` / `repair`: the
    node's NotReady is delivered again after its Ready.

    The tenants' attacks (`with_attacks`) add: `grow` (`job`'s `parallelism` raised by
    `pods` after its creation, maybe while it runs), `orphan` on a `delete` (`kubectl
    delete --cascade=orphan`: its pods lose their owner reference and run on for
    `linger` seconds; some such Jobs re-created under their name meanwhile), and
    `forge` (`pods` Ready pods labelled as `job`'s that it does not own, for `delay`
    seconds: bare ones when `value` is 0, ones another Job of the tenant controls
    when 1).
    """

    at: float
    what: str
    job: str = ""
    node: str = ""
    pods: int = 0
    gpus_per_pod: int = 0
    startup: float = 0.0
    never_ready: bool = False
    until: float = 0.0
    queue: str = "default"
    run: float = 0.0  # a pod group's run: seconds of progress until its pods succeed
    linger: float = 0.0
    late: bool = False
    delay: float = 0.0
    value: int = 0
    orphan: bool = False


@dataclass(frozen=True, slots=True)
class History:
    seed: int
    nodes: int
    gpus_per_node: int
    horizon: float  # the perturbed part ends here; then the agent relists and all settles
    actions: tuple[Action, ...] = field(default_factory=tuple)
    queue_quotas: tuple[tuple[str, int], ...] = ()  # queues with a GPU quota of their own
    # Node events report each node's GPUs, as the agent does (older agents did not):
    # the control plane then keeps each node's newest report, which a late one is not.
    node_gpus: bool = False


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
# `job` names the change: "dryRun" on, "recoveryOff" (`recoveryTimeout: 0s`),
# "blockAdmission" on, "quotaLowered" (the cluster's `gpuQuota` to `value`),
# "queueQuotaLowered" (the `team` queue's to `value`), or "" back to the history's
# own settings.
SETTINGS_TOGGLES = ("dryRun", "recoveryOff")
ALL_TOGGLES = (*SETTINGS_TOGGLES, "blockAdmission", "quotaLowered", "queueQuotaLowered")
TEAM = "team"  # the queue with a quota of its own in trigger histories


def with_settings_toggles(
    history: History, seed: int, kinds: tuple[str, ...] = SETTINGS_TOGGLES
) -> History:
    """`history` with one to three settings changes of `kinds` and their undoing, all
    before its horizon (`dryRun` on and off, `recoveryTimeout` to 0s and back, ...)."""
    rng = random.Random(seed * 104_729 + 7)
    actions = list(history.actions)
    quota = history.nodes * history.gpus_per_node
    team = dict(history.queue_quotas).get(TEAM)
    for _ in range(rng.randint(1, 3)):
        start = rng.uniform(0, history.horizon * 0.7)
        end = min(start + rng.uniform(20, 200), history.horizon * 0.95)
        kind = rng.choice([k for k in kinds if k != "queueQuotaLowered" or team])
        value = 0
        if kind == "quotaLowered":
            value = rng.choice((quota // 3, quota // 2, quota - 4))
        elif kind == "queueQuotaLowered" and team:
            value = rng.choice((0, team // 2, team - 2))
        actions.append(Action(start, "settings", job=kind, value=value))
        actions.append(Action(end, "settings", job=""))
    actions.sort(key=lambda a: a.at)
    return replace(history, actions=tuple(actions))


# --------------------------------------------------------------------------- opt-in: kinds


def generate_shared_names(
    seed: int,
    *,
    jobs: int = 5,
    nodes: int = 3,
    horizon: float = 400.0,
    shared: int = 2,
    kinds: tuple[Kind, ...] = (Kind.PYTORCHJOB,),
) -> History:
    """`generate`'s history plus workloads of another kind (a PyTorchJob, say) named as
    `shared` of its Jobs (the same namespace and name): created, and some deleted and
    re-created, among the Jobs' own changes. Two workloads, never one re-created as
    the other."""
    base = generate(seed, jobs=jobs, nodes=nodes, horizon=horizon)
    return _with_twins(base, random.Random(seed * 104_729 + 7), shared, kinds)


def _with_twins(base: History, rng: random.Random, shared: int, kinds: tuple[Kind, ...]) -> History:
    names = sorted({a.job for a in base.actions if a.job})
    actions = list(base.actions)
    horizon = base.horizon
    for job in rng.sample(names, min(shared, len(names))):
        namespace, name, _ = parse_workload_key(job)
        kind = rng.choice(kinds) if len(kinds) > 1 else kinds[0]
        twin = workload_key(kind, namespace, name)
        if kind is Kind.POD_GROUP:
            actions += _pod_group(rng, twin, horizon)
            continue
        actions.append(_create(rng, twin, rng.uniform(0, horizon * 0.3), "create"))
        if rng.random() < 0.6:
            at = rng.uniform(horizon * 0.3, horizon * 0.9)
            actions.append(Action(at, "delete", job=twin))
            if rng.random() < 0.5:
                actions.append(_create(rng, twin, at + rng.choice((0.0, 5.0, 30.0)), "create"))
    actions.sort(key=lambda a: a.at)
    return replace(base, actions=tuple(actions))


# --------------------------------------------------------------------------- opt-in: triggers


def generate_triggers(
    seed: int, *, jobs: int = 5, nodes: int = 3, horizon: float = 400.0
) -> History:
    """A history with every trigger the plain ones never hold, besides `generate`'s:

    - pod groups (plain pods under `muster.io/pod-group`) run again under their name
      once the last run has ended, some members replaced, or all of them at once
      (the group briefly without pods); a Job's name shared by a JobSet, PyTorchJob
      or pod group;
    - Jobs deleted while their pods take a while to terminate, some re-created under
      their name meanwhile;
    - a queue (`team`) with a quota of its own, and settings changed mid-flight:
      `dryRun`, `recoveryTimeout: 0s`, `blockAdmission`, quotas lowered (each undone
      before the horizon);
    - releases the API server refuses, PutEvents entries throttled;
    - a node's NotReady delivered again after its later Ready;
    - admission passes interleaved with the handling of other events;
    - a tenant's attacks (`with_attacks`): Jobs grown after admission, deleted with
      their pods orphaned (some re-created while the orphans run), and pods forged
      with a Job's labels; pods added to the pod groups beyond their gang
      (`with_pods_beyond_the_gang`).
    """
    rng = random.Random(seed * 15_485_863 + 11)
    base = generate(seed, jobs=jobs, nodes=nodes, horizon=horizon)
    quota = nodes * 4
    team_quota = rng.choice((quota // 2, quota - 4))
    team_jobs = set(rng.sample([f"ml/job{i}" for i in range(jobs)], rng.randint(1, 2)))
    actions: list[Action] = []
    creates = Counter(a.job for a in base.actions if a.what == "create")
    recreated = {job for job, n in creates.items() if n > 1}
    for a in base.actions:
        if a.what == "create" and a.job in team_jobs:
            a = replace(a, queue=TEAM)
        elif a.what == "delete" and rng.random() < (0.7 if a.job in recreated else 0.3):
            a = replace(a, linger=rng.uniform(3, 60))
        elif a.what in ("unflap", "repair") and rng.random() < 0.6:
            a = replace(a, late=True)
        actions.append(a)
    for i in range(rng.randint(1, 2)):
        actions += _pod_group(rng, workload_key(Kind.POD_GROUP, "ml", f"grp{i}"), horizon)
    names = [f"ml/job{i}" for i in range(jobs)] + ["ml/grp0@podgroup"]
    for _ in range(rng.randint(1, 3)):
        actions.append(Action(rng.uniform(0, horizon * 0.8), "refuse", job=rng.choice(names)))
    if rng.random() < 0.7:
        start = rng.uniform(0, horizon * 0.7)
        until = min(start + rng.uniform(20, 150), horizon * 0.9)
        actions.append(Action(start, "throttle", until=until, value=rng.choice((20, 50))))
    for _ in range(rng.randint(1, 2)):
        start = rng.uniform(0, horizon * 0.8)
        actions.append(Action(start, "interleave", until=start + rng.uniform(30, 150)))
    history = History(seed, nodes, 4, horizon, tuple(actions), ((TEAM, team_quota),), True)
    twins = (Kind.PYTORCHJOB, Kind.JOBSET, Kind.POD_GROUP)
    history = _with_twins(history, rng, rng.randint(1, 2), twins)
    history = with_attacks(with_settings_toggles(history, seed, ALL_TOGGLES), seed)
    return with_pods_beyond_the_gang(history, seed)


def with_attacks(history: History, seed: int) -> History:
    """`history` with what a tenant may do to run more than it is charged for, on its
    Jobs: `parallelism` raised after creation (while admitted, or not yet), a Job
    deleted with `--cascade=orphan` (its pods run on a while, then end; sometimes
    re-created meanwhile, and most histories hold one deleted once it has likely
    started and re-created a moment later, in its queue: `_recreated_beside_orphans`),
    and Ready pods labelled as a Job's that it does not own. Drawn apart from the
    history's own draws, which stay as they were."""
    rng = random.Random(seed * 32_452_843 + 13)
    horizon = history.horizon
    jobs = sorted({a.job for a in history.actions if a.what == "create" and "@" not in a.job})
    quota = history.nodes * history.gpus_per_node
    actions = list(history.actions)
    for _ in range(rng.randint(1, 2)):
        job = rng.choice(jobs)
        at = rng.uniform(horizon * 0.1, horizon * 0.85)
        actions.append(Action(at, "grow", job=job, pods=rng.randint(1, 2), value=quota))
    for _ in range(rng.randint(0, 2)):
        job = rng.choice(jobs)
        at = rng.uniform(horizon * 0.15, horizon * 0.8)
        actions.append(Action(at, "delete", job=job, linger=rng.uniform(20, 150), orphan=True))
        if rng.random() < 0.5:
            actions.append(_create(rng, job, at + rng.choice((1.0, 10.0, 40.0)), "create"))
    for _ in range(rng.randint(1, 2)):
        job = rng.choice(jobs)
        at = rng.uniform(horizon * 0.05, horizon * 0.85)
        pods, lasts = rng.randint(1, 5), rng.uniform(10, 200)
        actions.append(
            Action(at, "forge", job=job, pods=pods, delay=lasts, value=rng.randint(0, 1))
        )
    actions += _recreated_beside_orphans(history, random.Random(seed * 49_979_687 + 17))
    actions.sort(key=lambda a: a.at)
    return replace(history, actions=tuple(actions))


def _recreated_beside_orphans(history: History, rng: random.Random) -> list[Action]:
    """A Job deleted with `--cascade=orphan` once it has likely started, and re-created
    under its name, in its queue, a moment later while the orphans run (for 40 to 150
    s): the re-created Job must not run on the quota they still use. Drawn with its own
    generator, so the attacks drawn before stay as they were."""
    if rng.random() < 0.3:
        return []
    creates = [a for a in history.actions if a.what == "create" and "@" not in a.job]
    first = rng.choice(creates)
    at = min(first.at + first.startup + rng.uniform(5, 60), history.horizon * 0.85)
    linger = rng.uniform(40, 150)
    again = _create(rng, first.job, at + rng.choice((0.5, 2.0, 10.0)), "create")
    return [
        Action(at, "delete", job=first.job, linger=linger, orphan=True),
        replace(again, queue=first.queue),
    ]


def _pod_group(rng: random.Random, key: str, horizon: float) -> list[Action]:
    """A pod group's first run, its runs again, and its members replaced."""
    first = _create(rng, key, rng.uniform(0, horizon * 0.3), "create")
    actions = [replace(first, run=rng.uniform(10, 120), delay=rng.uniform(0.5, 10))]
    for _ in range(rng.choice((0, 1, 1, 2))):
        actions.append(Action(rng.uniform(horizon * 0.1, horizon * 0.8), "rerun", job=key))
    for _ in range(rng.choice((0, 1, 2))):
        pods = rng.choice((0, 0, 1))  # 0: all of them, the group briefly without pods
        at = rng.uniform(horizon * 0.05, horizon * 0.85)
        actions.append(Action(at, "replace", job=key, pods=pods, delay=rng.uniform(0.5, 15)))
    return actions


def with_pods_beyond_the_gang(history: History, seed: int) -> History:
    """`history` with pods added to its pod groups beyond their gang while they run (a
    tenant adding members after the group was charged, which must stay gated): one
    or two `spares` actions of 1 to 6 pods per group."""
    rng = random.Random(seed * 7_919 + 5)
    groups = sorted(
        {
            a.job
            for a in history.actions
            if a.what == "create" and parse_workload_key(a.job)[2] is Kind.POD_GROUP
        }
    )
    actions = list(history.actions)
    for key in groups:
        for _ in range(rng.randint(1, 2)):
            at = rng.uniform(0, history.horizon * 0.85)
            actions.append(Action(at, "spares", job=key, pods=rng.randint(1, 6)))
    actions.sort(key=lambda a: a.at)
    return replace(history, actions=tuple(actions))
