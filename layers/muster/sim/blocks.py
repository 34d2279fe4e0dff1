"""A simulated cluster whose nodes sit in network blocks, and honour a gang's domain.

`BlockCluster` is `SimulatedCluster` with topology labels on its nodes (a block
at each level, `muster.sim.topology`; none when it runs only for `nodePacking`),
and each node's `kubernetes.io/hostname`, which keeps a packed gang on its node. A job released into a domain (the core's
`Admit.domain`) gets, as the pod templates of a real one get from
`muster.kube.placement`, the node selector of that domain's labels: its pods bind
only on the nodes the selector matches, and a pod that fits on none of them
waits, as the Kubernetes scheduler leaves it Pending.

It also records where each release of a job had its pods bound (`spans`: the job,
the nodes, whether all its pods were Ready at once), which the summary's
topology figures and the never-across-domains property are measured from.
"""

from __future__ import annotations

from collections.abc import Sequence

from muster.core.topology import LABELS, NODE_LABEL, Topology, domain_selector
from muster.sim.kube import SimulatedCluster, _Job, _Pod

Span = tuple[str, frozenset[int], bool]  # (job, the nodes its pods were bound on, whole)


class BlockCluster(SimulatedCluster):
    """Nodes `node-0 ... node-(n-1)`, node i labelled with `topology[i]`."""

    def __init__(
        self,
        nodes: int,
        gpus_per_node: int,
        topology: Sequence[Topology],
        *,
        start: float = 0.0,
        sampling: bool = True,
    ) -> None:
        super().__init__(nodes, gpus_per_node, start=start, sampling=sampling)
        if len(topology) != nodes:
            raise ValueError(f"topology: {len(topology)} nodes' labels for {nodes} nodes")
        self.topology = list(topology)
        # Every node also carries its name (`kubernetes.io/hostname`), which a gang
        # packed onto one node (`nodePacking`) is kept on.
        self._labels = [
            {NODE_LABEL: name} | {LABELS[level]: value for level, value in t}
            for name, t in zip(self.node_names, topology, strict=True)
        ]
        self._matching: dict[str, tuple[int, ...]] = {}  # domain -> the nodes it selects
        self._selector: dict[str, tuple[int, ...]] = {}  # job -> its release's selector
        self._open: dict[str, set[int]] = {}  # job -> where its release's pods were bound
        self._whole: set[str] = set()  # jobs whose current release was whole
        self.spans: list[Span] = []

    def matching(self, domain: str) -> tuple[int, ...]:
        """The nodes carrying every label of `domain`'s node selector."""
        nodes = self._matching.get(domain)
        if nodes is None:
            wanted = domain_selector(domain).items()
            nodes = tuple(i for i, labels in enumerate(self._labels) if wanted <= labels.items())
            self._matching[domain] = nodes
        return nodes

    def unsuspend(self, job: str, domain: str = "") -> None:
        """Release the job with the node selector of `domain` ("" for none)."""
        j = self._job(job)
        if not (j.running or j.done):
            if domain:
                self._selector[job] = self.matching(domain)
            else:
                self._selector.pop(job, None)
            self._open[job] = set()
            self._whole.discard(job)
        super().unsuspend(job)

    def suspend(self, job: str, now: float) -> None:
        self._close(job)
        super().suspend(job, now)

    def complete(self, job: str, token: int, now: float) -> bool:
        done = super().complete(job, token, now)
        if done:
            self._close(job)
        return done

    def pod_ready(self, job: str, uid: str, now: float) -> bool:
        ready = super().pod_ready(job, uid, now)
        if ready and self.is_whole(job):
            self._whole.add(job)
        return ready

    def finish_accounting(self, now: float) -> None:
        for job in list(self._open):
            self._close(job)
        super().finish_accounting(now)

    def _create_pod(self, j: _Job, index: int) -> None:
        super()._create_pod(j, index)
        nodes = self._selector.get(j.spec.name)
        if nodes is not None:
            j.pods[index].nodes = nodes

    def _bind(self, pod: _Pod, n: int, now: float) -> None:
        super()._bind(pod, n, now)
        where = self._open.get(pod.job)
        if where is not None:
            where.add(n)

    def _close(self, job: str) -> None:
        where = self._open.pop(job, None)
        if where is not None:
            self.spans.append((job, frozenset(where), job in self._whole))
            self._whole.discard(job)


__all__ = ["BlockCluster", "Span"]
