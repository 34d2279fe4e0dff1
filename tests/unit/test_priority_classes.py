"""Priorities from Kubernetes PriorityClasses.

A workload whose pods have a PriorityClass is ordered by the class's value, across
queues; without one, by `muster.io/priority`, bounded per queue. `queueAccess`
refuses a class its queue does not allow, and a class that does not exist is refused
always (the API server would refuse the pods): kept Pending, never admitted, and
saying why.
"""

from __future__ import annotations

from typing import Any

from muster.core import Phase, WorkloadObserved, decide, parse_settings, plan_admission
from muster.core.admission import AdmissionQueue, Usage
from muster.core.copying import replace
from muster.core.decide import INADMISSIBLE
from muster.core.model import LogEvent, Publish, RunAdmission, Workload

ACCESS = {
    "restrict": True,
    "queues": {
        "premium": {"namespaces": ["team-a"], "maxPriority": 100, "priorityClasses": ["team-high"]},
        "default": {"namespaces": ["*"], "priorityClasses": ["batch-low", "team-high"]},
    },
}


def settings(access: dict[str, Any] | None = ACCESS, **more: Any) -> Any:
    return parse_settings(({"queueAccess": access} if access is not None else {}) | more)


def observed(
    key: str,
    queue: str,
    *,
    priority: int = 0,
    cls: str | None = None,
    value: int | None = None,
    seq: int = 1,
    gpus: int = 8,
) -> WorkloadObserved:
    return WorkloadObserved(
        key, queue, 1, gpus, priority, seq=seq, priority_class=cls, class_priority=value
    )


def submitted(event: WorkloadObserved, s: Any) -> Workload:
    w = decide(None, event, s, 0.0).workload
    assert w is not None and w.phase is Phase.PENDING
    return w


def test_a_class_value_outranks_a_lower_one_across_queues() -> None:
    # GIVEN room for one 8-GPU gang, an annotated workload at its queue's bound and a
    # workload created later whose class is worth more, on another queue
    s = settings(gpuQuota=8)
    annotated = submitted(observed("team-a/tuned", "premium", priority=100), s)
    classy = submitted(observed("team-c/urgent", "default", cls="team-high", value=1000), s)
    classy = replace(classy, created_at=5.0, queued_at=5.0)
    assert (annotated.priority, classy.priority) == (100, 1000)
    # WHEN the admission pass runs, plain and indexed
    plan = plan_admission([annotated, classy], [], s, 10.0)
    index = AdmissionQueue(s)
    index.add(annotated)
    index.add(classy)
    # THEN the class's value wins the one place, in both
    assert plan.admit == ("team-c/urgent",)
    assert index.plan(10.0, Usage()).admit == ("team-c/urgent",)


def test_a_lower_class_value_waits_behind_a_higher_annotation() -> None:
    # GIVEN a class worth less than another workload's annotation, no restriction
    s = settings(None, gpuQuota=8)
    low = submitted(observed("ml/low", "q", priority=10**6, cls="batch-low", value=-5), s)
    mid = submitted(observed("ml/mid", "q", priority=3), s)
    # THEN the class's value, not its own annotation, places it
    assert low.priority == -5
    assert plan_admission([low, mid], [], s, 0.0).admit == ("ml/mid",)


def test_an_annotation_above_the_bound_is_refused_without_a_class() -> None:
    s = settings()
    w = submitted(observed("team-a/vip", "premium", priority=101), s)
    assert (w.reason, w.message) == (
        INADMISSIBLE,
        "priority 101 is above queue premium's bound 100",
    )
    assert plan_admission([w], [], s, 0.0).admit == ()
    # with an allowed class the class's value is the priority, whatever the annotation
    ok = submitted(observed("team-a/ok", "premium", priority=101, cls="team-high", value=10**6), s)
    assert (ok.reason, ok.priority) == (None, 10**6)
    assert plan_admission([ok], [], s, 0.0).admit == ("team-a/ok",)


