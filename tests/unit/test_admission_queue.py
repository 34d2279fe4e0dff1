"""The one admission planner, `AdmissionQueue`, plans by the rules.

The simulator keeps its queue in an `AdmissionQueue` and plans without looking
at what cannot fit; the Lambdas, the sweeper and `muster status` index what they
read in one (`plan_admission`) and plan explaining every workload passed over.
Both passes must admit the same workloads in the same order and report the same
`blockAdmission` holder as the rules read plainly (`by_the_rules` below: every
admissible workload in queue order, each taken if it fits), whatever the queue,
quotas, backoffs, priorities and queue access rules.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from muster.core import Kind, Phase, Pod, Settings, Usage, Workload, parse_settings, plan_admission
from muster.core.admission import AdmissionQueue, queue_order_key, quota_skip
from muster.core.copying import replace
from muster.core.decide import admissible, inadmissible

QUEUES = ["q0", "q1", "q2"]


@st.composite
def queued_workloads(draw: st.DrawFn) -> list[Workload]:
    n = draw(st.integers(0, 14))
    out = []
    for i in range(n):
        kind = draw(st.sampled_from([Kind.JOB, Kind.JOB, Kind.POD_GROUP]))
        gang = draw(st.integers(1, 3))
        live = draw(st.integers(0, gang)) if kind is Kind.POD_GROUP else 0
        pods = {f"p{j}": Pod(f"p{j}", 1, phase="Pending") for j in range(live)}
        out.append(
            Workload(
                f"ns{i % 2}/w{i:02d}",
                draw(st.sampled_from(QUEUES)),
                gang,
                gpus=draw(st.sampled_from([0, 1, 2, 4, 8, 16])),
                priority=draw(st.integers(0, 2)),
                kind=kind,
                created_at=draw(st.integers(0, 20)),
                queued_at=draw(st.integers(0, 40)),
                requeue_at=draw(st.one_of(st.none(), st.integers(0, 60))),
                phase=draw(st.sampled_from([Phase.PENDING] * 4 + [Phase.REQUEUED])),
                pods=pods,
            )
        )
    return out


@st.composite
def admission_settings(draw: st.DrawFn) -> Settings:
    doc: dict[str, object] = {"blockAdmission": draw(st.booleans())}
    if draw(st.booleans()):
        doc["gpuQuota"] = draw(st.integers(0, 40))
    if draw(st.booleans()):
        doc["requeuingStrategy"] = {"timestamp": draw(st.sampled_from(["Eviction", "Creation"]))}
    queues = {}
    for q in QUEUES:
        if draw(st.booleans()):
            queues[q] = {"gpuQuota": draw(st.integers(0, 24))}
    if queues:
        doc["queues"] = queues
    if draw(st.booleans()):
        grants = {}
        for q in QUEUES:
            if draw(st.booleans()):
                grants[q] = {
                    "namespaces": draw(st.sampled_from([["*"], ["ns0"], ["ns1"], []])),
                    "maxPriority": draw(st.integers(0, 2)),
                }
        doc["queueAccess"] = {"restrict": draw(st.booleans()), "queues": grants}
    return parse_settings(doc)


def by_the_rules(
    queued: list[Workload], settings: Settings, usage: Usage, now: float
) -> tuple[tuple[str, ...], str | None, dict[str, str]]:
    """(admitted, blockAdmission holder, why each other admissible one waits), the slow way."""
    candidates = sorted(
        (w for w in queued if admissible(w, now)), key=lambda w: queue_order_key(w, settings)
    )
    if settings.block_admission and usage.blocker is not None:
        return (), (usage.blocker if candidates else None), {}
    used, in_queue = usage.cluster, dict(usage.queues)
    chosen: list[str] = []
    waits: dict[str, str] = {}
    for w in candidates:
        if settings.block_admission and chosen:
            return tuple(chosen), chosen[0], waits
        refusal = inadmissible(w, settings)
        skip = quota_skip(w, settings, used, in_queue)
        if refusal is not None or skip is not None:
            waits[w.key] = refusal if refusal is not None else str(skip)
            continue
        chosen.append(w.key)
        used += w.gpus
        in_queue[w.queue] = in_queue.get(w.queue, 0) + w.gpus
    return tuple(chosen), None, waits


@hsettings(max_examples=250, deadline=None)
@given(
    queued=queued_workloads(),
    settings=admission_settings(),
    used=st.dictionaries(st.sampled_from(QUEUES), st.integers(0, 24)),
    blocker=st.one_of(st.none(), st.just("holder")),
    now=st.integers(0, 60),
)
def test_both_passes_plan_by_the_rules(
    queued: list[Workload],
    settings: Settings,
    used: dict[str, int],
    blocker: str | None,
    now: int,
) -> None:
    # GIVEN the same queued workloads, quotas in use and blockAdmission holder
    usage = Usage(cluster=sum(used.values()), queues=dict(used), blocker=blocker)
    index = AdmissionQueue(settings)
    for w in queued:
        index.add(w)
    # WHEN both passes plan at `now`
    explained = plan_admission(queued, (), settings, now, usage=usage)
    got = index.plan(now, usage)
    # THEN they admit what the rules admit, in the same order, blocked by the same one
    admit, blocked_by, waits = by_the_rules(queued, settings, usage, now)
    assert (got.admit, got.blocked_by) == (admit, blocked_by)
    assert (explained.admit, explained.blocked_by) == (admit, blocked_by)
    # AND the explaining pass says why each one it passed over waits
    assert explained.skipped == waits


def test_a_backoff_joins_the_queue_when_its_time_comes_and_a_change_moves_it() -> None:
    settings = parse_settings({"gpuQuota": 8})
    index = AdmissionQueue(settings)
    waiting = Workload("a", "q", 1, gpus=8, queued_at=0, requeue_at=100.0)
    index.add(waiting)
    index.add(Workload("b", "q", 1, gpus=8, queued_at=50))
    assert index.plan(99, Usage()).admit == ("b",)
    assert index.plan(100, Usage()).admit == ("a",)
    # a workload that left the queue (admitted) is gone from it, backoff or not
    index.discard("a")
    assert index.plan(200, Usage()).admit == ("b",)
    # a second change of the same workload replaces the first
    index.add(replace(waiting, requeue_at=None, priority=-1))
    assert index.plan(200, Usage()).admit == ("b",)
    assert len(index) == 2 and "a" in index


def test_new_settings_reorder_the_queue() -> None:
    index = AdmissionQueue(parse_settings({"gpuQuota": 8}))
    index.add(Workload("old", "q", 1, gpus=8, created_at=0, queued_at=50))
    index.add(Workload("new", "q", 1, gpus=8, created_at=10, queued_at=10))
    assert index.plan(60, Usage()).admit == ("new",)
    index.reorder(parse_settings({"gpuQuota": 8, "requeuingStrategy": {"timestamp": "Creation"}}))
    assert index.plan(60, Usage()).admit == ("old",)


@hsettings(max_examples=100, deadline=None)
@given(
    changes=st.fixed_dictionaries(
        {},
        optional={
            "phase": st.sampled_from(list(Phase)),
            "attempt": st.integers(0, 5),
            "requeue_at": st.one_of(st.none(), st.floats(0, 100)),
            "pods": st.just({"p": Pod("p", 3, ready=True)}),
            "reason": st.one_of(st.none(), st.text(max_size=3)),
        },
    )
)
def test_the_fast_replace_equals_dataclasses_replace(changes: dict[str, object]) -> None:
    w = Workload("a", "q", 2, gpus=4, evictions={"x": 1})
    assert replace(w, **changes) == dataclasses.replace(w, **changes)
    assert type(replace(w, **changes)) is Workload


def test_the_fast_replace_refuses_an_unknown_field_and_keeps_frozen_records_frozen() -> None:
    w = Workload("a", "q", 2)
    with pytest.raises(TypeError, match="phas"):
        replace(w, phas=Phase.RUNNING)
    with pytest.raises(dataclasses.FrozenInstanceError):
        replace(w, attempt=1).attempt = 2  # type: ignore[misc]
