"""An admission the cluster refused for good: the attempt withdrawn, not quarantined.

A quarantined workload is left as it is until an administrator releases it; one
quarantined while Admitted would hold its quota (and the `blockAdmission` lock)
for a Job that was never released. So when the release itself is refused (a 403
or 422 the adapter raises as `Refused`) as often as a workload's effects may
fail, the core is told (`AdmissionRefused`) and withdraws the attempt: back to the
queue with a backoff, counted towards the requeuing limits. Every other lasting
failure is still quarantined.
"""

from __future__ import annotations

import logging
from typing import Protocol

from muster.core import AdmissionRefused, Admit, Outcome
from muster.runtime.ports import Conflict, WorkloadStore

log = logging.getLogger("muster.runtime")


class Withdrawer(Protocol):
    @property
    def store(self) -> WorkloadStore: ...

    def handle(self, event: AdmissionRefused) -> list[Outcome]: ...


def withdraw_refused(plane: Withdrawer, key: str, version: int, admit: Admit, error: str) -> bool:
    """Withdraw the attempt whose release `admit` the cluster refused; False when a later
    decision was committed meanwhile (its writer carries on).

    The refused outbox goes first (on its version), so the withdrawal is decided
    on a settled workload. Should this stop between the two, the gang is Admitted
    without a timer: the deadline it is owed (`muster.runtime.deadlines`) evicts it.
    """
    try:
        plane.store.clear_outbox(key, version)
    except Conflict:
        return False
    log.error(
        "the cluster refused to release the workload; its attempt is withdrawn",
        extra={"workload": key, "attempt": admit.attempt, "error": error},
    )
    plane.handle(AdmissionRefused(key, admit.attempt, error))
    return True
