"""The capacity check with topology: which domain a gang is admitted into, if any.

`core.capacity.fit` places a gang anywhere its pods fit; this places a gang that
asks for a topology (`core.topology`) inside one domain, on the same free GPUs and
reservations, and falls back to `fit` for everyone else.
"""

from __future__ import annotations

from muster.core.capacity import FitSkip, Fitter, fallback_reason, fit, gang_pods, pod_shape
from muster.core.model import Workload
from muster.core.settings import QueueSettings
from muster.core.topology import (
    TopologySkip,
    best_domain,
    indexed,
    request_of,
    reserve_in,
    search_levels,
)


def fit_in_domain(
    fitter: Fitter, w: Workload, known: bool, qs: QueueSettings
) -> tuple[FitSkip | TopologySkip | None, str | None, str]:
    """(why `w` does not fit, why the check fell back to quota for it, the domain chosen).

    Reserves what it admits, inside the domain. A `required` gang the check cannot
    judge (no node reported capacity, pod sizes unknown, placement rules of its own)
    waits: admitting it anywhere could put it across domains. In a `dryRun` queue
    nothing is held back, and the note says what the check would have done.
    """
    request = request_of(w.topology)
    if request is None or request.level not in qs.topology_levels:
        skip, note = fit(fitter, w, known, dry_run=qs.dry_run)
        return skip, note, ""
    why = fallback_reason(w, known)
    if why is not None:
        if request.required and not qs.dry_run:
            return TopologySkip(w.key, request.level, (), 0, 0, why), None, ""
        skip, note = fit(fitter, w, known, dry_run=qs.dry_run)
        return skip, note, ""
    shape = pod_shape(w)
    assert shape is not None
    sizes = gang_pods(w, shape)
    first: TopologySkip | None = None
    for level in search_levels(request, qs.topology_levels):
        known_none = fitter.no_domain.get((level, sizes))
        if known_none is None:
            found = indexed(fitter.domains, fitter.topology, level)
            domain, best, count = best_domain(fitter.free, found, sizes)
            if domain is not None:
                reserve_in(fitter.free, found, domain, sizes)
                return None, None, domain
            fitter.no_domain[(level, sizes)] = (best, count)
        else:
            best, count = known_none
        if first is None:
            first = TopologySkip(w.key, level, sizes, best, count)
    assert first is not None
    if not request.required:
        skip, note = fit(fitter, w, known, dry_run=qs.dry_run)  # anywhere
        return skip, note, ""
    if qs.dry_run:
        fitter.reserve(sizes)
        return None, f"dry run: the capacity check would hold it back ({first})", ""
    return first, None, ""


__all__ = ["fit_in_domain"]
