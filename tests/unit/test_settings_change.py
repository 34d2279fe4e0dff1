"""Deadlines a settings change brings back, and an admission the cluster refused for good."""

from __future__ import annotations

from muster.core import (
    AdmissionGranted,
    AdmissionRefused,
    DeadlineReached,
    Evict,
    Outcome,
    Phase,
    Reason,
    StartTimer,
    TimerKind,
    Workload,
    decide,
    owed_timer,
)

from tests.unit.conftest import kinds, published, ready, settings, submit

KEY = "team/a"
DRY = settings(dryRun=True, timeout="5m")
LIVE = settings(timeout="5m")
LONGER = settings(timeout="20m")


def admitted(s=LIVE, now: float = 0.0) -> Workload:
    w = decide(None, submit(KEY), s, now).workload
    d = decide(w, AdmissionGranted(KEY, 1), s, now)
    assert d.workload is not None
    return d.workload


def dry_run_evicted() -> Workload:
    w = admitted(DRY)
    assert w.timer is not None
    fired = DeadlineReached(KEY, 1, TimerKind.STARTUP, w.timer.episode)
    w = decide(w, fired, DRY, 300).workload  # type: ignore[assignment]
    assert w.phase is Phase.ADMITTED and w.timer is None and w.dry_run_evicted
    return w


def owed_signal(w: Workload, kind: TimerKind = TimerKind.STARTUP) -> DeadlineReached:
    return DeadlineReached(KEY, w.attempt, kind, 0)


def test_dry_run_off_evicts_a_gang_whose_deadline_passed_meanwhile() -> None:
    w = dry_run_evicted()
    assert owed_timer(w, DRY.for_queue(w.queue)) is None  # still in dry run: nothing owed
    d = decide(w, owed_signal(w), LIVE, 400)
    assert d.workload is not None and d.workload.phase is Phase.REQUEUED
    evict = next(e for e in d.effects if isinstance(e, Evict))
    assert (evict.reason, evict.cause) == (Reason.PODS_READY_TIMEOUT, Reason.WAIT_FOR_START)
    assert "dryRun" not in published(d.effects, "Evicted")[0].detail


def test_dry_run_off_with_a_longer_timeout_arms_the_rest_of_it() -> None:
    w = dry_run_evicted()
    d = decide(w, owed_signal(w), LONGER, 400)
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    timer = d.workload.timer
    assert timer is not None and timer.deadline == 1200 and timer.episode == 2
    assert d.effects == (StartTimer(KEY, timer),)
    assert not d.workload.dry_run_evicted
    # A duplicate of the signal changes nothing; the new timer evicts at its deadline.
    assert decide(d.workload, owed_signal(w), LONGER, 401).outcome is Outcome.STALE
    fired = decide(d.workload, DeadlineReached(KEY, 1, TimerKind.STARTUP, 2), LONGER, 1200)
    assert fired.workload is not None and fired.workload.phase is Phase.REQUEUED


def test_still_in_dry_run_the_signal_is_stale() -> None:
    w = dry_run_evicted()
    d = decide(w, owed_signal(w), DRY, 400)
    assert d.outcome is Outcome.STALE and d.workload == w


def test_a_second_rearm_takes_a_new_episode() -> None:
    w = dry_run_evicted()
    w = decide(w, owed_signal(w), LONGER, 400).workload  # type: ignore[assignment]
    assert w.timer is not None
    w = decide(
        w, DeadlineReached(KEY, 1, TimerKind.STARTUP, 2), settings(dryRun=True), 1200
    ).workload  # type: ignore[assignment]
    assert w.timer is None
    again = owed_timer(w, settings(timeout="1h").for_queue(w.queue))
    assert again is not None and again.episode == 3


def test_recovery_timeout_back_to_positive_arms_or_evicts_a_recovering_gang() -> None:
    off = settings(recoveryTimeout="0s")
    w = admitted(off)
    for i in range(2):
        w = decide(w, ready(KEY, f"p{i}"), off, 1).workload  # type: ignore[assignment]
    w = decide(w, ready(KEY, "p0", seq=2, ready=False), off, 100).workload  # type: ignore[assignment]
    assert w.phase is Phase.RECOVERING and w.timer is None and w.recovering_since == 100
    on = settings(recoveryTimeout="2m")
    armed = decide(w, owed_signal(w, TimerKind.RECOVERY), on, 150)
    assert armed.workload is not None and armed.workload.timer is not None
    assert armed.workload.timer.kind is TimerKind.RECOVERY
    assert armed.workload.timer.deadline == 220
    assert armed.workload.timer.episode == w.recovery_episodes + 1
    late = decide(w, owed_signal(w, TimerKind.RECOVERY), on, 221)
    assert late.workload is not None and late.workload.phase is Phase.REQUEUED
    evict = next(e for e in late.effects if isinstance(e, Evict))
    assert evict.cause is Reason.WAIT_FOR_RECOVERY
    # A startup signal for a recovering gang, or one of another attempt, is stale.
    assert decide(w, owed_signal(w), on, 221).outcome is Outcome.STALE
    other = DeadlineReached(KEY, 2, TimerKind.RECOVERY, 0)
    assert decide(w, other, on, 221).outcome is Outcome.STALE


