"""The in-cluster agent: watches Muster's workloads, their pods and nodes; reports them.

It decides nothing. It turns Kubernetes objects into the events of `docs/events.md`
(built only with `muster.schema`'s builders) and sends them to the bus.

**Reconciliation.** After every list of workloads or pods (on start, on taking
the lease, after a watch expires, every resync) the agent also sends what the
list holds, as a `Cluster Snapshot` in parts under EventBridge's limits, so that
the control plane notices deletions that no watch event told it of.

What it keeps, its sequence numbers and the PriorityClasses: `muster.agent.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from muster.agent.mapping import (
    meta,
    object_key,
    workload_object_key,
    workload_view,
)
from muster.agent.memory import Memory
from muster.agent.watch import Change, Sync, SyncPage
from muster.core.model import Kind
from muster.core.reconcile import POD_SCOPE
from muster.kube.conventions import (
    JOB_RESOURCE,
    JOBSET_RESOURCE,
    NODE_RESOURCE,
    POD_RESOURCE,
    PRIORITYCLASS_RESOURCE,
    PYTORCHJOB_RESOURCE,
    QUEUE_LABEL,
    Resource,
)
from muster.schema import CLUSTER_SNAPSHOT, POD_OBSERVED, pod_detail, snapshot_details

WORKLOAD_RESOURCES: dict[str, Kind] = {
    JOB_RESOURCE.plural: Kind.JOB,
    JOBSET_RESOURCE.plural: Kind.JOBSET,
    PYTORCHJOB_RESOURCE.plural: Kind.PYTORCHJOB,
}
# (resource, label selector) pairs the agent watches.
WATCHED: tuple[tuple[Resource, str | None], ...] = (
    (PRIORITYCLASS_RESOURCE, None),
    (JOB_RESOURCE, QUEUE_LABEL),
    (JOBSET_RESOURCE, QUEUE_LABEL),
    (PYTORCHJOB_RESOURCE, QUEUE_LABEL),
    # Pods of a Job carry the Job's labels only if its template says so: watch all.
    (POD_RESOURCE, None),
    (NODE_RESOURCE, None),
)


@dataclass
class Listing:
    """What a relist in progress has shown so far: names and uids, never the objects."""

    present: set[str] = field(default_factory=set)
    workloads: dict[str, str] = field(default_factory=dict)  # key -> uid
    pods: dict[str, dict[str, str]] = field(default_factory=dict)  # workload -> pod -> uid
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)  # PriorityClasses (few)


class Agent(Memory):
    """Watch messages in, events out; a relist also sends what it listed.

    Single-threaded: reflector threads hand messages over a queue (see `AgentRunner`).
    A relist comes in pages; `listings` holds the one in progress per resource.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listings: dict[str, Listing] = {}

    # ------------------------------------------------------------------ input

    def handle(self, message: Sync | SyncPage | Change) -> None:
        plural = message.resource.plural
        if isinstance(message, Sync):
            message = SyncPage(
                message.resource, message.items, message.resource_version, True, True
            )
        if isinstance(message, SyncPage):
            self._sync_page(message)
            return
        self.stats[f"{message.type.lower()}_{plural}"] += 1
        deleted = message.type == "DELETED"
        if plural in WORKLOAD_RESOURCES:
            self._workload(WORKLOAD_RESOURCES[plural], message.obj, deleted=deleted)
        elif plural == POD_RESOURCE.plural:
            self._pod(message.obj, deleted=deleted)
        elif plural == NODE_RESOURCE.plural:
            self._node(message.obj, deleted=deleted)
        elif plural == PRIORITYCLASS_RESOURCE.plural:
            objects = dict(self.class_objects)
            name = str(meta(message.obj).get("name"))
            if deleted:
                objects.pop(name, None)
            else:
                objects[name] = message.obj
            self._classes(objects, self.seq(meta(message.obj).get("resourceVersion")))

    # ------------------------------------------------------------------ relists

    def _sync_page(self, page: SyncPage) -> None:
        """A page of a relist: its objects at once; what the listing lacked once it ends.

        Only names and uids of a listing are kept between its pages (for the
        deletions and the snapshot), never the objects themselves.
        """
        plural = page.resource.plural
        if page.first or plural not in self.listings:
            self.listings[plural] = Listing()
        listing = self.listings[plural]
        if plural in WORKLOAD_RESOURCES:
            self._list_workloads(WORKLOAD_RESOURCES[plural], page.items, listing)
        elif plural == POD_RESOURCE.plural:
            self._list_pods(page.items, listing)
        elif plural == NODE_RESOURCE.plural:
            for node in page.items:
                listing.present.add(str(meta(node).get("name")))
                self._node(node, deleted=False, force=True)
        elif plural == PRIORITYCLASS_RESOURCE.plural:
            listing.classes.update({str(meta(o).get("name")): o for o in page.items})
        if not page.last:
            return
        del self.listings[plural]
        self.stats[f"sync_{plural}"] += 1
        seq = self.seq(page.resource_version)
        if plural in WORKLOAD_RESOURCES:
            self._workloads_listed(WORKLOAD_RESOURCES[plural], listing, seq)
        elif plural == POD_RESOURCE.plural:
            self._pods_listed(listing, seq)
        elif plural == NODE_RESOURCE.plural:
            for name in [n for n in self.nodes if n not in listing.present]:
                self._node(
                    {"metadata": {"name": name, "resourceVersion": page.resource_version}},
                    deleted=True,
                )
        elif plural == PRIORITYCLASS_RESOURCE.plural:
            self._classes(listing.classes, seq)

    def _list_workloads(self, kind: Kind, items: list[dict[str, Any]], listing: Listing) -> None:
        for obj in items:
            key = workload_object_key(kind, obj)
            listing.present.add(key)
            self._workload(kind, obj, deleted=False, force=True)
            if workload_view(kind, obj) is not None:
                listing.workloads[key] = str(meta(obj).get("uid") or "")

    def _workloads_listed(self, kind: Kind, listing: Listing, seq: int) -> None:
        for key, view in list(self.workloads.items()):
            if view.kind is kind and key not in listing.present:
                self._workload_gone(key, kind, seq)
        self._snapshot(kind.value, seq, workloads=listing.workloads)

    def _snapshot(
        self,
        scope: str,
        revision: int,
        *,
        workloads: dict[str, str] | None = None,
        pods: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """What a list holds, for the control plane's reconciliation."""
        self.snapshots += 1
        snapshot = f"{scope}.{revision}.{self.snapshots}.{int(self.clock())}"
        details = snapshot_details(
            cluster=self.cluster,
            scope=scope,
            revision=revision,
            snapshot=snapshot,
            workloads=workloads,
            pods=pods,
            observed_at=self._now(),
        )
        self.stats["snapshot_parts"] += len(details)
        for detail in details:
            self._put(f"snapshot:{scope}:{detail['part']}", CLUSTER_SNAPSHOT, detail)

    def _list_pods(self, items: list[dict[str, Any]], listing: Listing) -> None:
        for pod in items:
            listing.present.add(object_key(pod))
            owner = self.workload_of(pod)
            self._pod(pod, deleted=False, force=True)
            if owner is not None:
                listing.pods.setdefault(owner[1], {})[str(meta(pod).get("name"))] = str(
                    meta(pod).get("uid") or ""
                )

    def _pods_listed(self, listing: Listing, seq: int) -> None:
        present = listing.present
        for name, (_, workload, view) in list(self.pods.items()):
            if name not in present:
                self.pods.pop(name)
                self.by_labels.discard(name)
                self.managed.pop(name, None)
                self._put(
                    f"pod:{name}",
                    POD_OBSERVED,
                    pod_detail(
                        cluster=self.cluster,
                        workload=workload,
                        pod=view.pod,
                        seq=seq,
                        uid=view.uid,
                        phase=view.phase,
                        node=view.node,
                        deleted=True,
                        observed_at=self._now(),
                        owner=view.owner,
                    ),
                )
        for group, members in list(self.groups.items()):
            namespace = group.split("/", 1)[0]
            gone = [n for n in members if f"{namespace}/{n}" not in present]
            for n in gone:
                self._group_member(group, {"metadata": {"name": n}}, seq, deleted=True)
        for name in [n for n in self.foreign if n not in present]:
            self._foreign_pod(name, {}, deleted=True, mine=False, seq=seq)
        for workload, waiting in list(self.waiting.items()):
            for name in [n for n in waiting if n not in present]:
                del waiting[name]
            if not waiting:
                del self.waiting[workload]
                self.waiting_since.pop(workload, None)
        self._snapshot(POD_SCOPE, seq, pods=listing.pods)

    # ------------------------------------------------------------------ output

    def flush(self, *, everything: bool = False) -> int:
        """Send what is due; returns how many entries went to the sender."""
        self._forget_waiting()
        if not self.may_send():
            return 0
        due = self.outbox.due(self.clock(), everything=everything)
        if due:
            self.sender.send(due)
        return len(due)


__all__ = ["WATCHED", "Agent"]
