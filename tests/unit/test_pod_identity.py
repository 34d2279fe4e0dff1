"""Whose pods are whose: a pod of a deleted object never counts for the object
re-created under its name, and a pod group run again under its name is a new run."""

from __future__ import annotations

from dataclasses import replace

from muster.core import (
    AdmissionGranted,
    Admit,
    DeadlineReached,
    Evict,
    Kind,
    Outcome,
    Phase,
    PodObserved,
    Publish,
    Reason,
    StartTimer,
    StopTimer,
    TimerKind,
    Workload,
    WorkloadFinished,
    WorkloadObserved,
    decide,
)
from muster.core.gang import incarnation

from tests.unit.conftest import settings

S = settings(timeout="60s")
KEY = "ml/train"
GROUP = "ml/grp"


def step(w: Workload | None, event: object, now: float = 0.0):
    d = decide(w, event, S, now)  # type: ignore[arg-type]
    return d


def pod(key: str, name: str, seq: int, *, owner: str = "", ready: bool = True, **kw: object):
    return PodObserved(
        key,
        name,
        seq,
        uid=f"{name}-uid",
        phase=kw.pop("phase", "Running" if ready else "Pending"),  # type: ignore[arg-type]
        ready=ready,
        node=kw.pop("node", "n1"),  # type: ignore[arg-type]
        owner=owner,
        **kw,  # type: ignore[arg-type]
    )


def admitted(w: Workload) -> Workload:
    d = step(w, AdmissionGranted(w.key, w.attempt + 1))
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    return d.workload


# --------------------------------------------------------------------------- old pods, new object


def recreated_job() -> Workload:
    """A running Job deleted and re-created under its name, the new one admitted."""
    w = step(None, WorkloadObserved(KEY, "q", 2, seq=10, uid="job-1")).workload
    assert w is not None
    w = admitted(w)
    for i, seq in enumerate((11, 12)):
        w = step(w, pod(KEY, f"train-old-{i}", seq, owner="job-1")).workload
    assert w is not None and w.phase is Phase.RUNNING
    w = step(w, WorkloadFinished(KEY, Reason.DELETED, 20, uid="job-1")).workload
    d = step(w, WorkloadObserved(KEY, "q", 2, seq=30, uid="job-2"))
    assert d.reborn and d.workload is not None
    return admitted(d.workload)


def test_terminating_pods_of_a_deleted_job_do_not_count_for_its_successor() -> None:
    # GIVEN a Job re-created under its name, admitted, while the old one's pods terminate
    w = recreated_job()
    timer = w.timer
    (held,) = w.predecessors
    assert held.uid == "job-1" and set(held.pods) == {"train-old-0", "train-old-1"}
    # WHEN the old pods report (still Ready) after the new object was seen
    for i, seq in enumerate((31, 32)):
        d = step(w, pod(KEY, f"train-old-{i}", seq, owner="job-1"))
        # THEN they are not this object's: they go to the old one's holding, and the
        # start timer runs on
        assert not any(isinstance(e, StopTimer) for e in d.effects)
        w = d.workload  # type: ignore[assignment]
        assert w.predecessors[0].pods[f"train-old-{i}"].seq == seq
    assert w.phase is Phase.ADMITTED and w.pods == {} and w.timer == timer
    # and their deletions are not its either
    gone = pod(KEY, "train-old-0", 33, owner="job-1", ready=False, deleted=True)
    d = step(w, gone)
    assert d.workload is not None and d.workload.pods == {}
    assert d.workload.predecessors[0].pods["train-old-0"].deleted
    # AND a pod of an object it never held is stale
    assert step(w, pod(KEY, "train-x", 34, owner="job-0")).outcome is Outcome.STALE
    # WHEN its own pods turn Ready, THEN it runs
    for i, seq in enumerate((34, 35)):
        w = step(w, pod(KEY, f"train-new-{i}", seq, owner="job-2")).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING


def test_a_pod_whose_owner_is_unknown_counts_as_before() -> None:
    # An older agent sends no owner: the revision is all that tells the objects apart.
    w = recreated_job()
    for i, seq in enumerate((31, 32)):
        w = step(w, pod(KEY, f"train-{i}", seq)).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING


# --------------------------------------------------------------------------- a pod group run again


