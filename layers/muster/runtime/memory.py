"""In-memory adapters of the runtime ports, for unit tests and local runs.

`MemoryStore` keeps the same conditional-write rules as the DynamoDB store (a
version per workload, a revision per pod, an epoch that retires an evicted
attempt's pods, pods kept per workload incarnation, expiry times where DynamoDB
has a TTL), and can be told to lose the next race (`conflict_next`) so that
tests exercise the retry paths. `expire(now)` plays DynamoDB's TTL deletion.
The pod listing lives on the pod items as stamps and stubs (`muster.runtime.listing`),
and a finished incarnation's pods expire in chunks that resume after a crash.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from muster.core import ACTIVE_PHASES, Effect, LogEvent, Phase, Pod, SnapshotPart, Workload
from muster.core.capacity import NodeCapacity
from muster.runtime import listing, ports
from muster.runtime.listing import Stamp
from muster.runtime.memory_ports import MemoryBus, MemoryMessages, MemoryMetrics, MemoryTimers
from muster.runtime.ports import (
    MAX_POD_WRITES,
    Conflict,
    Ledger,
    PodWrite,
    Quarantine,
    Stored,
    StoredPod,
    StoredPods,
)
from muster.schema import NODE_DELETED

__all__ = ["MemoryBus", "MemoryMessages", "MemoryMetrics", "MemoryStore", "MemoryTimers"]

EXPIRY_CHUNK = 100
"""Pod items set to expire per write (DynamoDB: one transaction)."""


@dataclass
class _Item:
    workload: Workload
    version: int
    epoch: int
    outbox: tuple[Effect, ...]
    ready_count: int = 0
    live_count: int | None = 0
    failures: int = 0
    quarantine: Quarantine | None = None
    # (expiresAt, the uid whose pods stay: "" none) of pods still to be set to expire
    expiring: tuple[float, str] | None = None

    def add(self, ready_delta: int, live_delta: int) -> None:
        """A pod write's changes of the counts (one not kept stays unkept)."""
        self.ready_count += ready_delta
        if self.live_count is not None:
            self.live_count += live_delta


def _counts(current: _Item | None, epoch: int) -> tuple[int, int | None]:
    """The counts a workload write starts from: none after an eviction (every pod is
    retired) or for a new workload."""
    if current is None or current.epoch != epoch:
        return 0, 0
    return current.ready_count, current.live_count


