"""The parts of a scenario: its workloads, node faults and trace, its error and its seeded streams.

Both the scenario parser (`muster.sim.scenario`) and the trace expander
(`muster.sim.traces`) build these, so they live apart from either.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muster.core.fields import FieldErrors
from muster.sim.kube import JobSpec

# How a never-ready workload fails, as the kubelet shows it. `NotReady` is a pod that
# runs and never turns Ready with no reason given (a hang); it is the default and
# what a plain `neverReady` workload does.
FAILURES = ("CrashLoopBackOff", "ImagePullBackOff", "NotReady")
NOT_READY = "NotReady"
# The mix a trace's broken jobs draw from with `brokenModes: default`; where the
# shares come from is in docs/simulator.md ("Failure modes").
DEFAULT_BROKEN_MODES: Mapping[str, float] = {
    "CrashLoopBackOff": 0.55,
    "ImagePullBackOff": 0.25,
    "NotReady": 0.20,
}


class ScenarioError(FieldErrors):
    """A scenario that cannot be run; each of its `errors` names the field."""

    default = "invalid scenario"


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    name: str
    queue: str
    submit_at: float
    pods: int
    gpus_per_pod: int
    startup_seconds: float
    run_seconds: float
    priority: int = 0
    never_ready: bool = False
    failure: str | None = None  # how a never-ready workload fails (FAILURES); None: NotReady
    topology: str = ""  # its `muster.io/topology`, canonical ("required=<level>"; "" for none)

    def job(self) -> JobSpec:
        """What it asks the cluster for, in the simulator and the local mode alike."""
        return JobSpec(
            self.name,
            self.pods,
            self.gpus_per_pod,
            self.startup_seconds,
            self.run_seconds,
            self.never_ready,
            self.failure,
        )

    @property
    def failure_mode(self) -> str | None:
        """How it fails (`NotReady` for a plain never-ready one), None when healthy."""
        if not self.never_ready:
            return None
        return self.failure or NOT_READY

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True, slots=True)
class NodeFaultSpec:
    """A node that fails at `at` and is repaired `repair_after` later (a scenario's `faults`)."""

    at: float
    node: str
    repair_after: float


@dataclass(frozen=True, slots=True)
class TraceSpec:
    path: Path | None = None
    synthetic: Mapping[str, Any] | None = None
    mapping: str = "pods-of-8"
    broken_fraction: float = 0.0
    node_mtbf_hours: float | None = None
    repair_after: float = 3600.0
    limit: int | None = None  # only the first N jobs
    broken_modes: Mapping[str, float] | None = None  # None: every broken job is NotReady
    topology: str = ""  # the request of its multi-node gangs, canonical ("" for none)


def seeded(seed: int, purpose: str) -> random.Random:
    """An independent random stream per purpose, so one draw never shifts another."""
    return random.Random(f"{seed}:{purpose}")
