"""A simulated Kubernetes cluster: nodes with GPUs, job controllers, a scheduler, kubelets.

It knows nothing of gang scheduling, deadlines or time loops. Like a real cluster it
holds jobs that are suspended or running; the control plane (or nothing, for plain
Kubernetes) unsuspends and suspends them. Every change a watcher would see is put in
`outbox` as a `PodChange` (the `PodObserved` a watcher reports, handed to the core
as it is); every moment the cluster needs to be woken at (a pod's startup done, a
job's run done) as a `Wakeup`. The caller owns the clock: it passes `now` to each
call and delivers wake-ups when they are due.

Physics it models (and nothing else):
- A running (unsuspended) job's controller keeps one pod per index; pods it creates
  wait as Pending in creation order.
- The scheduler binds pending pods in creation order, each to the first node by
  index with enough free GPUs; a pod that fits nowhere is skipped.
- A bound pod turns Ready `startup_seconds` later, never if the job is broken. A
  broken job's pods fail as its `failure` says, once their startup time has passed:
  `NotReady` pods run and say nothing; `ImagePullBackOff` pods wait on an image that
  cannot be pulled; `CrashLoopBackOff` containers crash `CRASH_AFTER_SECONDS` after
  each start and restart with the kubelet's back-off (10 s doubling, at most 5 min),
  up to the second restart (after which a watcher can tell nothing new).
- A job makes progress only while all its pods are Ready, and completes after
  `run_seconds` of progress. Suspending a job deletes its pods and its progress.
- A failed node loses its pods and takes no new ones until repaired.
- A pod with a node selector binds only on the nodes it matches (`_Pod.nodes`; the
  nodes' topology labels and a gang's domain are `muster.sim.blocks`').

It also integrates GPU use over time (useful: bound to a job whose pods are all
Ready; held: bound to any pod) so that every policy is measured the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from muster.core import PodObserved


class ClusterError(ValueError):
    """A call the simulated cluster cannot carry out (unknown job or node)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a workload asks the cluster for."""

    name: str
    pods: int
    gpus_per_pod: int
    startup_seconds: float
    run_seconds: float
    never_ready: bool = False
    failure: str | None = None  # CrashLoopBackOff, ImagePullBackOff, NotReady (None: NotReady)

    @property
    def category(self) -> str:
        """Its failure mode for the accounting ("" for a healthy job)."""
        return (self.failure or "NotReady") if self.never_ready else ""


CRASH_AFTER_SECONDS = 5.0
"""How long a crash-looping container runs before it exits (a script that fails at start)."""
CRASH_LOOP_RESTARTS = 2
"""Restarts played; after the second the pod is a crash loop whatever follows."""
_IMAGE = "registry.example.com/team/trainer:missing"


def crash_backoff(crashes: int) -> float:
    """The kubelet's restart back-off after the `crashes`-th exit: 10 s doubling, at most 5 min."""
    return min(10.0 * 2.0 ** max(crashes - 1, 0), 300.0)


PodChange = PodObserved
"""One pod as a watcher sees it after a change (deleted, its last state with `deleted`):
`seq` orders the cluster's changes; `scheduled` is unset (a watcher of the pod alone
cannot tell). A failing pod (a broken job's, but NotReady) carries what the kubelet
says of it: reason, message, waiting, restarts, terminated, exit code."""


@dataclass(slots=True)
class Wakeup:
    """Call the cluster back at `at`: `pod_ready(job, uid)` or `complete(job, token)`."""

    at: float
    what: str  # "ready", "complete" or "fault" (a failing pod's next state)
    job: str
    ref: str | int  # the pod uid, or the job's run token


@dataclass(slots=True)
class _Pod:
    job: str
    index: int
    name: str
    uid: str
    gpus: int
    created: int  # creation order across the cluster
    node: int | None = None
    ready: bool = False
    deleted: bool = False
    restarts: int = 0
    crashed: bool = False  # a crash-looping container is waiting out its back-off
    nodes: tuple[int, ...] | None = None  # the nodes its node selector matches (None: any)


