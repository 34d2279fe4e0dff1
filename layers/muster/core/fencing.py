"""Which admit or evict is still current: the control plane's own record decides.

Effects are carried out at least once and may arrive late (a retried message, an
outbox repaired by a later event, two Lambdas racing). Before acting on the
cluster, the shell reads the workload's record (the state the core last
committed) and asks this rule whether the effect still stands. Annotations on the
workload object are only a view for `kubectl` users: its owner can edit them, so
they never decide.
"""

from __future__ import annotations

from muster.core.model import ACTIVE_PHASES, Admit, Evict, Workload


def still_current(effect: Admit | Evict, record: Workload | None) -> bool:
    """True when carrying out `effect` agrees with the committed record.

    An admit stands only while the record holds that very attempt admitted: a
    newer eviction (or the workload's end) makes it stale. An eviction stands
    unless a newer attempt has been admitted since; without a record (the
    workload was forgotten) withdrawing is the safe side.
    """
    if effect.uid and record is not None and record.uid and record.uid != effect.uid:
        return False  # meant for an earlier object under this name
    if isinstance(effect, Admit):
        return (
            record is not None
            and record.attempt == effect.attempt
            and record.phase in ACTIVE_PHASES
        )
    return record is None or record.attempt <= effect.attempt
