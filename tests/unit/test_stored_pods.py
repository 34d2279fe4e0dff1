"""What the core tells a shell that stores each pod apart from its workload.

Eviction and re-creation are the core's answers (`Decision.withdrawn`, `reborn`),
and a pod event on one stored pod says whether the gang is worth counting again;
the runtime carries these out and infers none of them.
"""

from __future__ import annotations

from dataclasses import replace

from muster.core import (
    AdmissionGranted,
    DeadlineReached,
    Kind,
    Outcome,
    Phase,
    PodObserved,
    PodsCounted,
    Workload,
    decide,
    gang_may_have_moved,
    observe_stored_pod,
)

from tests.unit.conftest import kinds, ready, settings, submit

KEY = "team/a"
DEFAULT = settings()
FAULTS = settings(workloadFaults={"evictAfter": "2m"})


def admitted(s=DEFAULT, pods: int = 2, **kw: object) -> Workload:
    w = decide(None, submit(KEY, pods=pods, **kw), s, 0.0).workload
    assert w is not None
    w = decide(w, AdmissionGranted(KEY, 1), s, 0.0).workload
    assert w is not None
    return w


def test_an_eviction_with_pods_is_withdrawn_and_starts_a_new_epoch() -> None:
    # GIVEN an admitted gang with one pod reported
    w = decide(admitted(), ready(KEY, "p0"), DEFAULT, 1.0).workload
    assert w is not None and w.timer is not None
    # WHEN its startup deadline passes
    d = decide(w, DeadlineReached(KEY, 1, w.timer.kind, w.timer.episode), DEFAULT, 300.0)
    # THEN the core says the attempt's pods were withdrawn, not a new object
    assert d.workload is not None and d.workload.phase is Phase.REQUEUED
    assert d.withdrawn and not d.reborn and d.new_epoch


def test_an_eviction_of_a_gang_without_pods_withdraws_nothing() -> None:
    w = admitted()
    assert w.timer is not None
    d = decide(w, DeadlineReached(KEY, 1, w.timer.kind, w.timer.episode), DEFAULT, 300.0)
    assert d.workload is not None and d.workload.phase is Phase.REQUEUED
    assert not d.withdrawn and not d.new_epoch


def test_a_pod_event_is_neither_withdrawn_nor_reborn() -> None:
    d = decide(admitted(), ready(KEY, "p0"), DEFAULT, 1.0)
    assert d.outcome is Outcome.APPLIED and not d.new_epoch


def test_a_new_object_under_the_key_is_reborn() -> None:
    # GIVEN a workload known by its uid
    w = decide(None, submit(KEY, uid="one"), DEFAULT, 0.0).workload
    assert w is not None
    # WHEN another object of that name is seen
    d = decide(w, submit(KEY, uid="two", seq=5), DEFAULT, 1.0)
    # THEN it is a new incarnation, not an eviction
    assert d.workload is not None and d.workload.uid == "two"
    assert d.reborn and not d.withdrawn and d.new_epoch
    # AND the same object seen again is not
    again = decide(d.workload, submit(KEY, uid="two", seq=6), DEFAULT, 2.0)
    assert not again.reborn


def test_a_stored_pod_turning_ready_moves_the_count_and_asks_for_a_recount() -> None:
    w = admitted()
    change = observe_stored_pod(w, None, ready(KEY, "p0"), DEFAULT)
    assert change.outcome is Outcome.APPLIED and change.pod is not None
    assert change.ready_delta == 1 and change.recount and not change.faults
    # AND its redelivery is a duplicate that asks for a recount (a crash may have
    # come between the pod write and the gang's transition)
    dup = observe_stored_pod(w, change.pod, ready(KEY, "p0"), DEFAULT)
    assert dup.outcome is Outcome.DUPLICATE and dup.recount and dup.ready_delta == 0


def test_a_stored_pod_change_that_moves_nothing_asks_for_no_recount() -> None:
    w = admitted()
    pending = observe_stored_pod(w, None, ready(KEY, "p0", ready=False), DEFAULT)
    later = observe_stored_pod(w, pending.pod, ready(KEY, "p0", seq=2, ready=False), DEFAULT)
    assert later.outcome is Outcome.APPLIED and later.ready_delta == 0 and not later.recount


def test_with_workload_faults_a_new_pod_may_move_the_watch() -> None:
    w = admitted(FAULTS)
    change = observe_stored_pod(w, None, ready(KEY, "p0", ready=False), FAULTS)
    assert change.ready_delta == 0 and change.faults and change.recount


