"""The capacity fit works on (count, GPUs) groups: a gang of two billion pods costs
what a gang of two does, and one candidate the planner cannot judge stops no one else."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from muster.core import Phase, plan_admission
from muster.core import admission as core_admission
from muster.core.capacity import Fitter, NodeCapacity, gang_pods
from muster.core.model import Workload

from tests.unit.conftest import settings

FIT = settings(capacityCheck=True)
ABSURD = 2_147_483_647  # parallelism's largest value


def cap(name: str, gpus: int = 8, foreign: int = 0) -> NodeCapacity:
    return NodeCapacity(name, 1, gpus, True, None, foreign)


def gang(key: str, shape: tuple[tuple[int, int], ...], created: float = 0.0) -> Workload:
    pods = sum(n for n, _ in shape)
    gpus = sum(n * g for n, g in shape)
    return Workload(key, "q", pods, gpus=gpus, shape=shape, created_at=created, queued_at=created)


def test_an_absurd_job_without_gpus_is_planned_without_listing_its_pods() -> None:
    # GIVEN a suspended Job of 2,147,483,647 pods without GPUs, and a real gang behind it
    absurd = gang("t/absurd", ((ABSURD, 0),), created=1)
    real = gang("t/real", ((2, 8),), created=2)
    # WHEN a pass with the capacity check plans them
    plan = plan_admission([absurd, real], [], FIT, 10, nodes=[cap("n0"), cap("n1")])
    # THEN both are judged (it needs no room) and the real gang takes its two nodes
    assert plan.admit == ("t/absurd", "t/real")
    assert gang_pods(absurd, absurd.shape) == ()


def test_an_absurd_gang_with_gpus_is_told_it_does_not_fit() -> None:
    absurd = gang("t/absurd", ((ABSURD, 1),), created=1)
    real = gang("t/real", ((1, 8),), created=2)
    plan = plan_admission([absurd, real], [], FIT, 10, nodes=[cap("n0"), cap("n1")])
    assert plan.admit == ("t/real",)
    assert plan.skipped["t/absurd"] == (
        f"needs {ABSURD} \u00d7 1 GPUs on one node each; free blocks hold 16 of them (largest 8)"
    )


def test_an_admitted_absurd_gang_reserves_what_fits_and_the_next_pass_goes_on() -> None:
    # GIVEN an absurd gang admitted earlier (on quota alone) whose pods are not placed
    held = replace(gang("t/absurd", ((ABSURD, 1),)), phase=Phase.ADMITTED, admitted_at=1)
    # WHEN a pass plans the next gang with the check on
    plan = plan_admission([gang("t/next", ((1, 1),))], [held], FIT, 10, nodes=[cap("n0")])
    # THEN the admitted gang's reservation takes the node, and the next one is told why
    assert plan.admit == ()
    assert plan.skipped["t/next"].startswith("needs 1 \u00d7 1 GPUs")
    fitter = Fitter.of([cap("n0"), cap("n1")], [held])
    assert fitter.free == [0, 0]


def test_a_gang_smaller_than_its_pods_asks_for_its_largest_ones() -> None:
    w = replace(gang("t/a", ((3, 2), (ABSURD, 0), (2, 4))), gang_size=4)
    assert gang_pods(w, w.shape) == ((2, 4), (2, 2))


def _per_pod_first_fit(free: list[int], sizes: list[int]) -> int | None:
    """The fit as it was, one list entry per pod: the reference for small gangs."""
    start, last = 0, -1
    for k, gpus in enumerate(sizes):
        if gpus != last:
            start, last = 0, gpus
        for i in range(start, len(free)):
            if free[i] >= gpus:
                free[i] -= gpus
                start = i
                break
        else:
            return k
    return None


shapes = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8)), min_size=1, max_size=4)


@hsettings(max_examples=300, deadline=None)
@given(
    free=st.lists(st.integers(0, 12), min_size=0, max_size=6),
    shape=shapes,
    gang_size=st.integers(1, 20),
)
def test_grouped_first_fit_places_exactly_what_per_pod_first_fit_does(
    free: list[int], shape: list[tuple[int, int]], gang_size: int
) -> None:
    w = replace(gang("t/a", tuple(shape)), gang_size=gang_size)
    groups = gang_pods(w, w.shape)
    sizes = sorted((g for n, g in shape for _ in range(n)), reverse=True)[:gang_size]
    sizes = [g for g in sizes if g > 0]
    assert [g for n, g in groups for _ in range(n)] == sizes
    expected = list(free)
    failed = _per_pod_first_fit(expected, sizes)
    fitter = Fitter([f"n{i}" for i in range(len(free))], list(free))
    skip = fitter.place(groups)
    if failed is None:
        assert skip is None and fitter.free == expected
    else:
        assert skip is not None and fitter.free == free  # nothing taken
        assert (skip.gpus, skip.pods) == (sizes[failed], sizes.count(sizes[failed]))
        assert skip.fitting == sizes[:failed].count(sizes[failed])
    reserving = list(free)
    partial = Fitter([], reserving)
    partial.reserve(groups)
    reference = list(free)
    for g in sizes:  # what fits, pod by pod, first fit
        for i, room in enumerate(reference):
            if room >= g:
                reference[i] -= g
                break
    assert partial.free == reference


def test_a_candidate_the_planner_cannot_judge_stops_no_one_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the fit fails for one queued workload (say its data breaks the planner)
    real_fit = core_admission.fit

    def breaks_on_bad(fitter, w, known, **kw):  # type: ignore[no-untyped-def]
        if w.key == "t/bad":
            raise MemoryError("no room for this one's pods")
        return real_fit(fitter, w, known, **kw)

    monkeypatch.setattr(core_admission, "fit", breaks_on_bad)
    bad = gang("t/bad", ((1, 8),), created=1)
    same_shape = gang("t/same", ((1, 8),), created=2)
    other = gang("t/other", ((1, 4),), created=3)
    # WHEN a pass plans them
    plan = plan_admission([bad, same_shape, other], [], FIT, 10, nodes=[cap("n0"), cap("n1")])
    # THEN the others are admitted, even the one of its own size, and it is named with the error
    assert plan.admit == ("t/same", "t/other")
    assert plan.failed == (("t/bad", "MemoryError: no room for this one's pods"),)
    assert plan.skipped["t/bad"] == "could not be planned: MemoryError: no room for this one's pods"
