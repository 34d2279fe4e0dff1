"""Node packing (opt-in, `nodePacking`): a gang that fits on one node goes to the fullest.

The capacity check places a gang wherever its pods fit; the Kubernetes scheduler
then binds each pod where its own scoring says, by default on the node with the
most room left (`NodeResourcesFit`, `LeastAllocated`). Small pods spread that
way, or landed on the first node with room, leave few whole nodes free, and a
gang of whole-node pods waits with GPUs to spare in the cluster (fragmentation).

With packing, a gang whose pods all fit on one node's free GPUs is admitted onto
the node with the fewest free GPUs that holds it (best fit; ties in natural name
order), and is kept there by the node selector `kubernetes.io/hostname: <node>`
its pod templates get in the patch that admits it, as a topology domain's labels
are (`kube.placement`): the control plane does not ask the scheduler to prefer
the node, it leaves it no other. A gang no single node holds is placed as the
plain check places it. Gangs that ask for a topology are placed by
`core.topology_fit`, not here.
"""

from __future__ import annotations

from muster.core.capacity import FitSkip, Fitter, fallback_reason, fit, gang_pods, pod_shape
from muster.core.model import Workload
from muster.core.topology import Pods, node_domain


def fullest_fitting(free: list[int], sizes: Pods) -> int | None:
    """The index of the node with the fewest free GPUs that holds all of `sizes`, or None.

    On one node pods of any sizes fit when their GPUs add up to its free GPUs, so
    the fit is a sum, never a search over pods.
    """
    wanted = sum(count * gpus for count, gpus in sizes)
    chosen: int | None = None
    for i, room in enumerate(free):
        if room >= wanted and (chosen is None or room < free[chosen]):
            chosen = i
            if room == wanted:
                break  # nothing fuller holds it
    return chosen


def fit_packed(
    fitter: Fitter, w: Workload, known: bool, *, dry_run: bool = False
) -> tuple[FitSkip | None, str | None, str]:
    """(why `w` does not fit, why the check fell back to quota for it, the node's domain,
    or "" when it is placed anywhere); reserves what it admits, as `capacity.fit` does."""
    shape = pod_shape(w)
    if fallback_reason(w, known) is not None or shape is None:
        skip, note = fit(fitter, w, known, dry_run=dry_run)
        return skip, note, ""
    sizes = gang_pods(w, shape)
    at = fullest_fitting(fitter.free, sizes) if sizes else None
    if at is None:
        skip, note = fit(fitter, w, known, dry_run=dry_run)
        return skip, note, ""
    fitter.free[at] -= sum(count * gpus for count, gpus in sizes)
    return None, None, node_domain(fitter.names[at])


__all__ = ["fit_packed", "fullest_fitting"]
