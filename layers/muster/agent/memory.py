"""What the agent knows of the cluster, and the event each change of it sends.

**Memory** holds only what Muster manages: its labelled workloads, their pods
(kept until their deletion is sent, even after the workload is gone), pod
groups, nodes, and, for at most `waiting_ttl` seconds, pods that arrived before
their workload (a list of pods processed before the list of Jobs). Of other
pods it keeps only the node and GPUs of those bound with GPUs, summed per node
for the capacity check (`foreignGpus` on node events). A pod is Muster's while
its workload runs under it: once the workload finished or was deleted (say with
`--cascade=orphan`), its pods that still run hold GPUs the control plane no
longer places, so they count as others' from then on.

**Sequence numbers.** An event's `seq` is the object's `resourceVersion`. On every
etcd-backed API server (EKS included) it is the decimal etcd revision at which the
object last changed: one counter for the whole cluster, so a newer state of an
object always has a larger number, whoever observes it (after an agent restart, a
leader change or a relist). A relist re-sends objects with the numbers they already
had, so the control plane drops them as duplicates unless it missed them. A
deletion carries the deletion's revision (watch) or the list's revision (relist).
A pod group's workload event carries the revision of the pod change that produced
it; a workload re-sent because the PriorityClasses changed carries the revision of
that change (the listing's, for a relist) when it is the newer. Should an API
server ever hand out a non-numeric resourceVersion, the agent falls back to
microseconds since the epoch, strictly increasing within a process.

**Priority classes.** Until the PriorityClasses are first listed, workloads are
reported without one (their annotation orders them); the listing then re-sends
those it alters. A class change that races a change of the workload itself, seen
in the other order, can leave the older view at the control plane until the
workload changes again.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from muster.agent.mapping import (
    TOLERATED_TAINTS,
    NodeView,
    PodView,
    PriorityClasses,
    QuantityError,
    WorkloadView,
    compact_pod,
    meta,
    node_view,
    object_key,
    orphaned_from,
    pod_gpus,
    pod_group_view,
    pod_view,
    pod_workload,
    with_priority_class,
    workload_object_key,
    workload_view,
)
from muster.agent.sender import Entry, Outbox, Sender
from muster.core.model import Kind
from muster.schema import (
    NODE_DELETED,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    node_detail,
    pod_detail,
    workload_detail,
)

log = logging.getLogger("muster.agent")

ACTIVE = "Active"  # a workload's status while it runs (not Succeeded, Failed or Deleted)
ENDED = ("Succeeded", "Failed")  # pod phases that hold nothing any more


def _gpus(pod: Mapping[str, Any]) -> int:
    try:
        return pod_gpus(pod)
    except QuantityError:
        return 0  # the API server admits only whole GPU counts on a pod


class SeqSource:
    """`seq` from resourceVersion; a time-based fallback for non-numeric versions."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.last_fallback = 0
        self.warned = False

    def __call__(self, version: object) -> int:
        text = str(version or "")
        if text.isdigit():
            return int(text)
        if not self.warned:
            log.warning("non-numeric resourceVersion %r; using a time-based seq", text)
            self.warned = True
        self.last_fallback = max(self.last_fallback + 1, int(self.clock() * 1_000_000))
        return self.last_fallback


