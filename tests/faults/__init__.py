"""Fault injection: random cluster histories, perturbed like EventBridge, SQS and agent restarts.

Four seams, each usable alone:

1. `history`: random cluster histories (what users and the cluster do, and when);
2. `perturb`: what the way to the control plane does to the agent's events
   (duplicates, reordering within a window, losses, agent gaps);
3. `driver`: the simulator's cluster model as the truth, the agent's event stream
   derived from it, and the real `ControlPlane` (built in one place, from ports
   passed in) acting on it;
4. `invariants`: Muster's view against the truth.

`run_history(seed)` puts them together; the tests run a few hundred seeds, and
`benchmarks/faults.py` runs ten thousand.
"""

from tests.faults.driver import Outcome, build_plane, run_history
from tests.faults.history import Action, History, generate
from tests.faults.perturb import Perturbation, Perturber

__all__ = [
    "Action",
    "History",
    "Outcome",
    "Perturbation",
    "Perturber",
    "build_plane",
    "generate",
    "run_history",
]
