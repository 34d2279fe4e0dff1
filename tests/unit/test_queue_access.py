"""Queues and priorities under the administrator's control (`queueAccess`, named queues).

Off by default; when on, a workload on a queue not open to its namespace, or above
the queue's priority bound (its PriorityClass's value included), is kept but never
admitted, and says why. Once the settings name any queue, a queue they do not name
is refused the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from muster.core import Phase, WorkloadObserved, decide, parse_settings, plan_admission
from muster.core.copying import replace
from muster.core.decide import INADMISSIBLE
from muster.core.model import LogEvent, Publish, Workload
from muster.core.settings import QueueAccess, SettingsError

ACCESS = {
    "restrict": True,
    "queues": {
        "premium": {"namespaces": ["team-a"], "maxPriority": 100},
        "default": {"namespaces": ["*"], "priorityClasses": ["batch-low"]},
    },
}


def settings(access: dict[str, Any] | None = ACCESS) -> Any:
    return parse_settings({"queueAccess": access} if access is not None else {})


def pending(key: str, queue: str, priority: int = 0) -> Workload:
    return Workload(key, queue, 1, priority=priority, phase=Phase.PENDING)


def test_off_by_default_and_absent_from_the_document() -> None:
    assert parse_settings({}).access == QueueAccess()
    assert "queueAccess" not in parse_settings({}).to_dict()


def test_the_block_round_trips_through_the_document() -> None:
    s = settings()
    assert parse_settings(s.to_dict()) == s


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"restrict": "yes"}, "queueAccess.restrict"),
        ({"queues": {"premium": {"namespace": ["a"]}}}, "queueAccess.queues.premium.namespace"),
        (
            {"queues": {"premium": {"namespaces": "team-a"}}},
            "queueAccess.queues.premium.namespaces",
        ),
        (
            {"queues": {"premium": {"maxPriority": "high"}}},
            "queueAccess.queues.premium.maxPriority",
        ),
        ({"queues": {"Premium!": {}}}, "queueAccess.queues"),
        ({"queues": {"p": {"priorityClasses": ["*"]}}}, "queueAccess.queues.p.priorityClasses"),
    ],
)
def test_bad_access_settings_name_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SettingsError, match=field.replace(".", r"\.")):
        parse_settings({"queueAccess": doc})


def test_the_admission_pass_refuses_and_says_why() -> None:
    queued = [
        pending("team-b/steal", "premium"),
        pending("team-a/vip", "premium", priority=101),
        pending("team-a/ok", "premium", priority=100),
        pending("team-c/any", "default"),
        pending("team-c/unknown", "nope"),
    ]
    plan = plan_admission(queued, [], settings(), 0.0)
    assert set(plan.admit) == {"team-a/ok", "team-c/any"}
    assert plan.skipped == {
        "team-b/steal": "queue premium is not open to namespace team-b",
        "team-a/vip": "priority 101 is above queue premium's bound 100",
        "team-c/unknown": "queue nope is not configured (the settings name default, premium)",
    }


def test_without_restriction_the_plan_is_unchanged() -> None:
    queued = [pending("team-b/steal", "premium", priority=10**6)]
    assert plan_admission(queued, [], settings(None), 0.0).admit == ("team-b/steal",)
    assert plan_admission(queued, [], settings({"restrict": False}), 0.0).admit == ("team-b/steal",)


def test_a_refused_workload_is_listed_with_its_reason_and_history() -> None:
    event = WorkloadObserved("team-b/steal", "premium", 2, seq=1)
    decision = decide(None, event, settings(), 0.0)
    w = decision.workload
    assert w is not None and w.phase is Phase.PENDING
    assert (w.reason, w.message) == (INADMISSIBLE, "queue premium is not open to namespace team-b")
    [submitted] = [e for e in decision.effects if isinstance(e, Publish)]
    assert submitted.event is LogEvent.SUBMITTED
    assert submitted.detail["inadmissible"] == "queue premium is not open to namespace team-b"


def test_an_allowed_workload_says_nothing_more() -> None:
    decision = decide(None, WorkloadObserved("team-a/x", "premium", 2, seq=1), settings(), 0.0)
    assert decision.workload is not None and decision.workload.reason is None


def test_describe_says_why_a_workload_is_not_admitted() -> None:
    from muster.admin.render import format_describe
    from muster.runtime.memory import MemoryStore
    from muster.runtime.views import describe

    store = MemoryStore()
    decision = decide(None, WorkloadObserved("team-b/steal", "premium", 2, seq=1), settings(), 0.0)
    assert decision.workload is not None
    store.write_workload(None, decision.workload, 0, (), 0.0)
    doc = describe(store, "team-b/steal")
    assert doc is not None
    assert (
        "phase      Pending (Inadmissible: queue premium is not open to namespace team-b)"
        in format_describe({**doc, "history": []})
    )


# --------------------------------------------------------------------------- named queues


def test_a_queue_no_setting_names_is_refused_once_the_settings_name_queues() -> None:
    # GIVEN settings that give queue research a quota of 8 GPUs
    s = parse_settings({"queues": {"research": {"gpuQuota": 8}}})
    queued = [
        replace(pending("ml/a", "research"), gpus=8),
        replace(pending("ml/b", "made-up"), gpus=8),
        replace(pending("ml/c", "Default"), gpus=8),
        replace(pending("ml/d", "default"), gpus=8),
    ]
    # WHEN the admission pass runs
    plan = plan_admission(queued, [], s, 0.0)
    # THEN only the named queues (and default, always known) admit; a made-up name
    # no longer escapes research's quota
    assert set(plan.admit) == {"ml/a", "ml/d"}
    assert plan.skipped == {
        "ml/b": "queue made-up is not configured (the settings name default, research)",
        "ml/c": "queue Default is not configured (the settings name default, research)",
    }


def test_settings_that_name_no_queue_take_every_queue() -> None:
    # one pool for the cluster (the shipped settings, the simulator's scenarios)
    queued = [pending("ml/a", "research"), pending("ml/b", "team-a")]
    assert set(plan_admission(queued, [], parse_settings({"gpuQuota": 64}), 0.0).admit) == {
        "ml/a",
        "ml/b",
    }
    assert parse_settings({}).named_queues == frozenset()


def test_queue_access_names_queues_too_and_the_refusal_is_recorded() -> None:
    s = parse_settings({"queueAccess": {"queues": {"premium": {"namespaces": ["*"]}}}})
    assert s.named_queues == {"default", "premium"}
    decision = decide(None, WorkloadObserved("ml/x", "nope", 2, seq=1), s, 0.0)
    w = decision.workload
    assert w is not None and (w.reason, w.phase) == (INADMISSIBLE, Phase.PENDING)
    [submitted] = [e for e in decision.effects if isinstance(e, Publish)]
    assert submitted.detail["inadmissible"] == (
        "queue nope is not configured (the settings name default, premium)"
    )
    many = parse_settings({"queues": {f"q{i:02}": {} for i in range(12)}})
    assert many.refusal("x", "ml/x", 0) == (
        "queue x is not configured (the settings name default, q00, q01, q02, q03, q04, q05, "
        "q06, q07, q08 and 3 more)"
    )


def test_a_priority_class_is_bounded_by_the_queues_max_priority() -> None:
    # GIVEN a restricted queue with maxPriority 0 and no list of classes
    s = parse_settings(
        {"queueAccess": {"restrict": True, "queues": {"default": {"namespaces": ["*"]}}}}
    )
    critical = Workload(
        "ml/x",
        "default",
        1,
        priority=2000001000,
        priority_class="system-node-critical",
        phase=Phase.PENDING,
    )
    low = replace(critical, key="ml/y", priority=0, priority_class="batch-low")
    # THEN naming system-node-critical buys no priority: the workload is refused
    plan = plan_admission([critical, low], [], s, 0.0)
    assert plan.admit == ("ml/y",)
    assert plan.skipped == {
        "ml/x": "priority 2000001000 (PriorityClass system-node-critical) is above queue "
        "default's bound 0"
    }
    # AND a queue that lists a class allows it at its value
    listed = parse_settings(
        {
            "queueAccess": {
                "restrict": True,
                "queues": {
                    "default": {"namespaces": ["*"], "priorityClasses": ["system-node-critical"]}
                },
            }
        }
    )
    assert plan_admission([critical], [], listed, 0.0).admit == ("ml/x",)