class Memory:
    """The agent's memory, and the events a change of one object sends.

    A watched change of a workload, pod or node goes through here; a relist (a
    whole listing) is the `Agent`'s.
    """

    def __init__(
        self,
        cluster: str,
        outbox: Outbox,
        sender: Sender,
        *,
        clock: Callable[[], float] = time.time,
        may_send: Callable[[], bool] = lambda: True,
        waiting_ttl: float = 60.0,
        max_waiting: int = 10_000,
        tolerated_taints: frozenset[str] = TOLERATED_TAINTS,
    ) -> None:
        self.cluster = cluster
        # Taint keys every workload tolerates, for the capacity check's reports.
        self.tolerated = tolerated_taints
        self.waiting_ttl = waiting_ttl
        self.max_waiting = max_waiting
        self.waiting_since: dict[str, float] = {}  # workload -> when its first pod waited
        self.snapshots = 0
        self.outbox = outbox
        self.sender = sender
        self.clock = clock
        self.may_send = may_send
        self.seq = SeqSource(clock)
        self.stats: Counter[str] = Counter()
        self.workloads: dict[str, WorkloadView] = {}  # labelled Jobs, JobSets, PyTorchJobs, groups
        self.workload_seq: dict[str, int] = {}
        self.pods: dict[str, tuple[Kind, str, PodView]] = {}  # "ns/pod" -> (kind, workload, view)
        self.by_labels: set[str] = set()  # pods taken for a workload's by their labels alone
        self.waiting: dict[str, dict[str, dict[str, Any]]] = {}  # workload -> pods seen before it
        self.groups: dict[str, dict[str, dict[str, Any]]] = {}  # pod group -> its pods
        self.nodes: dict[str, NodeView] = {}
        self.node_seq: dict[str, int] = {}  # the seq of the last event sent per node
        # Pods Muster does not manage that hold GPUs: "ns/pod" -> (node, GPUs); sums per node.
        self.foreign: dict[str, tuple[str, int]] = {}
        self.foreign_on: dict[str, int] = {}
        # Muster's pods holding GPUs, "ns/pod" -> (node, GPUs): others' once their
        # workload has finished or is gone.
        self.managed: dict[str, tuple[str, int]] = {}
        self.problems: dict[str, tuple[str, ...]] = {}  # bad annotations already logged
        self.invalid: set[str] = set()  # workloads that cannot be reported as they are
        # The cluster's PriorityClasses (None until listed: workloads go without one).
        self.classes: PriorityClasses | None = None
        self.class_objects: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ priority classes

    def _classes(self, objects: dict[str, dict[str, Any]], seq: int) -> None:
        """A new map of PriorityClasses: re-send the workloads whose class it changes."""
        self.class_objects = objects
        self.classes = PriorityClasses.of(objects.values())
        for key, view in list(self.workloads.items()):
            if with_priority_class(view, self.classes) != view:
                self._send_workload(view, max(self.workload_seq[key], seq))

    # ------------------------------------------------------------------ workloads

    def _workload(
        self, kind: Kind, obj: Mapping[str, Any], *, deleted: bool, force: bool = False
    ) -> None:
        key = workload_object_key(kind, obj)
        seq = self.seq(meta(obj).get("resourceVersion"))
        view = workload_view(kind, obj, self.tolerated)
        if view is None:
            return
        if deleted:
            self._workload_gone(key, kind, seq)
            return
        known = key in self.workloads
        self._send_workload(view, seq, force=force)
        if not known:
            self.waiting_since.pop(key, None)
            for pod in self.waiting.pop(key, {}).values():
                self._pod(pod, deleted=False)

    def _send_workload(self, view: WorkloadView, seq: int, *, force: bool = False) -> None:
        view = with_priority_class(view, self.classes)
        if not force and self.workloads.get(view.key) == view:
            return
        if view.problems and self.problems.get(view.key) != view.problems:
            self.problems[view.key] = view.problems  # log each distinct problem set once
            for problem in view.problems:
                self.stats["invalid_annotations"] += 1
                log.warning("%s %s: %s (ignored)", view.kind, view.key, problem)
        if view.refused or view.gang_size < 1:
            if view.key not in self.invalid:
                self.invalid.add(view.key)
                self.stats["invalid_workloads"] += 1
                why = view.refused or "no gang size"
                log.error("%s %s: %s; not reported until fixed", view.kind, view.key, why)
            return
        self.invalid.discard(view.key)
        was = self.workloads.get(view.key)
        self.workloads[view.key] = view
        self.workload_seq[view.key] = seq
        if was is not None and was.status == ACTIVE and view.status != ACTIVE:
            self._no_longer_managed(view.key, seq)
        detail = workload_detail(
            cluster=self.cluster,
            workload=view.key,
            kind=view.kind,
            queue=view.queue,
            gang_size=view.gang_size,
            seq=seq,
            gpus=view.gpus,
            priority=view.priority,
            created_at=view.created_at,
            timeout=view.timeout,
            status=view.status,
            observed_at=self._now(),
            uid=view.uid,
            priority_class=view.priority_class,
            class_priority=view.class_priority,
            shape=view.shape,
            placement=view.placement,
            topology=view.topology,
        )
        self._put(f"workload:{view.key}", WORKLOAD_OBSERVED, detail)

    def _workload_gone(self, key: str, kind: Kind, seq: int) -> None:
        view = self.workloads.pop(key, None)
        self.workload_seq.pop(key, None)
        self.problems.pop(key, None)
        self.invalid.discard(key)
        if view is None:
            return
        # Its pods stay known until their own deletions (garbage collection) are sent,
        # so that the control plane's items of them expire as tombstones; those still
        # running hold GPUs that are others' now.
        self._no_longer_managed(key, seq)
        detail = workload_detail(
            cluster=self.cluster,
            workload=key,
            kind=kind,
            queue=view.queue,
            gang_size=view.gang_size,
            seq=seq,
            gpus=view.gpus,
            priority=view.priority,
            created_at=view.created_at,
            status="Deleted",
            observed_at=self._now(),
            uid=view.uid,
        )
        self._put(f"workload:{key}", WORKLOAD_OBSERVED, detail)

    # ------------------------------------------------------------------ pods

    def workload_of(self, pod: Mapping[str, Any]) -> tuple[Kind, str] | None:
        """(kind, key) of the workload `pod` counts for (`_owner`)."""
        owner = self._owner(pod)
        return None if owner is None else owner[:2]

    def _owner(self, pod: Mapping[str, Any]) -> tuple[Kind, str, str | None] | None:
        """(kind, key, the uid of the object it was orphaned from or None) of the
        workload `pod` counts for: its controller's (`pod_workload`); or, for a pod
        without one, the Job its labels say it was orphaned from (`orphaned_from`);
        or, for a pod the agent knew as a Job's, JobSet's or PyTorchJob's that lost its
        controller reference, still that one's until the pod ends. An orphaning delete
        (`--cascade=orphan`) removes the reference before the object goes, and the
        pod's GPUs stay what that workload was charged for while it runs. A pod never
        known as the workload's, without the labels of an object gone, stays nobody's."""
        owner = pod_workload(pod)
        if owner is not None:
            return owner[0], owner[1], None
        orphan = self._orphaned(pod)
        if orphan is not None:
            return orphan
        known = self.pods.get(object_key(pod))
        if known is None or known[0] is Kind.POD_GROUP:
            return None
        if known[2].uid != str(meta(pod).get("uid") or ""):
            return None
        return known[0], known[1], None

    def _orphaned(self, pod: Mapping[str, Any]) -> tuple[Kind, str, str] | None:
        """(kind, key, uid) of the Job a pod without a controller was orphaned from
        (`orphaned_from`), unless that is the live object under the Job's name (a bare
        pod labelled as its own, or one whose orphaning delete is under way: it never
        counts for the object), or the pod is first seen ended or asks for no GPUs (it
        holds nothing charged; nor is every CPU pod of other teams' orphaned Jobs sent
        to a control plane that knows no such workload). A forged pod can then only add
        a running pod to a gone object's holding: its tenant is charged more, never
        less."""
        orphan = orphaned_from(pod)
        if orphan is None:
            return None
        kind, key, uid = orphan
        live = self.workloads.get(key)
        if live is not None and live.kind is kind and live.uid == uid:
            return None
        known = self.pods.get(object_key(pod))
        seen = known is not None and known[2].uid == str(meta(pod).get("uid") or "")
        if not seen and ((pod.get("status") or {}).get("phase") in ENDED or not _gpus(pod)):
            return None
        return orphan

    def _pod(self, pod: Mapping[str, Any], *, deleted: bool, force: bool = False) -> None:
        owner = self._owner(pod)
        name = object_key(pod)
        if owner is None:
            self._foreign_pod(name, pod, deleted=deleted, mine=False)
            known = self.pods.get(name)
            if known is not None:
                # No longer its workload's (orphaned: its controller reference is gone).
                seq = self.seq(meta(pod).get("resourceVersion"))
                self._send_pod(known[0], known[1], name, pod, seq, deleted=True)
            return
        kind, workload, orphaned = owner
        seq = self.seq(meta(pod).get("resourceVersion"))
        if orphaned is not None:
            # Its object is gone: its GPUs are others' now, charged to that object.
            self._foreign_pod(name, pod, deleted=deleted, mine=False)
            if not deleted or name in self.pods:
                self._send_pod(
                    kind, workload, name, pod, seq, deleted=deleted, force=force, orphaned=orphaned
                )
            return
        if kind is Kind.POD_GROUP:
            self._foreign_pod(name, pod, deleted=deleted, mine=True)
            self._group_member(workload, pod, seq, deleted=deleted, force=force)
            refused = workload not in self.workloads or workload in self.invalid
            if refused and not deleted and name not in self.pods:
                # The group is not valid (see the log): a pod of it not yet reported
                # waits until it is, so that the control plane never counts (and
                # releases) pods the group's last valid view does not charge for.
                return
        elif workload not in self.workloads or self.workloads[workload].kind is not kind:
            self._foreign_pod(name, pod, deleted=deleted, mine=False)
            if name in self.pods:
                # A pod of a workload that is gone: only its end still matters (the
                # control plane holds the workload's quota until its pods stop).
                if deleted or (pod.get("status") or {}).get("phase") in ENDED:
                    self._send_pod(kind, workload, name, pod, seq, deleted=deleted)
                return
            # Not (yet) a known labelled workload: remember it for a while, in case its
            # workload shows up (most pods waiting here are of other teams' Jobs).
            waiting = self.waiting.setdefault(workload, {})
            self.waiting_since.setdefault(workload, self.clock())
            if deleted:
                waiting.pop(name, None)
                if not waiting:
                    del self.waiting[workload]
                    self.waiting_since.pop(workload, None)
            else:
                waiting[name] = compact_pod(pod)
            return
        else:
            mine = self.workloads[workload].status == ACTIVE
            self._foreign_pod(name, pod, deleted=deleted, mine=mine)
        self._send_pod(kind, workload, name, pod, seq, deleted=deleted, force=force)

    def _foreign_pod(
        self, name: str, pod: Mapping[str, Any], *, deleted: bool, mine: bool, seq: int = 0
    ) -> None:
        """Keep the GPUs that pods Muster does not manage hold, summed per node.

        A pod counts while it is bound, not finished, asks for GPUs and belongs to
        no workload Muster runs (a pod that arrives before its workload counts
        until the workload shows up; one of a finished or deleted workload counts
        from then on). A change of a node's sum is a node event, coalesced per node
        by the outbox: a busy cluster sends at most one per node per window, not
        one per pod.
        """
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        gpus = _gpus(pod)
        held = (str(node), gpus) if node and gpus and not deleted and phase not in ENDED else None
        if mine and held is not None:
            self.managed[name] = held
        else:
            self.managed.pop(name, None)
        self._count_foreign(
            name,
            None if mine else held,
            lambda: seq or self.seq(meta(pod).get("resourceVersion")),
        )

    def _no_longer_managed(self, workload: str, seq: int) -> None:
        """`workload` finished or is gone: its pods still holding GPUs are others' now."""
        for name, (_, owner, _) in list(self.pods.items()):
            held = self.managed.pop(name, None) if owner == workload else None
            if held is not None:
                self._count_foreign(name, held, lambda: seq)

    def _count_foreign(
        self, name: str, held: tuple[str, int] | None, seq_of: Callable[[], int]
    ) -> None:
        """`name` holds `held` (node, GPUs) of others' GPUs now (None: nothing)."""
        old = self.foreign.get(name)
        if old == held:
            return
        seq = seq_of()
        if old is not None:
            del self.foreign[name]
            self.foreign_on[old[0]] -= old[1]
        if held is not None:
            self.foreign[name] = held
            self.foreign_on[held[0]] = self.foreign_on.get(held[0], 0) + held[1]
        for changed in {old[0] if old else "", held[0] if held else ""} - {""}:
            if not self.foreign_on.get(changed):
                self.foreign_on.pop(changed, None)
            if changed in self.nodes:
                self._send_node(changed, max(self.node_seq.get(changed, 0), seq))

    def _send_pod(
        self,
        kind: Kind,
        workload: str,
        name: str,
        pod: Mapping[str, Any],
        seq: int,
        *,
        deleted: bool,
        force: bool = False,
        orphaned: str = "",
    ) -> None:
        """`orphaned`: the uid of the object the pod was orphaned from, by its labels.
        A pod first taken for a workload's by its labels alone is never reported Ready
        until a controller owns it: no bare pod counts for a gang."""
        view = pod_view(workload, pod, kind)
        known = self.pods.get(name)
        if orphaned:
            view = replace(view, owner=orphaned)
            self.by_labels.add(name)
        elif not view.owner and known is not None and known[2].uid == view.uid:
            view = replace(view, owner=known[2].owner)  # orphaned: still its former owner's
        if kind is Kind.POD_GROUP or pod_workload(pod) is not None:
            self.by_labels.discard(name)
        elif name in self.by_labels:
            view = replace(view, ready=False)
        if deleted:
            self.pods.pop(name, None)
            self.by_labels.discard(name)
        elif not force and known is not None and known[2] == view:
            return
        else:
            self.pods[name] = (kind, workload, view)
        detail = pod_detail(
            cluster=self.cluster,
            workload=workload,
            pod=view.pod,
            seq=seq,
            uid=view.uid,
            phase=view.phase,
            ready=view.ready and not deleted,
            node=view.node,
            deleted=deleted,
            reason=view.reason,
            message=view.message,
            observed_at=self._now(),
            scheduled=view.scheduled,
            waiting=view.waiting,
            restarts=view.restarts,
            terminated=view.terminated,
            exit_code=view.exit_code,
            owner=view.owner,
        )
        self._put(f"pod:{name}", POD_OBSERVED, detail)

    def _group_member(
        self, group: str, pod: Mapping[str, Any], seq: int, *, deleted: bool, force: bool = False
    ) -> None:
        members = self.groups.setdefault(group, {})
        name = str(meta(pod).get("name"))
        if deleted:
            members.pop(name, None)
        else:
            members[name] = compact_pod(pod)
        view = pod_group_view(group, members.values(), self.tolerated)
        if view is not None:
            # Newer than every member's own version, so a re-derived view is never stale.
            seq = max([seq, *(self.seq(meta(p).get("resourceVersion")) for p in members.values())])
            was_refused = group in self.invalid
            self._send_workload(view, seq, force=force)
            if was_refused and group not in self.invalid:
                self._withheld_members(group, members)
        if not members:
            # The pods were deleted (an eviction, or the user); the group stays known
            # to the control plane until its controller creates replacements.
            del self.groups[group]

    def _withheld_members(self, group: str, members: Mapping[str, Mapping[str, Any]]) -> None:
        """A group valid again: the pods held back while it was refused are reported."""
        for pod in members.values():
            name = object_key(pod)
            if name not in self.pods:
                seq = self.seq(meta(pod).get("resourceVersion"))
                self._send_pod(Kind.POD_GROUP, group, name, pod, seq, deleted=False)

    def _forget_waiting(self) -> None:
        """Pods whose workload did not show up in time are not Muster's (or a relist heals)."""
        cutoff = self.clock() - self.waiting_ttl
        total = sum(len(w) for w in self.waiting.values())
        for workload, since in list(self.waiting_since.items()):
            if since > cutoff and total <= self.max_waiting:
                break  # oldest first: the rest are younger
            total -= len(self.waiting.pop(workload, {}))
            del self.waiting_since[workload]
            self.stats["waiting_forgotten"] += 1

    # ------------------------------------------------------------------ nodes

    def _node(self, node: Mapping[str, Any], *, deleted: bool, force: bool = False) -> None:
        name = str(meta(node).get("name"))
        view = node_view(node, self.tolerated)
        # Never below what was sent for the node: a foreign pod's change may be newer
        # than the node's own revision.
        seq = max(self.seq(meta(node).get("resourceVersion")), self.node_seq.get(name, 0))
        if deleted:
            view = NodeView(False, view.health, 0, NODE_DELETED)
            self.nodes.pop(name, None)
            self.node_seq.pop(name, None)
        elif not force and self.nodes.get(name) == view:
            return
        else:
            self.nodes[name] = view
        self._send_node(name, seq, view)

    def _send_node(self, name: str, seq: int, view: NodeView | None = None) -> None:
        """The node's condition and capacity, with the foreign GPUs summed on it."""
        view = view or self.nodes[name]
        if name in self.nodes:
            self.node_seq[name] = seq
        detail = node_detail(
            cluster=self.cluster,
            node=name,
            seq=seq,
            ready=view.ready,
            health=view.health,
            gpus=view.gpus,
            unschedulable=view.unschedulable,
            foreign_gpus=self.foreign_on.get(name, 0) if name in self.nodes else 0,
            observed_at=self._now(),
            topology=view.topology,
        )
        self._put(f"node:{name}", NODE_OBSERVED, detail)

    # ------------------------------------------------------------------ output

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _put(self, key: str, detail_type: str, detail: dict[str, Any]) -> None:
        self.outbox.put(Entry(key, detail_type, detail), self.clock())

    def reset(self) -> None:
        """Forget everything (leadership lost); the next leader relists."""
        self.workloads.clear()
        self.workload_seq.clear()
        self.pods.clear()
        self.by_labels.clear()
        self.waiting.clear()
        self.waiting_since.clear()
        self.groups.clear()
        self.nodes.clear()
        self.node_seq.clear()
        self.foreign.clear()
        self.foreign_on.clear()
        self.managed.clear()
        self.problems.clear()
        self.invalid.clear()
        self.classes = None
        self.class_objects = {}
        self.outbox.clear()
