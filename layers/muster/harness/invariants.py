"""Muster's view against the truth: what must hold after every run (and during it).

- every workload is in the state the truth implies: an object that exists is
  known under its uid (a pod group: under its current run), admitted exactly when
  it is released on the cluster, PodsReady exactly when all its pods are Ready,
  with the pods the cluster has (its own: not those of an earlier object still
  terminating); an object that is gone is Finished (or expired), and so is a pod
  group whose run succeeded;
- no GPUs are held by anything gone;
- the quota is never exceeded, per queue and for the cluster: as the store sees
  it when an admission is committed, and as the cluster sees it whenever a
  workload is released (`QuotaWatch`), counting what runs: the released
  workloads (a grown one at its new size once the control plane heard of it),
  and the pods of deleted Jobs that run on (orphaned, or terminating) once it
  heard they were bound; once a quota is lowered, nothing new is admitted while
  the holders exceed it (those admitted before may stay);
- a Job that grew after its admission does not run on over its charge, and no
  pod it does not own (forged with its labels) counts Ready for it;
- nothing is stuck: every workload that is not finished has an armed deadline,
  a pending admission or requeue, or runs (`check_nothing_stuck`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Set
from typing import TYPE_CHECKING

from muster.core import (
    ACTIVE_PHASES,
    NOT_READY_PHASES,
    Admit,
    Phase,
    Pod,
    PodObserved,
    Settings,
    Workload,
    admissible,
)
from muster.harness.cluster_truth import ReleaseWatch
from muster.runtime.memory import MemoryStore
from muster.runtime.planning import HoldingsReader, quota_holders

if TYPE_CHECKING:
    from muster.harness.cluster_truth import JobObject, Truth

SettingsLog = list[tuple[float, Settings]]  # (from when, the settings in force)


def _over(held: Counter[str], settings: Settings, queues: Iterable[str] = ()) -> str | None:
    """Which quota `held` (GPUs per queue) exceeds under `settings`: the cluster's, or
    that of one of `queues` (every queue's when none is named); None if neither."""
    total = sum(held.values())
    if settings.gpu_quota is not None and total > settings.gpu_quota:
        return f"{total} GPUs against the cluster's quota of {settings.gpu_quota}"
    for queue in sorted(queues or held):
        quota = settings.for_queue(queue).gpu_quota
        if quota is not None and held[queue] > quota:
            return f"{held[queue]} GPUs against queue {queue}'s quota of {quota}"
    return None


def _held(workloads: Iterable[Workload]) -> Counter[str]:
    held: Counter[str] = Counter()
    for w in workloads:
        held[w.queue] += w.gpus
    return held


def _in_force(log: SettingsLog, since: float, now: float) -> list[Settings]:
    """Every settings in force at some time from `since` to `now` (at `since` itself,
    those before a change made at that instant too)."""
    current = [s for t, s in log if t < since][-1:] or [log[0][1]]
    return current + [s for t, s in log if since <= t <= now]


def _limit(settings: Iterable[Settings], queue: str | None) -> int | None:
    """The highest quota of the cluster (`queue` None) or of a queue among `settings`."""
    quotas = [s.gpu_quota if queue is None else s.for_queue(queue).gpu_quota for s in settings]
    known = [q for q in quotas if q is not None]
    return None if len(known) < len(quotas) else max(known)


def _over_since(
    held: Counter[str],
    log: SettingsLog,
    since: Callable[[str | None], float],
    now: float,
    queues: Iterable[str],
) -> str | None:
    """Which quota `held` exceeds, each quota taken at its highest since `since(queue)`
    (`since(None)` for the cluster's): holders admitted before a quota was lowered
    may stay."""
    total = sum(held.values())
    limit = _limit(_in_force(log, since(None), now), None)
    if limit is not None and total > limit:
        return f"{total} GPUs against the cluster's quota of {limit}"
    for queue in sorted(queues):
        limit = _limit(_in_force(log, since(queue), now), queue)
        if limit is not None and held[queue] > limit:
            return f"{held[queue]} GPUs against queue {queue}'s quota of {limit}"
    return None


class QuotaWatch(ReleaseWatch):
    """GPUs admitted within quota, as the store and as the cluster see them.

    When a release is first asked for, its admission was just committed (the release
    is the first effect of an admission): the holders the store shows, with it, must
    fit the quotas in force. When the cluster releases a workload, what it has
    released must fit the quotas in force since that admission was committed: a
    holder admitted before a quota was lowered may stay, and be released late.
    """

    def __init__(
        self, store: MemoryStore, truth: Truth, log: SettingsLog, clock: Callable[[], float]
    ) -> None:
        self.store = store
        self.truth = truth
        self.log = log
        self.clock = clock
        self.seen: set[tuple[str, str, int]] = set()
        self.problems: list[str] = []
        self.admissions = 0
        self.releases = 0
        self.looked: dict[str, tuple[object, ...]] = {}  # the pods last looked at, per workload
        self.steps = 0  # what the control plane's records hold is noted step by step
        self.committed: dict[tuple[str, str, int], int] = {}  # an admission -> its step

    def _problem(self, what: str) -> None:
        if what not in self.problems:
            self.problems.append(what)

    def admitting(self, effect: Admit) -> None:
        attempt = (effect.workload, effect.uid, effect.attempt)
        if attempt in self.seen:
            return
        self.seen.add(attempt)
        self.committed[attempt] = self.steps
        self.admissions += 1
        snap = self.store.load(effect.workload)
        queues = [snap.workload.queue] if snap is not None else []
        now = self.clock()
        in_force = [s for t, s in self.log if t <= now][-1]
        over = _over(_held(self.store.active()), in_force, queues)
        if over:
            self._problem(f"quota exceeded: {effect.workload} admitted with {over} held")

    def released(self, effect: Admit) -> None:
        self.releases += 1
        now = self.clock()
        snap = self.store.load(effect.workload)
        since = now
        if snap is not None and snap.workload.attempt == effect.attempt:
            since = snap.workload.admitted_at or now
            obj = self.truth.objects.get(effect.workload)
            if obj is not None and obj.uid == snap.workload.uid:
                obj.charged = snap.workload.gpus  # what it is charged for, whatever runs
        queues = [self.truth.queue(effect.workload)]
        self.observe()
        # The pods of deleted Jobs count once the control plane heard they were bound,
        # before the admission was committed (one heard of later it could not weigh).
        committed = self.committed.get((effect.workload, effect.uid, effect.attempt), self.steps)
        held = self.truth.released_gpus(self.heard, committed)
        over = _over_since(held, self.log, lambda q: since, now, queues)
        if over:
            self._problem(f"quota exceeded on the cluster: {effect.workload} released with {over}")

    def observe(self, event: object = None) -> None:
        """After every event handled (inside an interleaved pass too): note what the
        control plane's records now hold of grown Jobs, and of a pod bound (its own
        workload's, or a predecessor's under the key that it charges)."""
        self.steps += 1
        if isinstance(event, PodObserved) and event.node and not event.deleted:
            told = self.truth.told_bound
            if event.uid not in told:
                snap = self.store.load(event.workload)
                pod = _pod_record(snap.workload, event) if snap is not None else None
                if pod is not None and pod.uid == event.uid and pod.node is not None:
                    told[event.uid] = self.steps
        for obj in self.truth.grown:
            self.heard(obj)

    def heard(self, obj: JobObject) -> bool:
        """Whether the control plane has heard of the Job's last growth: its record of
        the object held the change (before it was Finished, whose revision is its end's)."""
        if obj.heard_seq >= obj.grown_seq:
            return True
        snap = self.store.load(obj.key)
        if snap is None or snap.workload.uid != obj.uid or snap.workload.phase is Phase.FINISHED:
            return False
        if snap.workload.spec_seq >= obj.grown_seq:
            obj.heard_seq = obj.grown_seq
        return obj.heard_seq >= obj.grown_seq

    def check(self) -> None:
        """After every step: what the store holds fits the quotas in force since the
        oldest holder was admitted, and counts only its own pods as Ready."""
        self.observe()
        active = self.store.active()
        if not active:
            return
        self._own_pods(active)
        now = self.clock()

        def since(queue: str | None) -> float:
            return min(
                w.admitted_at if w.admitted_at is not None else now
                for w in active
                if queue is None or w.queue == queue
            )

        held = _held(active)
        over = _over_since(held, self.log, since, now, [q for q in held if held[q]])
        if over:
            self._problem(f"quota exceeded: {over} admitted")

    def _own_pods(self, active: Iterable[Workload]) -> None:
        """A pod counts only for the object that owns it (not for one re-created under
        its name while the pod terminates)."""
        owners = self.truth.owners
        for w in active:
            item = self.store.items[w.key]
            pods = self.store.pods.get(w.key, {})
            seen = (item.version, item.epoch, tuple((n, rev) for n, (_, rev, _, _) in pods.items()))
            if self.looked.get(w.key) == seen:
                continue  # unchanged since the last look
            self.looked[w.key] = seen
            snap = self.store.load(w.key)
            if snap is None:
                continue
            for p in snap.workload.pods.values():
                owner = owners.get(p.uid, "")
                if p.counts_ready and owner and owner != w.uid:
                    self._problem(f"{w.key}: pod {p.name} of {owner} counted Ready for {w.uid}")


def _pod_record(w: Workload, e: PodObserved) -> Pod | None:
    """The record of the pod of `e` in `w`: the workload's own, or in the holding of the
    earlier object under its key that owns it."""
    for h in w.predecessors:
        if e.owner and h.uid == e.owner:
            return h.pods.get(e.pod)
    return w.pods.get(e.pod)


def check_final(
    store: MemoryStore,
    truth: Truth,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
    settings: Settings,
    now: float,
) -> list[str]:
    problems: list[str] = []
    queued = [snap.workload for w in store.pending() if (snap := store.load(w.key))]
    # What a pass would be given: the quota holders (those still holding after their
    # admission ended included) and, with the capacity check, the nodes.
    plan = HoldingsReader(store).inputs(settings, queued, quota_holders(store)).plan(settings, now)
    if plan.admit:
        problems.append(f"admissible but left waiting: {', '.join(plan.admit)}")
    keys = set(truth.objects) | set(truth.groups) | set(store.items)
    for key in sorted(keys):
        snap = store.load(key)
        w = snap.workload if snap else None
        if key in truth.groups:
            problems += _group_problems(key, truth, w, timers, requeues)
        else:
            problems += _workload_problems(key, truth, w, timers, requeues)
    for w in store.active():
        if not _current(truth, w):
            problems.append(f"{w.key}: holds {w.gpus} GPUs but is gone from the cluster")
    problems += check_nothing_stuck(store, truth, timers, requeues, settings, now)
    return problems


def _current(truth: Truth, w: Workload) -> bool:
    """Whether `w` is the cluster's current object (or pod group run) under its key."""
    g = truth.groups.get(w.key)
    if g is not None:
        return not g.done and _run_of(w) >= g.start_rev
    obj = truth.objects.get(w.key)
    return obj is not None and not obj.deleted and obj.uid == w.uid


def _run_of(w: Workload) -> int:
    """The revision a pod group's run was first seen at (its identity `pg-<seq>`)."""
    prefix, _, number = w.uid.partition("-")
    return int(number) if prefix == "pg" and number.isdigit() else -1


def _workload_problems(
    key: str,
    truth: Truth,
    w: Workload | None,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
) -> list[str]:
    """What is wrong with Muster's view of one key; a wrong identity or phase is all
    that is said of it."""
    obj = truth.objects.get(key)
    if obj is None or obj.deleted:
        if w is not None and w.phase is not Phase.FINISHED:
            return [f"{key}: gone from the cluster but {w.phase.value} in Muster"]
        return []
    if w is None:
        return [f"{key}: exists (uid {obj.uid}) but Muster does not know it"]
    if w.uid != obj.uid:
        return [f"{key}: Muster follows uid {w.uid}, the cluster has {obj.uid}"]
    if w.phase is Phase.FINISHED:
        return [f"{key}: exists but Finished ({w.reason}) in Muster"]
    job = truth.sim._jobs[obj.sim]
    if job.running != (w.phase in ACTIVE_PHASES):
        state = "runs" if job.running else "is suspended"
        return [f"{key}: the Job {state} but Muster has it {w.phase.value}"]
    problems = _pod_problems(key, truth, w, job.running)
    if job.running and obj.gpus > w.gpus:
        problems.append(f"{key}: runs {obj.gpus} GPUs on a charge of {w.gpus} (grew, kept)")
    problems += _timer_problems(key, w, timers)
    if w.reason == "WorkloadFaults" and not job.spec.never_ready:
        problems.append(f"{key}: a healthy Job deactivated as failing on its own")
    if w.phase is Phase.REQUEUED and (key, w.requeue_count) not in requeues:
        problems.append(f"{key}: Requeued with no requeue message")
    return problems


def _group_problems(
    key: str,
    truth: Truth,
    w: Workload | None,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
) -> list[str]:
    """What is wrong with Muster's view of a pod group: the run it follows, whether it
    is released, its pods."""
    g = truth.groups[key]
    if w is None:
        return [f"{key}: a pod group with pods, but Muster does not know it"]
    run = _run_of(w)
    if run < g.start_rev:
        return [f"{key}: Muster follows run {w.uid!r}, the cluster's began at {g.start_rev}"]
    if g.done:
        if w.phase is not Phase.FINISHED:
            return [f"{key}: its run succeeded but {w.phase.value} in Muster"]
        return []
    if w.phase is Phase.FINISHED:
        return [f"{key}: runs but Finished ({w.reason}) in Muster"]
    if g.released != (w.phase in ACTIVE_PHASES):
        state = "released" if g.released else "gated"
        return [f"{key}: the group is {state} but Muster has it {w.phase.value}"]
    problems = _pod_problems(key, truth, w, g.released)
    if g.released and g.running < w.gang_size and any(m.gated for m in g.live):
        problems.append(f"{key}: admitted, but a replacement pod is still gated")
    if g.peak > w.gang_size:
        problems.append(f"{key}: {g.peak} pods released at once for a gang of {w.gang_size}")
    problems += _timer_problems(key, w, timers)
    if w.phase is Phase.REQUEUED and (key, w.requeue_count) not in requeues:
        problems.append(f"{key}: Requeued with no requeue message")
    return problems


def _pod_problems(key: str, truth: Truth, w: Workload, running: bool) -> list[str]:
    """The pods Muster sees against the cluster's, and whether the gang is whole."""
    problems: list[str] = []
    cluster = {name: (e.uid, truth.ready(e)) for name, e in truth.own_pods(key).items()}
    seen = {p.name: (p.uid, p.counts_ready) for p in w.pods.values() if not p.deleted}
    if seen != cluster:
        problems.append(f"{key}: pods {seen} in Muster, {cluster} in the cluster")
    if running:
        whole = sum(ready for _, ready in cluster.values()) >= w.gang_size
        if whole != (w.phase is Phase.RUNNING):
            problems.append(f"{key}: whole={whole} in the cluster but {w.phase.value}")
    return problems


def _timer_problems(
    key: str, w: Workload, timers: Set[tuple[str, int, str, int, str]]
) -> list[str]:
    """A phase that waits for a timer has one running; a fault timer only while not Ready."""
    problems: list[str] = []
    if w.phase in NOT_READY_PHASES and w.timer is not None:
        t = w.timer
        if (key, t.attempt, t.kind.value, t.episode, t.incarnation) not in timers:
            problems.append(f"{key}: {w.phase.value} with no timer running")
    if w.phase is Phase.ADMITTED and w.timer is None:
        problems.append(f"{key}: Admitted with no timer")
    if w.fault_timer is not None:
        t = w.fault_timer
        if w.phase not in NOT_READY_PHASES:
            problems.append(f"{key}: {w.phase.value} with a workloadFaults timer armed")
        elif (key, t.attempt, t.kind.value, t.episode, t.incarnation) not in timers:
            problems.append(f"{key}: workloadFaults timer armed but not running")
    return problems


def check_nothing_stuck(
    store: MemoryStore,
    truth: Truth,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
    settings: Settings,
    now: float,
) -> list[str]:
    """Every workload that is not finished has something that moves it on: an armed
    deadline whose timer runs, a pending admission (it waits its turn in the queue,
    or for its pod group's pods) or requeue, or it runs on the cluster."""
    problems: list[str] = []
    for key, item in sorted(store.items.items()):
        snap = store.load(key)
        if snap is None or snap.workload.phase in (Phase.FINISHED, Phase.DEACTIVATED):
            continue
        w = snap.workload
        stuck = _stuck(w, truth, timers, requeues, settings, now)
        if item.outbox:
            stuck = "with effects never carried out"
        elif item.quarantine is not None:
            stuck = f"quarantined ({item.quarantine.error})"
        if stuck:
            problems.append(f"stuck: {key} {w.phase.value} {stuck}")
    return problems


def _stuck(
    w: Workload,
    truth: Truth,
    timers: Set[tuple[str, int, str, int, str]],
    requeues: Set[tuple[str, int]],
    settings: Settings,
    now: float,
) -> str:
    """Why nothing will move `w` on ("" when something will)."""
    if w.phase is Phase.RUNNING:
        return "" if truth.released(w.key) else "and not released on the cluster"
    if w.phase in NOT_READY_PHASES:
        t = w.timer
        if t is not None and (w.key, t.attempt, t.kind.value, t.episode, t.incarnation) in timers:
            return ""
        qs = settings.for_queue(w.queue)
        if w.phase is Phase.RECOVERING and qs.effective_recovery_timeout == 0:
            return ""  # waits for its pods, as `recoveryTimeout: 0s` asks
        return "with no deadline armed"
    if w.phase is Phase.REQUEUED:
        return "" if (w.key, w.requeue_count) in requeues else "with no requeue message"
    backing_off = w.requeue_at is not None and w.requeue_at > now
    if w.phase is Phase.PENDING and not admissible(w, now) and backing_off:
        pending = any(k == w.key for k, _ in requeues)
        return "" if pending else "backing off with no requeue message"
    return ""  # Pending: waits for quota, the lock, or its pods (a pass admits it then)
