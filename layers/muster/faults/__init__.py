"""Fault injection for the control plane: wrappers around the runtime's ports, and a
driver that runs the functions under them in virtual time and checks invariants."""

from muster.faults.ports import (
    Crash,
    FaultPlan,
    FaultyBus,
    FaultyCluster,
    FaultyMessages,
    FaultyPorts,
    FaultyStore,
    FaultyTimers,
    Throttled,
    wrap_ports,
)

__all__ = [
    "Crash",
    "FaultPlan",
    "FaultyBus",
    "FaultyCluster",
    "FaultyMessages",
    "FaultyPorts",
    "FaultyStore",
    "FaultyTimers",
    "Throttled",
    "wrap_ports",
]
