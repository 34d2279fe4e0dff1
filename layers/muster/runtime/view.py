"""Muster's view on the workload in the cluster (annotations for `kubectl` users), and
when it is written: only when it changed, as an effect in the outbox.

A decision whose view differs from the stored workload's carries a `RecordView`
effect, stored with the decision like every other effect: a crash between the
commit and the write leaves it in the outbox, and whoever next loads the workload
writes it. A decision that leaves the view as it was costs no Kubernetes call.
"""

from __future__ import annotations

from collections.abc import Sequence

from muster.core import Effect, Phase, Reason, RecordView, Workload


def view(w: Workload) -> dict[str, str]:
    """Muster's view, written onto the workload for `kubectl` users."""
    return {
        "phase": w.phase.value,
        "attempt": str(w.attempt),
        "requeueCount": str(w.requeue_count),
        "reason": w.reason or "",
    }


def with_view(
    before: Workload | None, after: Workload, effects: Sequence[Effect]
) -> tuple[Effect, ...]:
    """The decision's effects, and last (after the cluster actions) its view if it changed.

    `before` is None for a workload new to the store (or a new object under its
    name). A workload deleted from the cluster has nothing left to annotate.
    """
    if before is not None and view(before) == view(after):
        return tuple(effects)
    if after.phase is Phase.FINISHED and after.reason == Reason.DELETED:
        return tuple(effects)
    if any(isinstance(e, RecordView) for e in effects):
        return tuple(effects)
    return (*effects, RecordView(after.key))
