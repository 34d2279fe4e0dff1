"""What the runtime reports: its counters, and why it could not finish something
(each exception tells its caller what to do next)."""

from __future__ import annotations

from dataclasses import dataclass, field


class WorkloadNotYetKnown(Exception):
    """A pod event arrived before its workload's: worth a retry once the workload is known."""


class TooManyConflicts(Exception):
    """The workload kept changing under us; the message is retried later."""


class EffectFailed(Exception):
    """An effect of a committed decision failed; its outbox is tried again later."""

    def __init__(self, workload: str, error: str) -> None:
        super().__init__(f"{workload}: {error}")
        self.workload = workload
        self.error = error


class AdmissionWithdrawn(EffectFailed):
    """The cluster refused to release the workload for good; its attempt was withdrawn
    (`AdmissionRefused`): it holds nothing now, and has its own backoff."""


class Quarantined(Exception):
    """The workload is quarantined: nothing is done for it until an administrator releases it."""

    def __init__(self, workload: str, error: str) -> None:
        super().__init__(f"{workload} is quarantined: {error}")
        self.workload = workload
        self.error = error


@dataclass(slots=True)
class Stats:
    """Counters of one control plane (for logs and the benchmark)."""

    events: int = 0
    conflicts: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    admitted: list[str] = field(default_factory=list)
