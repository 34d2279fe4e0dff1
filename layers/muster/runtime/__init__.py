"""The control plane's service layer: state, the core, effects, through small ports."""

from muster.runtime.ports import Conflict, Ledger, PodWrite, Stored
from muster.runtime.results import Stats, TooManyConflicts, WorkloadNotYetKnown
from muster.runtime.service import ControlPlane
from muster.runtime.views import describe, status

__all__ = [
    "Conflict",
    "ControlPlane",
    "Ledger",
    "PodWrite",
    "Stats",
    "Stored",
    "TooManyConflicts",
    "WorkloadNotYetKnown",
    "describe",
    "status",
]