def group(seq: int = 10, gang: int = 2) -> WorkloadObserved:
    return WorkloadObserved(GROUP, "q", gang, kind=Kind.POD_GROUP, seq=seq)


def finished_group() -> Workload:
    """A pod group that ran and succeeded (at revision 30)."""
    w = step(None, group(10)).workload
    assert w is not None
    for i, seq in enumerate((11, 12)):
        w = step(w, pod(GROUP, f"grp-{i}", seq, ready=False, node=None)).workload
    w = admitted(w)  # type: ignore[arg-type]
    for i, seq in enumerate((13, 14)):
        w = step(w, pod(GROUP, f"grp-{i}", seq)).workload  # type: ignore[assignment]
    assert w.phase is Phase.RUNNING
    for i, seq in enumerate((20, 21)):
        w = step(w, pod(GROUP, f"grp-{i}", seq, ready=False, phase="Succeeded")).workload  # type: ignore[assignment]
    w = step(w, WorkloadFinished(GROUP, Reason.SUCCEEDED, 30)).workload  # type: ignore[assignment]
    assert w.phase is Phase.FINISHED
    return w


def test_a_pod_group_run_again_under_its_name_is_a_new_run() -> None:
    # GIVEN a pod group that succeeded
    old = finished_group()
    # WHEN new gated pods of that name appear (the group is reported active again)
    d = step(old, group(40))
    # THEN it is a new incarnation: queued afresh, its own identity and timer names
    w = d.workload
    assert d.reborn and w is not None
    assert (w.phase, w.attempt, w.requeue_count) == (Phase.PENDING, 0, 0)
    assert w.uid and w.uid != old.uid
    for i, seq in enumerate((41, 42)):
        w = step(w, pod(GROUP, f"grp-b{i}", seq, ready=False, node=None)).workload  # type: ignore[assignment]
    assert w.live_pods == 2
    d = step(w, AdmissionGranted(GROUP, 1))
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    (started,) = [e for e in d.effects if isinstance(e, StartTimer)]
    assert started.timer.attempt == 1 and started.timer.incarnation == incarnation(d.workload)
    assert started.timer.incarnation != incarnation(old)
    # and a late timer of the old run changes nothing
    late = DeadlineReached(GROUP, 1, TimerKind.STARTUP, 1, incarnation(old))
    assert step(d.workload, late).outcome is Outcome.STALE


def test_a_late_report_of_the_ended_run_starts_nothing() -> None:
    # GIVEN a finished pod group WHEN a report of it older than its end comes late
    old = finished_group()
    d = step(old, group(25))
    # THEN it is not a new run
    assert not d.reborn and d.outcome is Outcome.STALE
    assert d.workload is not None and d.workload.phase is Phase.FINISHED
    # and a redelivered report that started a new run starts no third
    again = step(old, group(40)).workload
    assert step(again, group(40)).outcome is Outcome.DUPLICATE


def test_the_new_runs_pods_heard_of_first_are_its_own() -> None:
    # GIVEN a finished pod group whose new run's pods are reported before the group
    w = finished_group()
    for i, seq in enumerate((41, 42)):
        w = step(w, pod(GROUP, f"grp-b{i}", seq, ready=False, node=None)).workload  # type: ignore[assignment]
    # WHEN the group is reported active
    d = step(w, group(43))
    # THEN the new run has those pods (not the old run's), and may be admitted at once
    assert d.reborn and d.workload is not None
    assert sorted(d.workload.pods) == ["grp-b0", "grp-b1"] and d.workload.live_pods == 2
    assert any(type(e).__name__ == "RunAdmission" for e in d.effects)
    # and a late report of an old run's pod is not the new run's
    late = pod(GROUP, "grp-0", 15)
    assert step(d.workload, late).outcome is Outcome.STALE


def test_a_pod_group_with_no_pods_at_its_admission_is_not_finished() -> None:
    # GIVEN an admitted pod group whose pods are all being replaced
    w = step(None, group(10)).workload
    for i, seq in enumerate((11, 12)):
        w = step(w, pod(GROUP, f"grp-{i}", seq, ready=False, node=None)).workload  # type: ignore[assignment]
    w = admitted(w)  # type: ignore[arg-type]
    # WHEN releasing it finds no pods (the shell reports the workload gone)
    d = step(w, WorkloadFinished(GROUP, Reason.DELETED, uid=w.uid))
    # THEN it is not finished: it waits for its replacements, timer armed
    assert d.outcome is Outcome.IGNORED
    assert d.workload is not None and d.workload.phase is Phase.ADMITTED
    assert d.workload.timer == w.timer
    # and the replacements, once observed, are released
    w = step(w, pod(GROUP, "grp-0", 13, ready=False, node=None, deleted=True)).workload
    d = step(w, pod(GROUP, "grp-0b", 14, ready=False, node=None))
    assert [type(e).__name__ for e in d.effects] == ["Admit"]