@dataclass
class MemoryStore:
    items: dict[str, _Item] = field(default_factory=dict)
    # key -> pod -> (pod, rev, epoch, owner: the workload uid it was written for);
    # pod None: a stub that only carries what a listing said of the name
    pods: dict[str, dict[str, tuple[Pod | None, int, int, str]]] = field(default_factory=dict)
    stamps: dict[str, dict[str, Stamp]] = field(default_factory=dict)  # key -> pod -> stamp
    histories: dict[str, dict[tuple[int, int], dict[str, Any]]] = field(default_factory=dict)
    ledger_state: Ledger = field(default_factory=Ledger)
    settings_doc: tuple[dict[str, Any], int] | None = None
    conflict_next: int = 0
    writes: int = 0
    tombstone_ttl: float = 86400.0
    finished_ttl: float = 30 * 86400.0
    expires: dict[tuple[str, str | None], float] = field(default_factory=dict)  # (key, pod)
    snapshots: dict[str, dict[int, SnapshotPart]] = field(default_factory=dict)
    snapshot_revisions: dict[str, int] = field(default_factory=dict)
    slices: dict[str, set[int]] = field(default_factory=dict)  # scope#snapshot -> slices open
    capacity: dict[str, NodeCapacity] = field(default_factory=dict)
    node_expires: dict[str, float] = field(default_factory=dict)  # deleted nodes
    node_reads: int = 0
    expiry_chunk: int = EXPIRY_CHUNK

    def put_node(
        self, node: NodeCapacity, now: float | None = None
    ) -> tuple[bool, NodeCapacity | None]:
        known = self.capacity.get(node.node)
        if known is not None and known.seq >= node.seq:
            return False, known
        self.capacity[node.node] = node
        self.writes += 1
        if node.unschedulable == NODE_DELETED:
            self.node_expires[node.node] = (now or 0.0) + self.tombstone_ttl
        else:
            self.node_expires.pop(node.node, None)
        return True, known

    def nodes(self) -> list[NodeCapacity]:
        self.node_reads += 1
        return [
            self.capacity[name]
            for name in sorted(self.capacity)
            if self.capacity[name].unschedulable != NODE_DELETED
        ]

    def expire(self, now: float) -> int:
        """Delete what has expired, as DynamoDB's TTL does (eventually); returns how many."""
        gone = [k for k, at in self.expires.items() if at <= now]
        for key, pod in gone:
            del self.expires[(key, pod)]
            if pod is None:
                self.items.pop(key, None)
                self.histories.pop(key, None)
            else:
                self.pods.get(key, {}).pop(pod, None)
                self.stamps.get(key, {}).pop(pod, None)
        nodes = [n for n, at in self.node_expires.items() if at <= now]
        for node in nodes:
            del self.node_expires[node]
            self.capacity.pop(node, None)
        return len(gone) + len(nodes)

    def item_count(self) -> int:
        return len(self.items) + sum(len(p) for p in self.pods.values())

    def _maybe_conflict(self) -> None:
        if self.conflict_next > 0:
            self.conflict_next -= 1
            raise Conflict("injected")

    def load(self, key: str) -> Stored | None:
        item = self.items.get(key)
        if item is None:
            return None
        stored = self.pods.get(key, {})
        uid = item.workload.uid
        pods = {
            n: ports.settle_pod(p, e, item.epoch)
            for n, (p, _, e, owner) in stored.items()
            if p is not None and ports.belongs(owner, uid)
        }
        stamps = self.stamps.get(key, {})
        listed = listing.rebuilt(
            item.workload.listed_seq,
            ((n, stamps.get(n), p, owner) for n, (p, _, _, owner) in stored.items()),
            uid,
        )
        return Stored(
            replace(item.workload, pods=pods, listed=listed),
            item.version,
            item.epoch,
            {n: rev for n, (_, rev, _, _) in stored.items()},
            item.outbox,
            item.ready_count,
            item.failures,
            item.quarantine,
            item.expiring is not None,
            item.live_count,
        )

    def load_pod(self, key: str, pod: str | None) -> StoredPod | None:
        item = self.items.get(key)
        if item is None:
            return None
        stored = self.pods.get(key, {}).get(pod) if pod else None
        w = item.workload
        mine = stored is not None and ports.belongs(stored[3], w.uid)
        known = stored[0] if stored and mine else None
        if stored is not None and pod is not None:
            stamp = self.stamps.get(key, {}).get(pod)
            found = [(pod, stamp, stored[0], stored[3])]
            w = replace(w, listed=listing.rebuilt(w.listed_seq, found, w.uid))
        return StoredPod(
            w,
            item.version,
            item.epoch,
            item.ready_count,
            item.outbox,
            ports.settle_pod(known, stored[2], item.epoch) if stored and known else None,
            stored[1] if stored else None,
            item.live_count,
            item.failures,
        )

    def load_pods(self, key: str, names: Sequence[str]) -> StoredPods | None:
        item = self.items.get(key)
        if item is None:
            return None
        stored = self.pods.get(key, {})
        found = {n: stored[n] for n in names if n in stored}
        stamps = self.stamps.get(key, {})
        w = item.workload
        listed = listing.rebuilt(
            w.listed_seq,
            ((n, stamps.get(n), p, owner) for n, (p, _, _, owner) in found.items()),
            w.uid,
        )
        return StoredPods(
            replace(w, listed=listed),
            item.version,
            item.epoch,
            item.ready_count,
            item.outbox,
            {
                n: ports.settle_pod(p, e, item.epoch)
                for n, (p, _, e, owner) in found.items()
                if p is not None and ports.belongs(owner, w.uid)
            },
            {n: rev for n, (_, rev, _, _) in found.items()},
            item.live_count,
            item.failures,
        )

    def write_pods(
        self,
        key: str,
        writes: Sequence[PodWrite],
        epoch: int,
        ready_delta: int,
        now: float = 0.0,
        *,
        live_delta: int = 0,
    ) -> None:
        if len(writes) > MAX_POD_WRITES:
            raise ValueError(f"{len(writes)} pod writes in one transaction")
        self._maybe_conflict()
        for write in writes:
            self._check_pod(key, write)
        item = self.items[key]
        if (ready_delta or live_delta) and item.epoch != epoch:
            raise Conflict(f"{key}: evicted meanwhile")
        for write in writes:
            self._apply_pod(key, write, epoch, now, listing.carried(write))
        item.add(ready_delta, live_delta)

    def _check_pod(self, key: str, write: PodWrite) -> None:
        current = self.pods.get(key, {}).get(write.name)
        if (current[1] if current else None) != write.expected:
            raise Conflict(f"pod {write.name}")

    def _apply_pod(
        self, key: str, write: PodWrite, epoch: int, now: float, stamp: Stamp | None
    ) -> None:
        stored = self.pods.setdefault(key, {})
        stamps = self.stamps.setdefault(key, {})
        self.writes += 1
        self.expires.pop((key, write.name), None)
        stamps.pop(write.name, None)
        if stamp is not None:
            stamps[write.name] = stamp
        if write.pod is None and stamp is None:
            stored.pop(write.name, None)
        else:
            stored[write.name] = (write.pod, (write.expected or 0) + 1, epoch, write.owner)
            if write.pod is not None and write.pod.deleted:
                self.expires[(key, write.name)] = now + self.tombstone_ttl

    def _stamp(self, key: str, name: str, stamp: Stamp, owner: str) -> None:
        """A stamp on an item not otherwise written (a stub where there is none)."""
        stored = self.pods.setdefault(key, {})
        pod, rev, epoch, was = stored.get(name, (None, 0, 0, owner))
        stored[name] = (pod, rev + 1, epoch, was)
        self.stamps.setdefault(key, {})[name] = stamp
        self.writes += 1

    def write_pod(
        self,
        key: str,
        write: PodWrite,
        epoch: int,
        ready_delta: int,
        now: float = 0.0,
        *,
        live_delta: int = 0,
    ) -> None:
        self._maybe_conflict()
        self._check_pod(key, write)
        item = self.items[key]
        if (ready_delta or live_delta) and item.epoch != epoch:
            raise Conflict(f"{key}: evicted meanwhile")
        self._apply_pod(key, write, epoch, now, listing.carried(write))
        item.add(ready_delta, live_delta)

    def write_workload(
        self,
        before: Stored | None,
        after: Workload,
        epoch: int,
        outbox: Sequence[Effect],
        now: float,
        pods: Sequence[PodWrite] = (),
        ready_delta: int = 0,
        *,
        live_delta: int = 0,
        expiring: bool = False,
    ) -> int:
        self._maybe_conflict()
        current = self.items.get(after.key)
        expected = before.version if before else None
        if (current.version if current else None) != expected:
            raise Conflict(after.key)
        for write in pods:
            self._check_pod(after.key, write)
        count, live = _counts(current, epoch)
        version = (expected or 0) + 1
        stamps = listing.stamping(before, after, pods)
        for name, stamp in stamps.others.items():
            self._stamp(after.key, name, stamp, after.uid)
        self.writes += 1
        left = (
            (now + self.finished_ttl, "" if after.phase is Phase.FINISHED else after.uid)
            if expiring
            else (current.expiring if current else None)
        )
        self.items[after.key] = _Item(
            replace(after, pods={}, listed={}),
            version,
            epoch,
            tuple(outbox),
            count + ready_delta,
            None if live is None else live + live_delta,
            current.failures if current else 0,
            current.quarantine if current else None,
            left,
        )
        if ports.stops_holding(before, after, outbox):  # the ledger names every quota holder
            recent = {k: a for k, a in self.ledger_state.recent.items() if k != after.key}
            self.ledger_state = Ledger(self.ledger_state.version, recent)
        if after.phase is Phase.FINISHED:
            self.expires[(after.key, None)] = now + self.finished_ttl
        else:
            self.expires.pop((after.key, None), None)
        for write in pods:
            self._apply_pod(after.key, write, epoch, now, stamps.written.get(write.name))
        return version

    def _set_to_expire(self, key: str, name: str, at: float) -> None:
        self.writes += 1
        self.expires[(key, name)] = min(self.expires.get((key, name), at), at)

    def expire_pods(self, key: str, names: Iterable[str], now: float) -> None:
        """Pods of a finished incarnation: expire, and leave the node index."""
        stored = self.pods.get(key, {})
        for name in names:
            if name in stored:
                self._set_to_expire(key, name, now + self.finished_ttl)

    def expire_leftover_pods(self, key: str) -> bool:
        """The recorded expiry, `expiry_chunk` pods a write; the record goes when done."""
        item = self.items.get(key)
        if item is None or item.expiring is None:
            return True
        at, keep = item.expiring
        todo = [
            name
            for name, (_, _, _, owner) in sorted(self.pods.get(key, {}).items())
            if (not keep or owner != keep) and (key, name) not in self.expires
        ]
        for start in range(0, len(todo), self.expiry_chunk):
            self._expire_chunk(key, todo[start : start + self.expiry_chunk], at)
        current = self.items.get(key)
        if current is not None and current.expiring == (at, keep):
            current.expiring = None  # unless a later write recorded another
        return True

    def _expire_chunk(self, key: str, names: Sequence[str], at: float) -> None:
        for name in names:
            self._set_to_expire(key, name, at)

    def expiring(self) -> list[str]:
        return sorted(k for k, i in self.items.items() if i.expiring is not None)

    def put_snapshot_part(self, part: SnapshotPart, now: float) -> list[SnapshotPart] | None:
        parts = self.snapshots.setdefault(f"{part.scope}#{part.snapshot}", {})
        parts[part.part] = part
        return list(parts.values()) if len(parts) >= part.parts else None

    def snapshot_revision(self, scope: str) -> int:
        return self.snapshot_revisions.get(scope, 0)

    def snapshot_parts(self, scope: str, snapshot: str) -> list[SnapshotPart]:
        return list(self.snapshots.get(f"{scope}#{snapshot}", {}).values())

    def open_slices(self, scope: str, snapshot: str, count: int, now: float) -> list[int]:
        name = f"{scope}#{snapshot}"
        if name not in self.slices:
            self.slices[name] = set(range(1, count + 1))
            self.writes += 1
        return sorted(self.slices[name])

    def close_slice(self, scope: str, snapshot: str, number: int) -> int:
        remaining = self.slices.get(f"{scope}#{snapshot}", set())
        if number in remaining:
            remaining.discard(number)
            self.writes += 1
        return len(remaining)

    def set_snapshot_revision(self, scope: str, revision: int) -> None:
        self.snapshot_revisions[scope] = max(revision, self.snapshot_revisions.get(scope, 0))
        for name in [n for n in self.snapshots if n.startswith(f"{scope}#")]:
            parts = self.snapshots[name]
            if any(p.revision <= revision for p in parts.values()):
                del self.snapshots[name]  # acted on, or older than what was

    def clear_outbox(self, key: str, version: int) -> None:
        item = self.items[key]
        if item.version != version:
            raise Conflict(key)
        item.outbox = ()
        item.failures = 0

    def record_failure(self, key: str, version: int, error: str) -> int:
        item = self.items[key]
        if item.version != version:
            raise Conflict(key)
        item.failures += 1
        return item.failures

    def quarantine(self, key: str, version: int, quarantine: Quarantine) -> None:
        item = self.items[key]
        if item.version != version:
            raise Conflict(key)
        item.quarantine = quarantine

    def release(self, key: str) -> bool:
        item = self.items.get(key)
        if item is None or item.quarantine is None:
            return False
        item.quarantine = None
        item.failures = 0
        return True

    def quarantined(self) -> list[tuple[str, Quarantine]]:
        return sorted((k, i.quarantine) for k, i in self.items.items() if i.quarantine is not None)

    def workloads_on_node(self, node: str) -> list[str]:
        """Workloads holding live pods on the node (the node index of the DynamoDB store)."""
        return sorted(
            key
            for key, pods in self.pods.items()
            if key in self.items
            and self.items[key].workload.phase is not Phase.FINISHED
            and any(
                p is not None
                and p.node == node
                and not p.retired
                and not p.deleted
                and (key, name) not in self.expires
                for name, (p, _, _, owner) in pods.items()
                if ports.belongs(owner, self.items[key].workload.uid)
            )
        )

    def pending(self) -> list[Workload]:
        return self.by_phase(Phase.PENDING.value)

    def by_phase(self, phase: str) -> list[Workload]:
        return [i.workload for i in self.items.values() if i.workload.phase.value == phase]

    def unsettled(self, phase: str) -> list[str]:
        return sorted(
            k for k, i in self.items.items() if i.outbox and i.workload.phase.value == phase
        )

    def get_workloads(
        self,
        keys: Iterable[str],
        unsettled: set[str] | None = None,
        quarantined: set[str] | None = None,
    ) -> list[Workload]:
        found = [self.items[k] for k in keys if k in self.items]
        if unsettled is not None:
            unsettled.update(i.workload.key for i in found if i.outbox)
        if quarantined is not None:
            quarantined.update(i.workload.key for i in found if i.quarantine is not None)
        return [i.workload for i in found]

    def ledger(self) -> Ledger:
        return self.ledger_state

    def ledger_version(self) -> int:
        return self.ledger_state.version

    def admit(
        self,
        before: Stored,
        after: Workload,
        outbox: Sequence[Effect],
        ledger: Ledger,
        now: float,
    ) -> int:
        self._maybe_conflict()
        if self.ledger_state.version != ledger.version:
            raise Conflict("ledger")
        version = self.write_workload(before, after, before.epoch, outbox, now)
        recent = {**self.ledger_state.recent, after.key: after.attempt}
        self.ledger_state = Ledger(ledger.version + 1, recent)
        return version

    def forget_recent(self, entries: Mapping[str, int]) -> None:
        recent = dict(self.ledger_state.recent)
        for key, attempt in entries.items():
            if recent.get(key) == attempt:
                del recent[key]
        self.ledger_state = Ledger(self.ledger_state.version, recent)

    def hold_again(self, key: str, attempt: int) -> None:
        recent = {**self.ledger_state.recent, key: attempt}
        self.ledger_state = Ledger(self.ledger_state.version + 1, recent)

    def append_history(
        self,
        key: str,
        version: int,
        index: int,
        event: LogEvent,
        detail: Mapping[str, Any],
        at: float,
    ) -> None:
        self.histories.setdefault(key, {})[(version, index)] = {
            "event": event.value,
            "at": at,
            "version": version,
            "detail": copy.deepcopy(dict(detail)),
        }

    def history(self, key: str) -> list[dict[str, Any]]:
        entries = self.histories.get(key, {})
        return [entries[k] for k in sorted(entries)]

    def settings_record(self) -> tuple[dict[str, Any], int] | None:
        return self.settings_doc

    def put_settings_record(self, doc: Mapping[str, Any], expected: int | None) -> None:
        current = self.settings_doc[1] if self.settings_doc else None
        if current != expected:
            raise Conflict("settings")
        self.settings_doc = (dict(doc), (expected or 0) + 1)

    def active(self) -> list[Workload]:
        return [i.workload for i in self.items.values() if i.workload.phase in ACTIVE_PHASES]