def test_a_class_the_queue_does_not_allow_is_refused_and_says_why() -> None:
    # GIVEN a workload that reached Muster with a class its queue does not list
    s = settings()
    decision = decide(None, observed("team-a/x", "premium", cls="batch-low", value=10), s, 0.0)
    w = decision.workload
    why = "PriorityClass batch-low is not allowed on queue premium (team-high)"
    # THEN it is kept Pending, refused, and its Submitted event says so
    assert w is not None and (w.phase, w.reason, w.message) == (Phase.PENDING, INADMISSIBLE, why)
    [event] = [e for e in decision.effects if isinstance(e, Publish)]
    assert event.event is LogEvent.SUBMITTED
    assert event.detail["priorityClass"] == "batch-low"
    assert event.detail["inadmissible"] == why
    plan = plan_admission([w], [], s, 0.0)
    assert plan.admit == () and plan.skipped == {"team-a/x": why}
    index = AdmissionQueue(s)
    index.add(w)
    assert index.plan(0.0, Usage()).admit == ()


def test_a_missing_class_is_refused_even_without_restriction() -> None:
    # GIVEN queueAccess off and a class the cluster does not have (no value)
    s = settings(None)
    w = submitted(observed("ml/typo", "q", priority=5, cls="hihg"), s)
    # THEN it is not admitted, and says which class is missing
    assert (w.reason, w.message) == (INADMISSIBLE, "PriorityClass hihg does not exist")
    assert w.priority_class_missing and w.priority == 5
    assert plan_admission([w], [], s, 0.0).skipped == {"ml/typo": w.message}


def test_a_class_created_later_clears_the_refusal() -> None:
    # GIVEN a workload refused because its class was missing
    s = settings(None)
    w = submitted(observed("ml/late", "q", cls="team-high"), s)
    assert w.reason == INADMISSIBLE
    # WHEN the agent reports the class found, at a later revision
    decision = decide(w, observed("ml/late", "q", cls="team-high", value=1000, seq=2), s, 1.0)
    w2 = decision.workload
    # THEN the refusal is gone, the priority is the class's, and a pass runs
    assert w2 is not None and (w2.reason, w2.message, w2.priority) == (None, None, 1000)
    assert not w2.priority_class_missing
    assert RunAdmission("workload changed") in decision.effects
    assert plan_admission([w2], [], s, 1.0).admit == ("ml/late",)


def test_a_changed_class_can_make_a_workload_inadmissible() -> None:
    s = settings()
    w = submitted(observed("team-c/x", "default", cls="batch-low", value=1), s)
    assert w.reason is None
    w2 = decide(w, observed("team-c/x", "default", cls="system-high", value=10**9, seq=2), s, 1.0)
    assert w2.workload is not None and w2.workload.reason == INADMISSIBLE
    assert w2.workload.message == (
        "PriorityClass system-high is not allowed on queue default (batch-low, team-high)"
    )


def test_without_a_class_nothing_changes() -> None:
    # The Submitted event and the record are those of a workload before classes existed.
    s = settings(None)
    decision = decide(None, observed("ml/a", "q", priority=7), s, 0.0)
    [event] = [e for e in decision.effects if isinstance(e, Publish)]
    assert event.detail == {"queue": "q", "gangSize": 1, "gpus": 8, "priority": 7}
    assert decision.workload is not None
    assert "priorityClass" not in decision.workload.summary()


def test_status_and_describe_show_the_class_and_why() -> None:
    from muster.admin.render import format_describe
    from muster.runtime.memory import MemoryStore
    from muster.runtime.views import describe

    store = MemoryStore()
    w = submitted(observed("team-a/x", "premium", cls="batch-low", value=10), settings())
    assert w.summary()["priorityClass"] == "batch-low"
    store.write_workload(None, w, 0, (), 0.0)
    doc = describe(store, "team-a/x")
    assert doc is not None
    assert (
        "phase      Pending (Inadmissible: PriorityClass batch-low is not allowed on queue "
        "premium (team-high))" in format_describe({**doc, "history": []})
    )


def test_the_stored_record_keeps_the_class_and_old_records_still_load() -> None:
    from muster.runtime.codec import decode_workload, encode_workload

    w = submitted(observed("ml/typo", "q", cls="hihg"), settings(None))
    doc = encode_workload(w)
    assert decode_workload(doc) == w
    old = {k: v for k, v in doc.items() if not k.startswith("priority_class")}
    assert decode_workload(old).priority_class is None
    assert not decode_workload(old).priority_class_missing
