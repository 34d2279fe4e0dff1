"""Fault injection for the control plane, two harnesses in virtual time.

The AWS functions under injected faults (`driver`): wrappers around the
runtime's ports (`ports`) and a driver that runs the functions under them and
checks invariants.

Random cluster histories, perturbed like EventBridge, SQS and agent restarts,
in four seams, each usable alone:

1. `histories`: random cluster histories (what users and the cluster do, and when;
   `generate_triggers` adds pod groups run again, pods outliving their Job, kinds
   sharing a name, settings changed mid-flight, refused releases, throttled
   entries, late node conditions, interleaved admission passes, and a tenant's
   attacks: Jobs grown, deleted with their pods orphaned, pods forged);
2. `perturb`: what the way to the control plane does to the agent's events
   (duplicates, reordering within a window, losses, agent gaps);
3. `truth`: the simulator's cluster model as the truth (`cluster_truth`, with
   `group_truth` for plain pod groups, `forged` for forged pods, which the agent's
   own mapping judges), the agent's event stream derived from it
   (over the wire with `wire`), and the real `ControlPlane` (built in one place,
   from ports passed in) acting on it;
4. `invariants`: Muster's view against the truth, and quota at every admission
   and release.

`run_history(seed)` puts them together; the tests run a few hundred seeds, and
`benchmarks/faults.py` runs ten thousand.

Both keep their time on one `clock.VirtualClock`.
"""

from muster.harness.histories import Action, History, generate
from muster.harness.injectors import (
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
from muster.harness.perturb import Perturbation, Perturber
from muster.harness.truth import Outcome, build_plane, run_history

__all__ = [
    "Action",
    "Crash",
    "FaultPlan",
    "FaultyBus",
    "FaultyCluster",
    "FaultyMessages",
    "FaultyPorts",
    "FaultyStore",
    "FaultyTimers",
    "History",
    "Outcome",
    "Perturbation",
    "Perturber",
    "Throttled",
    "build_plane",
    "generate",
    "run_history",
    "wrap_ports",
]