def test_a_legacy_pod_group_record_keeps_its_empty_identity() -> None:
    # A record from before runs had an identity: later reports leave it as it is.
    w = replace(step(None, group(10)).workload, uid="")  # type: ignore[type-var]
    d = step(w, group(11, gang=3))
    assert d.workload is not None and d.workload.uid == "" and not d.reborn


# --------------------------------------------------------------------------- an end told late


def succeeded_pods(w: Workload) -> Workload:
    """A running pod group whose pods succeeded (revisions 20, 21), its end not yet heard of."""
    assert w.phase is Phase.RUNNING
    for i, seq in enumerate((20, 21)):
        done = pod(GROUP, f"grp-{i}", seq, ready=False, phase="Succeeded")
        w = step(w, done).workload  # type: ignore[assignment]
    return w


def running_group() -> Workload:
    w = step(None, group(10)).workload
    for i, seq in enumerate((11, 12)):
        w = step(w, pod(GROUP, f"grp-{i}", seq, ready=False, node=None)).workload  # type: ignore[assignment]
    w = admitted(w)  # type: ignore[arg-type]
    for i, seq in enumerate((13, 14)):
        w = step(w, pod(GROUP, f"grp-{i}", seq)).workload  # type: ignore[assignment]
    return w


def test_an_end_heard_of_after_the_next_runs_pods_ends_the_run_and_starts_the_next() -> None:
    # GIVEN a pod group whose run succeeded (its end, at 30, comes late) and whose next
    # run's gated pods (40, 41) came first: taken for replacements, they were released
    w = succeeded_pods(running_group())
    for i, seq in enumerate((40, 41)):
        d = step(w, pod(GROUP, f"grp-b{i}", seq, ready=False, node=None))
        assert [type(e).__name__ for e in d.effects if isinstance(e, Admit)] == ["Admit"]
        w = d.workload  # type: ignore[assignment]
    old = w
    # WHEN the end arrives
    d = step(w, WorkloadFinished(GROUP, Reason.SUCCEEDED, 30))
    # THEN the run is finished, and the next starts as its own incarnation, with its pods,
    # waiting for its own admission; what the ended run released of it is withdrawn
    new = d.workload
    assert d.reborn and new is not None
    assert (new.phase, new.attempt) == (Phase.PENDING, 0) and new.uid != old.uid
    assert sorted(new.pods) == ["grp-b0", "grp-b1"] and new.born_seq == 30
    (evict,) = [e for e in d.effects if isinstance(e, Evict)]
    assert (evict.attempt, evict.uid) == (1, "")
    published = [
        (e.event.value, e.detail.get("reason")) for e in d.effects if isinstance(e, Publish)
    ]
    assert published == [("Finished", "Succeeded"), ("Submitted", None)]
    # and the end told again is of the run before: it changes nothing
    assert step(new, WorkloadFinished(GROUP, Reason.SUCCEEDED, 30)).outcome is Outcome.STALE


def test_an_end_heard_of_after_the_next_runs_report_ends_the_run() -> None:
    # GIVEN a pod group whose run succeeded, the next run reported active (40) before
    # the end (30) was heard of: until now an end older than the record's report was
    # stale, and the run held its quota for good
    w = step(succeeded_pods(running_group()), group(40)).workload
    assert w is not None and w.phase is not Phase.FINISHED
    # WHEN the end arrives
    d = step(w, WorkloadFinished(GROUP, Reason.SUCCEEDED, 30))
    # THEN the run is finished and the next waits for its pods (none released: no eviction)
    new = d.workload
    assert d.reborn and new is not None and new.phase is Phase.PENDING and new.pods == {}
    assert not any(isinstance(e, Evict) for e in d.effects)
    # and the next run's pods are its own
    w = step(new, pod(GROUP, "grp-b0", 41, ready=False, node=None)).workload
    assert w is not None and w.live_pods == 1