def test_a_refused_admission_is_withdrawn_and_requeued_with_backoff() -> None:
    s = settings(requeuingStrategy={"backoffBaseSeconds": 30})
    w = admitted(s)
    d = decide(w, AdmissionRefused(KEY, 1, "Admit: 403 Forbidden"), s, 5)
    after = d.workload
    assert after is not None and after.phase is Phase.REQUEUED and after.timer is None
    assert after.requeue_count == 1 and after.requeue_at == 35
    assert "403 Forbidden" in (after.message or "")
    assert kinds(d.effects)[:3] == ["StopTimer", "Evict", "Publish:Evicted"]
    evict = next(e for e in d.effects if isinstance(e, Evict))
    assert evict.reason is Reason.ADMISSION_REFUSED and evict.attempt == 1
    detail = published(d.effects, "Evicted")[0].detail
    assert detail["reason"] == "AdmissionRefused" and "403" in detail["error"]
    assert "RunAdmission" in kinds(d.effects)
    # Told again (a duplicate), or of an earlier attempt: stale.
    assert decide(after, AdmissionRefused(KEY, 1, "x"), s, 6).outcome is Outcome.STALE


def test_refused_admissions_count_towards_the_requeuing_limit() -> None:
    s = settings(requeuingStrategy={"backoffLimitCount": 1, "backoffBaseSeconds": 1})
    w = admitted(s)
    w = decide(w, AdmissionRefused(KEY, 1, "422"), s, 1).workload  # type: ignore[assignment]
    assert w.phase is Phase.REQUEUED
    from muster.core import RequeueDue

    w = decide(w, RequeueDue(KEY, 1), s, 10).workload  # type: ignore[assignment]
    w = decide(w, AdmissionGranted(KEY, 2), s, 10).workload  # type: ignore[assignment]
    d = decide(w, AdmissionRefused(KEY, 2, "422 Invalid"), s, 11)
    assert d.workload is not None and d.workload.phase is Phase.DEACTIVATED
    assert kinds(d.effects).count("Publish:Deactivated") == 1
    assert published(d.effects, "Evicted")[0].detail["refused"] == "AdmissionRefused"


def test_a_refusal_of_a_gang_that_ran_is_stale() -> None:
    w = admitted()
    for i in range(2):
        w = decide(w, ready(KEY, f"p{i}"), LIVE, 1).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING
    assert decide(w, AdmissionRefused(KEY, 1, "403"), LIVE, 2).outcome is Outcome.STALE


def test_a_refused_release_of_a_running_pod_groups_replacements_withdraws_it() -> None:
    # GIVEN a running pod group that lost a pod; its replacement's release was refused
    from muster.core import Kind, PodObserved, WorkloadObserved

    group = "team/grp@podgroup"
    w = decide(None, WorkloadObserved(group, "q", 2, gpus=8, kind=Kind.POD_GROUP, seq=1), LIVE, 0)
    g = w.workload
    for i, seq in enumerate((2, 3)):
        g = decide(g, PodObserved(group, f"g{i}", seq, f"g{i}-u"), LIVE, 0).workload
    g = decide(g, AdmissionGranted(group, 1), LIVE, 0).workload
    for i, seq in enumerate((4, 5)):
        ran = PodObserved(group, f"g{i}", seq, f"g{i}-u", "Running", True, "n1")
        g = decide(g, ran, LIVE, 1).workload
    assert g is not None and g.phase is Phase.RUNNING
    gone = PodObserved(group, "g1", 6, "g1-u", "Failed", False, "n1", deleted=True)
    g = decide(g, gone, LIVE, 2).workload
    g = decide(g, PodObserved(group, "g2", 7, "g2-u"), LIVE, 2).workload
    assert g is not None and g.phase is Phase.RECOVERING
    # WHEN the cluster refuses it for good
    d = decide(g, AdmissionRefused(group, 1, "Admit: 403 Forbidden"), LIVE, 3)
    # THEN the attempt is withdrawn (its gang cannot be whole again): it holds nothing
    assert d.workload is not None and d.workload.phase is Phase.REQUEUED
    assert any(isinstance(e, Evict) and e.reason is Reason.ADMISSION_REFUSED for e in d.effects)