@dataclass(slots=True)
class _Job:
    spec: JobSpec
    category: str  # the spec's, for the accounting
    gpus: int  # all its pods' GPUs
    running: bool = False  # unsuspended
    done: bool = False
    pods: dict[int, _Pod] = field(default_factory=dict)
    ready: int = 0
    remaining: float = 0.0
    progressing_since: float | None = None
    token: int = 0  # invalidates scheduled completions when progress stops

    @property
    def whole(self) -> bool:
        return self.ready == self.spec.pods


@dataclass(frozen=True, slots=True)
class GpuSample:
    """GPU use from `t` until the next sample."""

    t: float
    useful: int
    held: int
    available: int  # GPUs on nodes that are up


class SimulatedCluster:
    """Nodes `node-0 ... node-(n-1)` with `gpus_per_node` GPUs each."""

    def __init__(
        self, nodes: int, gpus_per_node: int, *, start: float = 0.0, sampling: bool = True
    ) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise ClusterError("a cluster needs at least one node with at least one GPU")
        self.node_names = [f"node-{i}" for i in range(nodes)]
        self.gpus_per_node = gpus_per_node
        self.total_gpus = nodes * gpus_per_node
        self.outbox: list[PodObserved | Wakeup] = []
        self._node_index = {name: i for i, name in enumerate(self.node_names)}
        self._free = [gpus_per_node] * nodes
        # `_first_fit[g]`: no node before this index has `g` GPUs free (a lower bound,
        # lowered when GPUs are freed, raised when a search passes full nodes).
        self._first_fit = [0] * (gpus_per_node + 1)
        self._up = [True] * nodes
        self._on_node: list[dict[str, _Pod]] = [{} for _ in range(nodes)]
        self._jobs: dict[str, _Job] = {}
        self._pending: list[_Pod] = []  # creation order; deleted or bound pods are skipped
        self._stale = 0  # deleted or bound pods still in `_pending`
        self._unscheduled_from = 0  # pods before this index did not fit at last look
        self._room_freed = False  # capacity came back since the last binding pass
        self._to_reconcile: list[str] = []  # jobs whose controllers must act, in order
        self._uids = 0
        self._seq = 0
        # GPU accounting
        self._useful = 0
        self._held = 0
        self._available = self.total_gpus
        self._since = start
        self.useful_gpu_seconds = 0.0
        self.held_gpu_seconds = 0.0
        # The same per failure mode ("" for healthy jobs), for the cost of broken jobs.
        self._useful_by: dict[str, int] = {}
        self._held_by: dict[str, int] = {}
        self.useful_by: dict[str, float] = {}
        self.held_by: dict[str, float] = {}
        # GPU use over time, for the picture (`sampling` off: only the first sample).
        self.samples: list[GpuSample] = [GpuSample(start, 0, 0, self.total_gpus)]
        self._sampling = sampling

    # ------------------------------------------------------------------ jobs

    def add_job(self, spec: JobSpec) -> None:
        """Create a job, suspended (as Muster requires workloads to be created)."""
        if spec.name in self._jobs:
            raise ClusterError(f"job {spec.name!r} exists already")
        self._jobs[spec.name] = _Job(
            spec, spec.category, spec.pods * spec.gpus_per_pod, remaining=spec.run_seconds
        )

    def unsuspend(self, job: str) -> None:
        """Release the job; its controller creates its pods at the next `reconcile`."""
        j = self._job(job)
        if j.running or j.done:
            return
        j.running = True
        j.remaining = j.spec.run_seconds
        self._to_reconcile.append(job)

    def suspend(self, job: str, now: float) -> None:
        """Withdraw the job: delete all its pods at once, forget its progress."""
        j = self._job(job)
        if not j.running:
            return
        self._account(now)
        j.running = False
        self._stop_progress(j, now)
        j.remaining = j.spec.run_seconds
        for pod in j.pods.values():
            self._delete_pod(j, pod)
        j.pods.clear()
        self._sample(now)

    def resize(self, job: str, pods: int, now: float) -> None:
        """The job now asks for `pods` pods (its `parallelism` changed); a released one's
        controller creates the missing pods at the next `reconcile` (only growth)."""
        j = self._job(job)
        if pods <= j.spec.pods:
            raise ClusterError(f"job {job!r} may only grow, from {j.spec.pods} pods")
        self._account(now)
        if j.whole:  # no longer whole: what it used stops being useful
            self._useful -= j.gpus
            self._useful_by[j.category] -= j.gpus
            self._stop_progress(j, now)
        j.spec = replace(j.spec, pods=pods)
        j.gpus = pods * j.spec.gpus_per_pod
        if j.running:
            self._to_reconcile.append(job)
        self._sample(now)

    def reconcile(self) -> None:
        """Controllers create missing pods, interleaved across the jobs that need them.

        Jobs released together get pod 0 of each in order, then pod 1 of each, and so
        on, as concurrent job controllers do. Pods are created after every pod that
        exists.
        """
        todo = self._to_reconcile
        if not todo:
            return
        names = dict.fromkeys(todo)
        todo.clear()
        if len(names) == 1:  # the usual case: one job's pods, in index order
            j = self._jobs[next(iter(names))]
            if j.running:
                pods = j.pods
                for i in range(j.spec.pods):
                    if i not in pods:
                        self._create_pod(j, i)
            return
        jobs = [self._jobs[name] for name in names]
        missing = [[i for i in range(j.spec.pods) if i not in j.pods] for j in jobs if j.running]
        running = [j for j in jobs if j.running]
        depth = max((len(m) for m in missing), default=0)
        for level in range(depth):
            for j, indexes in zip(running, missing, strict=True):
                if level < len(indexes):
                    self._create_pod(j, indexes[level])

    def is_whole(self, job: str) -> bool:
        return self._job(job).whole

    def job_names(self) -> Iterable[str]:
        return self._jobs.keys()

    # ------------------------------------------------------------------ scheduler

    def bind_pending(self, now: float) -> int:
        """One scheduling pass; returns how many pods were bound."""
        # Pods before `_unscheduled_from` did not fit last time; unless room came back
        # since, only the pods created after them can bind now.
        start = 0 if self._room_freed else self._unscheduled_from
        pending = self._pending
        if start >= len(pending):
            return 0
        self._account(now)
        bound = 0
        fit, bind = self._fit, self._bind
        if fit(1) is not None:  # some node has room
            for pod in islice(pending, start, None):
                if pod.deleted or pod.node is not None:
                    continue
                n = fit(pod.gpus) if pod.nodes is None else self._fit_in(pod.nodes, pod.gpus)
                if n is not None:
                    bind(pod, n, now)
                    bound += 1
                    if fit(1) is None:
                        break  # every node is full
        self._room_freed = False
        if self._stale * 2 > len(pending):
            self._compact()  # only when it pays: the order of the others is kept either way
        self._unscheduled_from = len(self._pending)
        if bound:
            self._sample(now)
        return bound

    def _fit(self, gpus: int) -> int | None:
        """The first node (by index) with `gpus` GPUs free, or None."""
        if gpus > self.gpus_per_node:
            return None
        free = self._free
        n, end = self._first_fit[gpus], len(free)
        while n < end and free[n] < gpus:
            n += 1
        self._first_fit[gpus] = n
        return n if n < end else None

    def _fit_in(self, nodes: tuple[int, ...], gpus: int) -> int | None:
        """The first of `nodes` with `gpus` GPUs free, or None."""
        free = self._free
        return next((n for n in nodes if free[n] >= gpus), None)

    def _freed(self, n: int) -> None:
        """Node `n` has more GPUs free: it may now be the first fit for up to that many."""
        first_fit = self._first_fit
        for gpus in range(1, self._free[n] + 1):
            if first_fit[gpus] > n:
                first_fit[gpus] = n

    def _bind(self, pod: _Pod, n: int, now: float) -> None:
        pod.node = n
        self._stale += 1
        gpus = pod.gpus
        self._free[n] -= gpus
        self._on_node[n][pod.uid] = pod
        self._held += gpus
        j = self._jobs[pod.job]
        held_by, category = self._held_by, j.category
        held_by[category] = held_by.get(category, 0) + gpus
        spec = j.spec
        if not spec.never_ready:
            self._emit(pod, "Running")
            self.outbox.append(Wakeup(now + spec.startup_seconds, "ready", pod.job, pod.uid))
        elif spec.failure == "ImagePullBackOff":
            self._emit(pod, "Pending", waiting="ContainerCreating", reason="ContainerCreating")
            self.outbox.append(Wakeup(now + spec.startup_seconds, "fault", pod.job, pod.uid))
        else:
            self._emit(pod, "Running")
            if spec.failure == "CrashLoopBackOff":
                self.outbox.append(Wakeup(now + spec.startup_seconds, "fault", pod.job, pod.uid))

    def _compact(self) -> None:
        self._pending = [p for p in self._pending if not p.deleted and p.node is None]
        self._stale = 0

    # ------------------------------------------------------------------ kubelet

    def pod_ready(self, job: str, uid: str, now: float) -> bool:
        """The pod's startup is done; False if the pod is gone meanwhile."""
        j = self._job(job)
        pod = next((p for p in j.pods.values() if p.uid == uid), None)
        if pod is None or pod.deleted or pod.ready or pod.node is None:
            return False
        self._account(now)
        pod.ready = True
        j.ready += 1
        self._emit(pod, "Running")
        if j.whole:
            self._useful += j.gpus
            category = j.category
            self._useful_by[category] = self._useful_by.get(category, 0) + j.gpus
            j.progressing_since = now
            j.token += 1
            self.outbox.append(Wakeup(now + j.remaining, "complete", job, j.token))
        self._sample(now)
        return True

    def pod_fault(self, job: str, uid: str, now: float) -> bool:
        """A failing pod's next state (its image pull fails, its container exits or is
        restarted); False if the pod is gone meanwhile."""
        j = self._job(job)
        pod = next((p for p in j.pods.values() if p.uid == uid), None)
        if pod is None or pod.deleted or pod.node is None:
            return False
        if j.spec.failure == "ImagePullBackOff":
            self._emit(
                pod,
                "Pending",
                reason="ImagePullBackOff",
                waiting="ImagePullBackOff",
                message=f'Back-off pulling image "{_IMAGE}"',
            )
            return True
        if not pod.crashed:  # the container exits with an error
            pod.crashed = True
            self._emit(
                pod,
                "Running",
                reason="CrashLoopBackOff",
                waiting="CrashLoopBackOff",
                message=f"back-off {crash_backoff(pod.restarts + 1):g}s restarting failed container",
                terminated="Error",
                exit_code=1,
            )
            if pod.restarts < CRASH_LOOP_RESTARTS:
                self.outbox.append(Wakeup(now + crash_backoff(pod.restarts + 1), "fault", job, uid))
            return True
        pod.crashed = False  # the kubelet restarts it after the back-off
        pod.restarts += 1
        self._emit(pod, "Running", terminated="Error", exit_code=1)
        if pod.restarts < CRASH_LOOP_RESTARTS:
            self.outbox.append(Wakeup(now + CRASH_AFTER_SECONDS, "fault", job, uid))
        return True

    def complete(self, job: str, token: int, now: float) -> bool:
        """The job's run is done if it progressed without a break since `token`."""
        j = self._job(job)
        if j.done or not j.running or token != j.token or j.progressing_since is None:
            return False
        self._account(now)
        self._stop_progress(j, now)
        j.done = True
        j.running = False
        for pod in j.pods.values():
            self._release(pod, j)
        j.pods.clear()
        self._sample(now)
        return True

    # ------------------------------------------------------------------ nodes

    def fail_node(self, node: str, now: float) -> list[str]:
        """The node goes down with its pods; returns the jobs that lost pods."""
        n = self._node(node)
        if not self._up[n]:
            return []
        self._account(now)
        self._up[n] = False
        self._available -= self.gpus_per_node
        lost: list[str] = []
        for pod in sorted(self._on_node[n].values(), key=lambda p: p.created):
            j = self._jobs[pod.job]
            if pod.ready:
                self._lose_ready(j, now)
            j.pods.pop(pod.index, None)
            self._delete_pod(j, pod)
            if pod.job not in lost:
                lost.append(pod.job)
            if j.running:
                self._to_reconcile.append(pod.job)
        self._free[n] = 0
        self._sample(now)
        return lost

    def repair_node(self, node: str, now: float) -> None:
        n = self._node(node)
        if self._up[n]:
            return
        self._account(now)
        self._up[n] = True
        self._available += self.gpus_per_node
        self._free[n] = self.gpus_per_node
        self._freed(n)
        self._room_freed = True
        self._sample(now)

    def node_up(self, node: str) -> bool:
        return self._up[self._node(node)]

    # ------------------------------------------------------------------ accounting

    def finish_accounting(self, now: float) -> None:
        """Count GPU use up to `now` (the end of the run)."""
        self._account(now)
        self._sample(now)

    @property
    def free_gpus(self) -> Sequence[int]:
        return tuple(self._free)

    # ------------------------------------------------------------------ internals

    def _job(self, name: str) -> _Job:
        try:
            return self._jobs[name]
        except KeyError:
            raise ClusterError(f"no job {name!r}") from None

    def _node(self, name: str) -> int:
        try:
            return self._node_index[name]
        except KeyError:
            raise ClusterError(f"no node {name!r}") from None

    def _create_pod(self, j: _Job, index: int) -> None:
        self._uids = uids = self._uids + 1
        spec = j.spec
        job = spec.name
        name = f"{job}-{index}"
        pod = _Pod(job, index, name, f"{name}-u{uids}", spec.gpus_per_pod, uids)
        j.pods[index] = pod
        self._pending.append(pod)
        self._emit(pod, "Pending")

    def _delete_pod(self, j: _Job, pod: _Pod) -> None:
        self._release(pod, j)
        self._seq += 1
        node = self.node_names[pod.node] if pod.node is not None else None
        self.outbox.append(
            PodObserved(j.spec.name, pod.name, self._seq, pod.uid, "Failed", False, node, True)
        )

    def _release(self, pod: _Pod, j: _Job) -> None:
        """Free the pod's GPUs (if bound) and readiness; the caller drops it from its job `j`."""
        if pod.ready:
            if j.whole:
                self._useful -= j.gpus
                self._useful_by[j.category] -= j.gpus
            pod.ready = False
            j.ready -= 1
        n = pod.node
        if n is not None:
            if self._up[n]:
                self._free[n] += pod.gpus
                self._freed(n)
            self._on_node[n].pop(pod.uid, None)
            self._held -= pod.gpus
            self._held_by[j.category] -= pod.gpus
            self._room_freed = True
        elif not pod.deleted:
            self._stale += 1  # an unbound pod: it was waiting in `_pending`
        pod.deleted = True

    def _lose_ready(self, j: _Job, now: float) -> None:
        """A Ready pod of `j` is about to go: pause the job's progress if it was whole."""
        if j.whole:
            self._stop_progress(j, now)

    def _stop_progress(self, j: _Job, now: float) -> None:
        if j.progressing_since is not None:
            j.remaining = max(0.0, j.remaining - (now - j.progressing_since))
            j.progressing_since = None
            j.token += 1

    def _emit(
        self,
        pod: _Pod,
        phase: str,
        *,
        reason: str | None = None,
        message: str | None = None,
        waiting: str | None = None,
        terminated: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        self._seq += 1
        node = self.node_names[pod.node] if pod.node is not None else None
        self.outbox.append(
            PodObserved(
                pod.job,
                pod.name,
                self._seq,
                pod.uid,
                phase,
                pod.ready,
                node,
                False,
                reason,
                message,
                None,
                waiting,
                pod.restarts,
                terminated,
                exit_code,
            )
        )

    def _account(self, now: float) -> None:
        span = now - self._since
        if span > 0:
            self.useful_gpu_seconds += span * self._useful
            self.held_gpu_seconds += span * self._held
            totals = self.held_by
            for category, held in self._held_by.items():
                if held:
                    totals[category] = totals.get(category, 0.0) + span * held
            totals = self.useful_by
            for category, useful in self._useful_by.items():
                if useful:
                    totals[category] = totals.get(category, 0.0) + span * useful
            self._since = now

    def _sample(self, now: float) -> None:
        if not self._sampling:
            return
        last = self.samples[-1]
        useful, held, available = self._useful, self._held, self._available
        if last.t == now:
            self.samples[-1] = GpuSample(now, useful, held, available)
        elif last.useful != useful or last.held != held or last.available != available:
            self.samples.append(GpuSample(now, useful, held, available))


# Node faults in an event log (events.jsonl): lines with `node` instead of `workload`,
# so a reader sees the failure beside the evictions and recoveries it caused.
NODE_FAILED = "NodeFailed"
NODE_REPAIRED = "NodeRepaired"


def node_line(t: float | int, node: str, *, failed: bool) -> dict[str, Any]:
    return {"t": t, "node": node, "event": NODE_FAILED if failed else NODE_REPAIRED}
