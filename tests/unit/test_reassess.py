"""`reassess`: readiness re-derived from the pods as stored, for split pod storage."""

from dataclasses import replace

from muster.core import (
    DEFAULT_SETTINGS,
    AdmissionGranted,
    Outcome,
    Phase,
    Pod,
    StartTimer,
    StopTimer,
    WorkloadObserved,
    decide,
    reassess,
)


def _admitted(gang: int = 2):
    w = decide(None, WorkloadObserved("ns/a", "q", gang), DEFAULT_SETTINGS, 0).workload
    assert w is not None
    admitted = decide(w, AdmissionGranted("ns/a", 1), DEFAULT_SETTINGS, 1).workload
    assert admitted is not None
    return admitted


def test_gang_whole_in_storage_becomes_running():
    # GIVEN an admitted gang whose pods were all written Ready by concurrent writers
    w = _admitted()
    pods = {n: Pod(n, 1, phase="Running", ready=True) for n in ("p0", "p1")}
    # WHEN readiness is re-derived
    d = reassess(replace(w, pods=pods), DEFAULT_SETTINGS, 5)
    # THEN the gang is PodsReady and its startup timer is stopped
    assert d.outcome is Outcome.APPLIED
    assert d.workload is not None and d.workload.phase is Phase.RUNNING
    assert any(isinstance(e, StopTimer) for e in d.effects)


def test_nothing_follows_when_gang_not_whole():
    w = _admitted()
    pods = {"p0": Pod("p0", 1, phase="Running", ready=True)}
    d = reassess(replace(w, pods=pods), DEFAULT_SETTINGS, 5)
    assert d.outcome is Outcome.IGNORED and d.workload == replace(w, pods=pods)


def test_running_gang_that_lost_a_pod_starts_recovery():
    w = _admitted(1)
    ready = reassess(
        replace(w, pods={"p0": Pod("p0", 1, phase="Running", ready=True)}), DEFAULT_SETTINGS, 2
    ).workload
    assert ready is not None and ready.phase is Phase.RUNNING
    lost = replace(ready, pods={"p0": Pod("p0", 2, phase="Running", ready=False)})
    d = reassess(lost, DEFAULT_SETTINGS, 3)
    assert d.workload is not None and d.workload.phase is Phase.RECOVERING
    assert any(isinstance(e, StartTimer) for e in d.effects)


def test_pod_update_applies_pod_rules_without_the_gang():
    from muster.core import PodObserved, pod_update

    known = Pod("p0", 3, uid="u1", phase="Running", ready=True)
    assert pod_update(known, PodObserved("ns/a", "p0", 3, uid="u1"))[0] is Outcome.DUPLICATE
    assert pod_update(known, PodObserved("ns/a", "p0", 2, uid="u1"))[0] is Outcome.STALE
    retired = replace(known, retired=True)
    assert pod_update(retired, PodObserved("ns/a", "p0", 4, uid="u1"))[0] is Outcome.IGNORED
    # a new incarnation under the same name replaces a retired pod
    outcome, pod, _ = pod_update(retired, PodObserved("ns/a", "p0", 5, uid="u2", ready=True))
    assert outcome is Outcome.APPLIED and pod is not None and pod.uid == "u2" and pod.ready
    outcome, tombstone, _ = pod_update(known, PodObserved("ns/a", "p0", 4, uid="u1", deleted=True))
    assert outcome is Outcome.APPLIED and tombstone is not None and tombstone.deleted
