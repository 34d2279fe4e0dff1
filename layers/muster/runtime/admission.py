"""The admission pass that follows a batch of the requeue queue, and what a failed one asks for.

The admission function applies the batch's requeues first (each may end a
backoff), then runs at most one pass for the whole batch: when a message asked
for one, or when applying the batch made someone admissible. A workload whose
effects fail is set aside by the pass, which goes on with the others. Should the
pass fail, or set a workload aside, another pass is queued with a backoff (5 s,
doubling, up to 15 minutes; `muster.runtime.messages.retry_delay`), never at
once: the requeues already applied are not left waiting for an unrelated
trigger, and a lasting failure does not turn into a hot loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from muster.runtime.messages import AdmissionRequest
from muster.runtime.service import ControlPlane

log = logging.getLogger("muster.runtime")


@dataclass
class AdmissionRequests:
    """What the admission requests of one batch asked for, together."""

    requested: bool = False
    hints: set[str] = field(default_factory=set)  # workloads that may have become admissible
    retry: int = 0  # the most passes that failed before any of these was sent

    def add(self, request: AdmissionRequest) -> None:
        self.requested = True
        self.retry = max(self.retry, request.retry)
        if request.workload:
            self.hints.add(request.workload)


def admit_after_batch(plane: ControlPlane, requests: AdmissionRequests) -> None:
    """One admission pass if the batch or its effects asked for one; a backoff retry if it fails."""
    wanted, named = plane.take_admission_request()
    if not (requests.requested or wanted):
        return
    retry = requests.retry + 1
    try:
        admitted = plane.admission_pass(requests.hints | named)
    except Exception:
        log.exception("admission pass failed; asking for another after a backoff")
        plane.messages.request_admission("retry after a failed pass", None, retry=retry)
    else:
        log.info("admission pass done", extra={"admitted": admitted})
        if plane.failed:
            log.warning(
                "admission pass set workloads aside; asking for another after a backoff",
                extra={"failed": plane.failed, "retry": retry},
            )
            plane.messages.request_admission("retry workloads set aside", None, retry=retry)
    plane.take_admission_request()  # the pass itself ran until nothing more fitted