def gated(pod: str, seq: int = 2) -> PodObserved:
    return PodObserved(KEY, pod, seq, uid=f"{pod}-uid", phase="Pending")


def test_a_waiting_pod_group_counts_its_new_pods_without_the_whole_gang() -> None:
    # GIVEN a pod group of two, waiting for its pods
    w = decide(None, submit(KEY, pods=2, kind=Kind.POD_GROUP, seq=1), DEFAULT, 0.0).workload
    assert w is not None and w.phase is Phase.PENDING
    # WHEN its first pod arrives (gated)
    change = observe_stored_pod(w, None, gated("p0"), DEFAULT)
    # THEN it is written alone, one more live pod, and the count is read back
    assert not change.whole_gang
    assert change.live_delta == 1 and change.ready_delta == 0 and change.recount
    # and only a count that reaches the gang's size is worth loading the gang for
    assert not gang_may_have_moved(w, 0, live_count=1)
    assert gang_may_have_moved(w, 0, live_count=2)
    assert not gang_may_have_moved(w, 0)  # a write that added no live pod


def admitted_group() -> Workload:
    w = decide(None, submit(KEY, pods=2, kind=Kind.POD_GROUP), DEFAULT, 0.0).workload
    for pod in ("p0", "p1"):
        w = decide(w, gated(pod), DEFAULT, 0.0).workload
    w = decide(w, AdmissionGranted(KEY, 1), DEFAULT, 0.0).workload
    assert w is not None and w.phase is Phase.ADMITTED
    return w


def test_a_pod_group_needs_its_whole_gang_where_its_pods_decide() -> None:
    w = admitted_group()
    # an admitted group's new pod is released with the gang (a replacement)
    assert observe_stored_pod(w, None, gated("p9"), DEFAULT).whole_gang
    # a store that does not count live pods yet
    assert observe_stored_pod(w, None, ready(KEY, "p0"), DEFAULT, counts_live=False).whole_gang
    # a finished group's pods may be a new run's
    done = replace(w, phase=Phase.FINISHED)
    assert observe_stored_pod(done, None, gated("p0"), DEFAULT).whole_gang
    # a known pod becoming Ready is counted as a Job's is
    change = observe_stored_pod(w, w.pods["p0"], ready(KEY, "p0", seq=3, uid="p0-uid"), DEFAULT)
    assert not change.whole_gang and change.ready_delta == 1 and change.live_delta == 0


def test_a_waiting_pod_group_counted_whole_asks_for_one_admission_pass() -> None:
    # GIVEN a waiting pod group of two whose two pods are stored
    w = decide(None, submit(KEY, pods=2, kind=Kind.POD_GROUP), DEFAULT, 0.0).workload
    assert w is not None
    pods = {p: observe_stored_pod(w, None, gated(p), DEFAULT).pod for p in ("a", "b")}
    stored = replace(w, pods=pods)
    # WHEN the shell counts the gang again
    d = decide(stored, PodsCounted(KEY), DEFAULT, 0.0)
    # THEN it asks for an admission pass, and nothing else moves
    assert kinds(d.effects) == ["RunAdmission"] and d.workload == stored
    one = replace(stored, pods={"a": stored.pods["a"]})
    assert decide(one, PodsCounted(KEY), DEFAULT, 0.0).outcome is Outcome.IGNORED


def test_the_gang_is_worth_loading_only_when_its_count_may_change_its_phase() -> None:
    w = admitted(pods=2)
    assert not gang_may_have_moved(w, 1)
    assert gang_may_have_moved(w, 2)
    assert gang_may_have_moved(w, 1, faults=True)
    run = replace(w, phase=Phase.RUNNING)
    assert not gang_may_have_moved(run, 2)
    assert gang_may_have_moved(run, 1)
    assert not gang_may_have_moved(replace(w, phase=Phase.REQUEUED), 2)


def test_pods_counted_is_the_gangs_transition_through_decide() -> None:
    # GIVEN an admitted gang whose pods are all Ready as stored, phase not yet moved
    w = admitted(pods=1)
    pod = observe_stored_pod(w, None, ready(KEY, "p0"), DEFAULT).pod
    assert pod is not None
    whole = replace(w, pods={"p0": pod})
    # WHEN the shell counts it again
    d = decide(whole, PodsCounted(KEY), DEFAULT, 5.0)
    # THEN the core moves it to Running; counted again, nothing follows
    assert d.workload is not None and d.workload.phase is Phase.RUNNING
    assert decide(d.workload, PodsCounted(KEY), DEFAULT, 6.0).outcome is Outcome.IGNORED
