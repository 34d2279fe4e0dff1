"""Every transition of `decide`, one workload at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest
from muster.core import (
    AdmissionGranted,
    DeadlineReached,
    Evict,
    Kind,
    NodeObserved,
    Outcome,
    Phase,
    PodObserved,
    Reactivate,
    Reason,
    Requeue,
    RequeueDue,
    StartTimer,
    StopTimer,
    TimerKind,
    Workload,
    WorkloadFinished,
    backoff_delay,
    decide,
)

from tests.unit.conftest import kinds, published, ready, settings, submit

KEY = "team/a"
DEFAULT = settings()


def admitted(s=DEFAULT, pods: int = 2, now: float = 0.0, **kw: object) -> Workload:
    w = decide(None, submit(KEY, pods=pods, **kw), s, now).workload
    assert w is not None
    d = decide(w, AdmissionGranted(KEY, w.attempt + 1), s, now)
    assert d.workload is not None
    return d.workload


def running(s=DEFAULT, pods: int = 2, now: float = 0.0) -> Workload:
    w = admitted(s, pods, now)
    for i in range(pods):
        w = decide(w, ready(KEY, f"p{i}"), s, now + 1).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING
    return w


def timeout(w: Workload, s=DEFAULT, now: float | None = None, draw: float = 0.0):
    assert w.timer is not None
    event = DeadlineReached(KEY, w.timer.attempt, w.timer.kind, w.timer.episode)
    return decide(w, event, s, w.timer.deadline if now is None else now, draw=draw)


def requeue_and_admit(w: Workload, s=DEFAULT) -> Workload:
    assert w.requeue_at is not None
    w = decide(w, RequeueDue(KEY, w.requeue_count), s, w.requeue_at).workload  # type: ignore[assignment]
    assert w.phase is Phase.PENDING
    return decide(w, AdmissionGranted(KEY, w.attempt + 1), s, w.queued_at + 1).workload  # type: ignore[return-value]


# --------------------------------------------------------------------------- submission


def test_a_new_workload_is_pending_and_asks_for_an_admission_pass() -> None:
    d = decide(None, submit(KEY, pods=4, gpus=32), DEFAULT, 10.0)
    assert d.workload is not None and d.workload.phase is Phase.PENDING
    assert (d.workload.gang_size, d.workload.gpus, d.workload.attempt) == (4, 32, 0)
    assert kinds(d.effects) == ["Publish:Submitted", "RunAdmission"]


def test_duplicate_and_stale_workload_observations_change_nothing() -> None:
    w = decide(None, submit(KEY, seq=5), DEFAULT, 0).workload
    assert decide(w, submit(KEY, seq=5, priority=9), DEFAULT, 1).outcome is Outcome.DUPLICATE
    assert decide(w, submit(KEY, seq=4, priority=9), DEFAULT, 1).outcome is Outcome.STALE
    d = decide(w, submit(KEY, seq=6, priority=9), DEFAULT, 1)
    assert d.workload is not None and d.workload.priority == 9
    assert kinds(d.effects) == ["RunAdmission"]


def test_what_an_admitted_workload_asks_for_does_not_change_under_it() -> None:
    w = admitted()
    d = decide(w, submit(KEY, seq=2, pods=1, gpus=4, queue="other"), DEFAULT, 1)
    assert d.workload is not None and (d.workload.gang_size, d.workload.gpus) == (2, 8)
    assert d.workload.queue == "q" and d.workload.phase is w.phase
    assert d.workload.next_spec is not None and d.workload.next_spec["gangSize"] == 1


def test_events_for_unknown_workloads_are_reported_not_raised() -> None:
    d = decide(None, ready(KEY, "p0"), DEFAULT, 0)
    assert d.outcome is Outcome.UNKNOWN_WORKLOAD and d.workload is None and d.effects == ()
    assert (
        decide(None, DeadlineReached(KEY, 1, TimerKind.STARTUP), DEFAULT, 0).outcome
        is Outcome.UNKNOWN_WORKLOAD
    )


def test_an_event_of_another_gang_is_ignored() -> None:
    w = admitted()
    d = decide(w, ready("team/other", "p0"), DEFAULT, 1)
    assert d.outcome is Outcome.IGNORED and d.workload == w


# --------------------------------------------------------------------------- admission and readiness


def test_admission_starts_attempt_one_and_its_startup_deadline() -> None:
    w = decide(None, submit(KEY), DEFAULT, 0).workload
    d = decide(w, AdmissionGranted(KEY, 1), DEFAULT, 100.0)
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED and d.workload.attempt == 1
    assert kinds(d.effects) == ["Admit", "StartTimer", "Publish:Admitted"]
    start = d.effects[1]
    assert isinstance(start, StartTimer)
    assert (start.timer.kind, start.timer.attempt, start.timer.deadline) == (
        TimerKind.STARTUP,
        1,
        400.0,
    )
    assert decide(d.workload, AdmissionGranted(KEY, 1), DEFAULT, 101).outcome is Outcome.DUPLICATE
    assert decide(w, AdmissionGranted(KEY, 3), DEFAULT, 101).outcome is Outcome.STALE


def test_all_pods_ready_makes_the_gang_pods_ready_and_stops_the_timer() -> None:
    w = admitted(pods=3)
    for i in range(2):
        d = decide(w, ready(KEY, f"p{i}"), DEFAULT, 5)
        w = d.workload  # type: ignore[assignment]
        assert w.phase is Phase.ADMITTED and kinds(d.effects) == []
    d = decide(w, ready(KEY, "p2"), DEFAULT, 42)
    assert d.workload is not None and d.workload.phase is Phase.RUNNING
    assert kinds(d.effects) == ["StopTimer", "Publish:PodsReady", "RunAdmission"]
    event = published(d.effects, "PodsReady")[0]
    assert event.detail["reason"] == "Started" and event.detail["secondsSinceAdmission"] == 42


def test_a_succeeded_pod_counts_as_ready() -> None:
    w = admitted(pods=2)
    w = decide(w, ready(KEY, "p0"), DEFAULT, 1).workload  # type: ignore[assignment]
    d = decide(w, PodObserved(KEY, "p1", 1, uid="u", phase="Succeeded", ready=False), DEFAULT, 2)
    assert d.workload is not None and d.workload.phase is Phase.RUNNING


def test_duplicate_and_reordered_pod_events_are_dropped() -> None:
    w = admitted(pods=2)
    w = decide(w, ready(KEY, "p0", seq=3), DEFAULT, 1).workload  # type: ignore[assignment]
    assert decide(w, ready(KEY, "p0", seq=3), DEFAULT, 2).outcome is Outcome.DUPLICATE
    older = PodObserved(KEY, "p0", 2, uid="p0-uid", phase="Pending", ready=False)
    d = decide(w, older, DEFAULT, 2)
    assert d.outcome is Outcome.STALE and d.workload is not None and d.workload.pods["p0"].ready


def test_a_deleted_pod_no_longer_counts() -> None:
    w = admitted(pods=2)
    w = decide(w, ready(KEY, "p0"), DEFAULT, 1).workload  # type: ignore[assignment]
    gone = PodObserved(KEY, "p0", 2, uid="p0-uid", deleted=True)
    w = decide(w, gone, DEFAULT, 2).workload  # type: ignore[assignment]
    assert w.pods["p0"].deleted and w.ready_pods == 0 and w.live_pods == 0  # a tombstone


# --------------------------------------------------------------------------- startup timeout, requeue, backoff


def test_startup_deadline_evicts_with_pods_ready_timeout_and_requeues_after_base() -> None:
    w = admitted(pods=2)
    w = decide(
        w,
        PodObserved(KEY, "p0", 1, uid="u0", phase="Pending", reason="Unschedulable", node=None),
        DEFAULT,
        3,
    ).workload  # type: ignore[assignment]
    d = timeout(w)
    assert d.workload is not None and d.workload.phase is Phase.REQUEUED
    assert kinds(d.effects) == [
        "Evict",
        "Publish:Evicted",
        "Requeue",
        "Publish:Requeued",
        "RunAdmission",
    ]
    evict = d.effects[0]
    assert isinstance(evict, Evict)
    assert (evict.reason, evict.cause) == (Reason.PODS_READY_TIMEOUT, Reason.WAIT_FOR_START)
    assert [p.name for p in evict.not_ready] == ["p0"] and evict.not_ready[
        0
    ].reason == "Unschedulable"
    requeue = d.effects[2]
    assert isinstance(requeue, Requeue) and (requeue.count, requeue.delay, requeue.requeue_at) == (
        1,
        60,
        360,
    )
    assert d.workload.requeue_count == 1 and d.workload.requeue_at == 360
    assert d.workload.evictions == {"PodsReadyTimeout/WaitForStart": 1}
    assert published(d.effects, "Evicted")[0].detail["notReady"][0]["reason"] == "Unschedulable"


def test_backoff_doubles_from_base_and_is_capped() -> None:
    q = DEFAULT.defaults
    assert [backoff_delay(n, q) for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    jittery = settings(requeuingStrategy={"backoffJitter": 0.5}).defaults
    assert backoff_delay(1, jittery, 0.0) == 60 and backoff_delay(
        1, jittery, 0.999
    ) == pytest.approx(89.97)
    assert backoff_delay(10, jittery, 0.5) == 3600 * 1.25  # spread even at the cap


def test_a_requeued_workload_waits_for_its_backoff_and_long_delays_arrive_in_legs() -> None:
    w = timeout(admitted()).workload
    assert w is not None and w.requeue_at == 360
    early = decide(w, RequeueDue(KEY, 1), DEFAULT, 300)
    assert early.workload is not None and early.workload.phase is Phase.REQUEUED
    assert [(e.count, e.delay) for e in early.effects if isinstance(e, Requeue)] == [(1, 60)]
    due = decide(w, RequeueDue(KEY, 1), DEFAULT, 360)
    assert (
        due.workload is not None
        and due.workload.phase is Phase.PENDING
        and due.workload.requeue_at is None
    )
    assert kinds(due.effects) == ["Publish:BackoffFinished", "RunAdmission"]
    assert due.workload.requeue_count == 1  # kept, only cleared by deactivation
    assert decide(due.workload, RequeueDue(KEY, 1), DEFAULT, 361).outcome is Outcome.STALE


def test_backoff_limit_gives_n_requeues_then_deactivates_without_counting() -> None:
    s = settings(requeuingStrategy={"backoffLimitCount": 3})
    w = admitted(s)
    for n in (1, 2, 3):
        d = timeout(w, s)
        assert (
            d.workload is not None
            and d.workload.phase is Phase.REQUEUED
            and d.workload.requeue_count == n
        )
        w = requeue_and_admit(d.workload, s)
        assert w.attempt == n + 1
    d = timeout(w, s)
    assert d.workload is not None and d.workload.phase is Phase.DEACTIVATED
    assert d.workload.reason == "RequeuingLimitExceeded"
    assert kinds(d.effects) == ["Evict", "Publish:Evicted", "Publish:Deactivated", "RunAdmission"]
    assert published(d.effects, "Deactivated")[0].detail["count"] == 3


def test_a_limit_of_zero_deactivates_at_the_first_timeout() -> None:
    s = settings(requeuingStrategy={"backoffLimitCount": 0})
    d = timeout(admitted(s), s)
    assert d.workload is not None and d.workload.phase is Phase.DEACTIVATED


def test_the_time_limit_deactivates_once_the_failing_cycle_is_too_old() -> None:
    s = settings(
        timeout="1m", requeuingStrategy={"backoffLimitTimeout": "10m", "backoffBaseSeconds": 60}
    )
    w = admitted(s)
    d = timeout(w, s)  # t=60, cycle starts
    assert d.workload is not None and d.workload.first_evicted_at == 60
    w = requeue_and_admit(d.workload, s)
    d = timeout(w, s, now=600)  # 540 s into the cycle: still requeued
    assert d.workload is not None and d.workload.phase is Phase.REQUEUED
    w = requeue_and_admit(d.workload, s)
    d = timeout(w, s, now=660)  # 600 s: deactivated
    assert d.workload is not None and d.workload.phase is Phase.DEACTIVATED


def test_readiness_ends_the_failing_cycle_but_never_resets_the_count() -> None:
    s = settings(requeuingStrategy={"backoffLimitTimeout": "1h"})
    w = requeue_and_admit(timeout(admitted(s), s).workload, s)  # type: ignore[arg-type]
    for i in range(2):
        w = decide(w, ready(KEY, f"p{i}", uid=f"new{i}"), s, 500).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING and w.first_evicted_at is None and w.requeue_count == 1


def test_a_stale_timer_never_evicts() -> None:
    w = admitted()
    old = DeadlineReached(KEY, 1, TimerKind.STARTUP)
    w2 = requeue_and_admit(timeout(w).workload)  # type: ignore[arg-type]
    d = decide(w2, old, DEFAULT, 10_000)
    assert d.outcome is Outcome.STALE and d.effects == () and d.workload == w2
    ready_w = running()
    d = decide(ready_w, DeadlineReached(KEY, 1, TimerKind.STARTUP), DEFAULT, 10_000)
    assert (
        d.outcome is Outcome.STALE and d.workload is not None and d.workload.phase is Phase.RUNNING
    )


def test_pods_of_an_evicted_attempt_do_not_count_for_the_next() -> None:
    w = admitted(pods=2)
    w = decide(w, ready(KEY, "p0"), DEFAULT, 1).workload  # type: ignore[assignment]
    w = requeue_and_admit(timeout(w).workload)  # type: ignore[arg-type]
    late = ready(KEY, "p0", seq=9)  # same uid: the old incarnation
    d = decide(w, late, DEFAULT, 500)
    assert d.outcome is Outcome.IGNORED and d.workload is not None and d.workload.ready_pods == 0
    for i in range(2):
        # The replacements are newer objects: a higher cluster revision.
        w = decide(w, ready(KEY, f"p{i}", seq=10 + i, uid=f"fresh{i}"), DEFAULT, 501).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING


def test_a_workload_timeout_override_is_capped() -> None:
    s = settings(timeout="5m", maxTimeout="10m")
    w = admitted(s, timeout_override=3600.0)
    assert w.timer is not None and w.timer.deadline == 600


def test_evicted_workloads_go_to_the_back_of_the_queue_only_under_eviction() -> None:
    w = timeout(admitted(now=0.0)).workload
    assert w is not None and w.queued_at == 300
    s = settings(requeuingStrategy={"timestamp": "Creation"})
    w = timeout(admitted(s, now=0.0), s).workload
    assert w is not None and w.queued_at == 0


# --------------------------------------------------------------------------- recovery


def test_losing_a_ready_pod_starts_the_recovery_deadline_and_recovering_is_recovered() -> None:
    s = settings(timeout="5m", recoveryTimeout="2m")
    w = running(s)
    d = decide(w, ready(KEY, "p1", seq=2, ready=False), s, 1000)
    assert d.workload is not None and d.workload.phase is Phase.RECOVERING
    assert kinds(d.effects) == ["StartTimer", "Publish:WaitForRecovery"]
    start = d.effects[0]
    assert (
        isinstance(start, StartTimer)
        and start.timer.kind is TimerKind.RECOVERY
        and start.timer.deadline == 1120
    )
    d = decide(d.workload, ready(KEY, "p1", seq=3), s, 1050)
    assert d.workload is not None and d.workload.phase is Phase.RUNNING
    assert published(d.effects, "PodsReady")[0].detail["reason"] == "Recovered"
    assert isinstance(d.effects[0], StopTimer)


def test_recovery_timeout_evicts_with_cause_wait_for_recovery_and_shares_the_counter() -> None:
    w = running()
    w = decide(w, ready(KEY, "p0", seq=2, ready=False), DEFAULT, 1000).workload  # type: ignore[assignment]
    d = timeout(w)
    assert (
        d.workload is not None
        and d.workload.phase is Phase.REQUEUED
        and d.workload.requeue_count == 1
    )
    evict = d.effects[0]
    assert isinstance(evict, Evict) and evict.cause is Reason.WAIT_FOR_RECOVERY
    # The next readiness after an eviction is a fresh start, not a recovery.
    w = requeue_and_admit(d.workload)
    for i in range(2):
        dd = decide(w, ready(KEY, f"p{i}", seq=10, uid=f"n{i}"), DEFAULT, 2000)
        w = dd.workload  # type: ignore[assignment]
    assert published(dd.effects, "PodsReady")[0].detail["reason"] == "Started"


def test_two_recovery_episodes_get_distinct_timers() -> None:
    w = running()
    w = decide(w, ready(KEY, "p0", seq=2, ready=False), DEFAULT, 10).workload  # type: ignore[assignment]
    first = w.timer
    w = decide(w, ready(KEY, "p0", seq=3), DEFAULT, 11).workload  # type: ignore[assignment]
    w = decide(w, ready(KEY, "p0", seq=4, ready=False), DEFAULT, 12).workload  # type: ignore[assignment]
    assert first is not None and w.timer is not None and w.timer.episode == first.episode + 1
    stale = DeadlineReached(KEY, first.attempt, first.kind, first.episode)
    assert decide(w, stale, DEFAULT, 400).outcome is Outcome.STALE


def test_recovery_timeout_zero_turns_recovery_eviction_off() -> None:
    s = settings(recoveryTimeout="0s")
    w = running(s)
    d = decide(w, ready(KEY, "p0", seq=2, ready=False), s, 10)
    assert (
        d.workload is not None and d.workload.phase is Phase.RECOVERING and d.workload.timer is None
    )
    assert kinds(d.effects) == ["Publish:WaitForRecovery"]


# --------------------------------------------------------------------------- nodes


def test_node_marked_for_replacement_evicts_at_once_without_backoff_or_count() -> None:
    w = running()
    d = decide(
        w,
        NodeObserved("n0", ready=True, health="UnschedulablePendingReplacement", workload=KEY),
        DEFAULT,
        50,
    )
    assert d.workload is not None and d.workload.phase is Phase.PENDING
    assert d.workload.requeue_count == 0 and d.workload.requeue_at is None
    evict = next(e for e in d.effects if isinstance(e, Evict))
    assert evict.reason is Reason.NODE_FAILURES and evict.cause is None
    assert d.workload.evictions == {"NodeFailures": 1}
    assert kinds(d.effects)[-1] == "RunAdmission"
    # AND it records its diagnosis like every eviction: the gang itself was whole
    (evicted,) = published(d.effects, "Evicted")
    assert evicted.detail["diagnosis"]["summary"] == "all 2 pods were Ready"


def test_node_replacement_eviction_can_be_turned_off() -> None:
    s = settings(nodeReplacementEviction=False)
    w = running(s)
    d = decide(w, NodeObserved("n0", health="UnschedulablePendingReplacement", workload=KEY), s, 50)
    assert (
        d.outcome is Outcome.IGNORED
        and d.workload is not None
        and d.workload.phase is Phase.RUNNING
    )


def test_a_not_ready_node_makes_its_pods_not_ready() -> None:
    w = running()
    d = decide(w, NodeObserved("n0", ready=False, workload=KEY), DEFAULT, 50)
    assert d.workload is not None and d.workload.phase is Phase.RECOVERING
    assert all(p.reason == "NodeNotReady" for p in d.workload.pods.values())


def test_a_node_without_the_gang_changes_nothing() -> None:
    w = running()
    assert (
        decide(w, NodeObserved("elsewhere", ready=False, workload=KEY), DEFAULT, 50).outcome
        is Outcome.IGNORED
    )


# --------------------------------------------------------------------------- dry run


def test_dry_run_reports_the_eviction_and_evicts_nothing() -> None:
    s = settings(dryRun=True, requeuingStrategy={"backoffLimitCount": 0})
    w = admitted(s)
    d = timeout(w, s)
    assert kinds(d.effects) == ["Publish:Evicted"]
    detail = published(d.effects, "Evicted")[0].detail
    assert detail["dryRun"] is True and detail["wouldDeactivate"] is True
    assert (
        d.workload is not None and d.workload.phase is Phase.ADMITTED and d.workload.timer is None
    )
    assert d.workload.requeue_count == 0


# --------------------------------------------------------------------------- finish, reactivate


def test_finishing_stops_the_timer_and_frees_the_quota() -> None:
    w = admitted()
    d = decide(w, WorkloadFinished(KEY, Reason.DELETED), DEFAULT, 5)
    assert d.workload is not None and d.workload.phase is Phase.FINISHED
    assert kinds(d.effects) == ["StopTimer", "Publish:Finished", "RunAdmission"]
    assert decide(d.workload, WorkloadFinished(KEY), DEFAULT, 6).outcome is Outcome.DUPLICATE


def test_reactivation_readmits_without_backoff_and_with_a_fresh_count() -> None:
    s = settings(requeuingStrategy={"backoffLimitCount": 0})
    w = timeout(admitted(s), s).workload
    assert w is not None and w.phase is Phase.DEACTIVATED
    d = decide(w, Reactivate(KEY), s, 1000)
    assert d.workload is not None and d.workload.phase is Phase.PENDING
    assert (d.workload.requeue_count, d.workload.requeue_at) == (0, None)
    assert kinds(d.effects) == ["Publish:Reactivated", "RunAdmission"]
    assert decide(d.workload, Reactivate(KEY), s, 1001).outcome is Outcome.IGNORED


# --------------------------------------------------------------------------- pod groups


def test_a_pod_group_waits_for_replacement_pods_before_readmission() -> None:
    from muster.core import admissible

    w = decide(None, submit(KEY, pods=2, kind=Kind.POD_GROUP), DEFAULT, 0).workload
    assert w is not None and not admissible(w, 0)  # its gated pods do not exist yet
    for i in range(2):
        w = decide(w, PodObserved(KEY, f"p{i}", 1, uid=f"u{i}"), DEFAULT, 1).workload  # type: ignore[assignment]
    assert admissible(w, 1)
    w = replace(w, phase=Phase.PENDING)
    evicted = timeout(decide(w, AdmissionGranted(KEY, 1), DEFAULT, 2).workload).workload  # type: ignore[arg-type]
    assert evicted is not None
    pending = decide(evicted, RequeueDue(KEY, 1), DEFAULT, 10_000).workload
    assert pending is not None and not admissible(pending, 10_000)


def test_a_waiting_pod_group_asks_for_one_pass_when_its_last_pod_arrives() -> None:
    # GIVEN a pod group of 4 whose gated pods are created one by one
    w = decide(None, submit(KEY, pods=4, kind=Kind.POD_GROUP), DEFAULT, 0).workload
    asked = []
    for i in range(4):
        d = decide(w, PodObserved(KEY, f"p{i}", i + 1, uid=f"u{i}"), DEFAULT, 1)
        asked.append("RunAdmission" in kinds(d.effects))
        w = d.workload
    # THEN only the pod that makes it whole asks for an admission pass
    assert asked == [False, False, False, True]
    # AND one pod more (the group overshooting its size) asks for none
    d = decide(w, PodObserved(KEY, "p4", 9, uid="u4"), DEFAULT, 1)
    assert "RunAdmission" not in kinds(d.effects)


def test_an_admitted_workload_keeps_its_queue_so_quotas_hold() -> None:
    w = admitted()
    d = decide(w, submit(KEY, queue="other", seq=2, priority=3), DEFAULT, 1)
    assert d.workload is not None and d.workload.queue == "q" and d.workload.priority == 3


def test_a_pod_first_heard_of_after_an_eviction_never_counts_for_the_next_attempt() -> None:
    # GIVEN a gang of one evicted at its deadline before its pod's Ready was applied
    # (the pod event failed, and comes back redelivered after the eviction)
    w = admitted(pods=1)
    evicted = timeout(w).workload
    assert evicted is not None and evicted.phase is Phase.REQUEUED
    late = decide(evicted, ready(KEY, "p0", seq=177, uid="old"), DEFAULT, 1)
    # THEN the pod is the evicted attempt's: kept, but retired
    assert late.workload is not None and late.workload.pods["p0"].retired
    # WHEN the gang is admitted again
    again = requeue_and_admit(late.workload)
    # THEN the old pod does not make it whole: the new attempt waits for its own
    assert again.phase is Phase.ADMITTED and again.ready_pods == 0
    # AND its own pod does
    d = decide(again, ready(KEY, "p0", seq=300, uid="new"), DEFAULT, again.queued_at + 2)
    assert d.workload is not None and d.workload.phase is Phase.RUNNING
