"""When what a workload held is free: after its end took effect on the cluster.

The core says who holds quota (`core.admission.holds_quota`): an admitted
workload, and one whose admission ended on the record but not yet on the
cluster (an eviction not carried out, pods outliving a deletion). The admission
ledger names them; these are the runtime's steps that drop an entry once the
holding ended, and the view that must never hold a withdrawal back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from muster import contract
from muster.core import Effect, Evict, Pod, RunAdmission, Workload
from muster.core.admission import holds_quota
from muster.core.predecessors import PREDECESSOR_ENDED
from muster.core.workloads import ends_outliving, starts_outliving
from muster.retry import Refused
from muster.runtime.ports import (
    ClusterActions,
    Metrics,
    Stored,
    WorkloadStore,
    starts_holding,
    stops_holding,
)
from muster.runtime.view import view
from muster.schema import clip_utf8

log = logging.getLogger("muster.runtime")

ERROR_BYTES = 1024

OUTLIVING_ENDED = PREDECESSOR_ENDED
"""The admission request when pods that outlived their workload stop running."""


def withdrawal_done(store: WorkloadStore, w: Workload, effect: Evict) -> None:
    """The eviction `effect` of `w` took effect (or the workload is gone): only now does
    the quota it held go free, by dropping its ledger entry. Should that fail, the
    entry stays until a pass reads the workload settled and drops it."""
    if effect.attempt != w.attempt or holds_quota(w):
        return
    try:
        store.forget_recent({w.key: w.attempt})
    except Exception as exc:
        log.warning(
            "could not free the quota of a withdrawn workload; a pass will",
            extra={"workload": w.key, "error": str(exc)},
        )


def announce_release(
    snap: Stored | None, after: Workload, effects: tuple[Effect, ...]
) -> tuple[Effect, ...]:
    """`effects`, with an admission pass when the write they go with ends a holding that
    no decision announces: a snapshot no longer holding the pods that outlived their
    workload's deletion frees its quota, and someone queued may fit now."""
    if not stops_holding(snap, after, effects):
        return effects
    if any(isinstance(e, RunAdmission) for e in effects):
        return effects
    return (*effects, RunAdmission(OUTLIVING_ENDED))


def outliving_ended(w: Workload, changes: Iterable[tuple[Pod | None, Pod | None]]) -> bool:
    """Whether pod changes (stored record before, after) of `w` may end the holding of a
    deleted workload whose pods outlived it: a pass should judge it on the whole gang."""
    return any(ends_outliving(w, before, after) for before, after in changes)


def outliving_starts(
    store: WorkloadStore, w: Workload, changes: Iterable[tuple[Pod | None, Pod | None]]
) -> None:
    """Before pod changes of `w` are written: when they may start the holding of a deleted
    workload again (a pod of it heard of running after the holding ended, say bound
    after its deletion, or whose events came late), the ledger names it again. Should
    the changes then not hold it, a pass reading it drops the entry."""
    if any(starts_outliving(w, before, after) for before, after in changes):
        store.hold_again(w.key, w.attempt)


def holding_starts(
    store: WorkloadStore, snap: Stored | None, after: Workload, effects: tuple[Effect, ...]
) -> None:
    """Before a workload write: when it starts a holding no admission recorded (a
    predecessor's pod heard of running again), the ledger names the workload again."""
    if starts_holding(snap, after, effects):
        store.hold_again(after.key, after.attempt)


def record_view(cluster: ClusterActions, metrics: Metrics, w: Workload) -> None:
    """Muster's view onto the workload, for `kubectl` users. A view only: one the API
    server refuses (a 422 on annotations their owner filled to the limit) is logged
    and counted, never failing the decision's effects (so never quarantining it)."""
    try:
        cluster.record(w.key, w.kind, view(w))
    except Refused as exc:
        metrics.count(contract.METRIC_EFFECT_FAILURES, effect="RecordView")
        log.warning(
            "could not write Muster's view onto the workload",
            extra={"workload": w.key, "error": clip_utf8(str(exc), ERROR_BYTES)},
        )
