"""Histories with the triggers the plain ones never hold (pod groups run again and their
members replaced, pods outliving their Job, kinds sharing a name, settings changed
mid-flight, refused releases, throttled PutEvents entries, late node conditions,
admission passes interleaved with other events, and a tenant's attacks: Jobs grown
after admission, deleted with their pods orphaned, pods forged with a Job's labels):
the view stays true, quota holds at every admission and release counting what runs,
nothing is stuck; and the harness notices a control plane that gets any of it wrong."""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from muster.core import Admit, parse_settings
from muster.harness import run_history
from muster.harness.histories import ALL_TOGGLES, TEAM, generate, generate_triggers
from muster.harness.invariants import QuotaWatch
from muster.runtime.memory import MemoryStore
from muster.runtime.ports import Ledger
from muster.runtime.service import ControlPlane

TRIGGERS = {
    "podGroupRerun",
    "membersReplaced",
    "podsOutlivingTheirJob",
    "sharedNames",
    "refusedAdmits",
    "throttledEntries",
    "lateNodeConditions",
    "interleavedPasses",
    "grownWhileReleased",
    "grownWhileHeld",
    "orphaningDeletes",
    "recreatedWhileOrphansRun",
    "forgedPods",
    "forgedPodsReported",
    *(f"settings:{kind}" for kind in ALL_TOGGLES),
}


@pytest.mark.parametrize("chunk", range(4))
def test_histories_with_every_trigger_converge(chunk: int) -> None:
    # GIVEN perturbed histories holding every trigger
    seeds = range(chunk * 40, chunk * 40 + 40)
    # WHEN each is played through the control plane
    outcomes = [run_history(seed, history=generate_triggers(seed)) for seed in seeds]
    # THEN Muster's view equals the cluster's, quota held at every admission and
    # release (as the store and as the cluster see it) and nothing is stuck
    assert {o.seed: o.divergences for o in outcomes if o.diverged} == {}
    # AND every trigger was drawn and did what it is there for
    drawn: Counter[str] = Counter()
    for o in outcomes:
        drawn.update(o.triggers)
    assert {t for t in TRIGGERS if drawn[t] == 0} == set()


def test_trigger_histories_hold_what_they_promise() -> None:
    histories = [generate_triggers(seed) for seed in range(30)]
    actions = [a for h in histories for a in h.actions]
    kinds = {a.what for a in actions}
    assert kinds >= {"rerun", "replace", "refuse", "throttle", "interleave", "settings"}
    assert kinds >= {"grow", "forge"}
    assert any(a.what == "delete" and a.orphan and a.linger > 0 for a in actions)
    assert {a.value for a in actions if a.what == "forge"} == {0, 1}  # bare, another Job's
    assert {a.job for a in actions if a.what == "settings"} >= {*ALL_TOGGLES, ""}
    assert any(a.what == "replace" and a.pods == 0 for a in actions)  # all members at once
    assert any(a.what == "delete" and a.linger > 0 for a in actions)
    assert any(a.what in ("unflap", "repair") and a.late for a in actions)
    assert any(a.queue == TEAM for a in actions)
    markers = {a.job.partition("@")[2] for a in actions if a.what == "create"}
    assert markers >= {"", "jobset", "pytorchjob", "podgroup"}
    # every change of the settings is undone before the horizon
    for h in histories:
        changes = [a for a in h.actions if a.what == "settings"]
        assert changes[-1].job == "" and changes[-1].at < h.horizon


def test_histories_with_every_trigger_converge_over_the_wire() -> None:
    seeds = range(500, 520)
    outcomes = [run_history(s, history=generate_triggers(s), wire=True) for s in seeds]
    assert {o.seed: o.divergences for o in outcomes if o.diverged} == {}


# --------------------------------------------------------------------------- not hollow


def first_divergence(seeds: range) -> Iterator[list[str]]:
    for seed in seeds:
        outcome = run_history(seed, history=generate_triggers(seed))
        if outcome.diverged:
            yield outcome.divergences


def noticed(seeds: range, what: str) -> bool:
    """Whether some history of `seeds` ends with a divergence saying `what`."""
    return any(any(what in p for p in problems) for problems in first_divergence(seeds))


def test_the_harness_notices_a_pass_that_misses_a_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN passes that trust the phase index alone (the ledger's holders ignored):
    # a gang turning Recovering between the index's Recovering and Running reads is
    # in neither, as interleaved passes let happen
    import muster.runtime.admission as admission

    original = admission.AdmissionPass._ledger

    def forgetful(self: admission.AdmissionPass) -> Ledger:
        return Ledger(original(self).version, {})

    monkeypatch.setattr(admission.AdmissionPass, "_ledger", forgetful)
    # THEN some history admits over the quota
    assert noticed(range(70), "quota exceeded")


def test_the_harness_notices_deadlines_left_unarmed_by_a_settings_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a control plane that owes no deadline after a settings change (neither the
    # "settings changed" request nor the sweeper acts on one)
    monkeypatch.setattr("muster.runtime.deadlines.owed_timer", lambda w, qs: None)
    # THEN gangs admitted under dryRun stay Admitted with no deadline
    assert noticed(range(20, 60), "with no deadline armed")


def test_the_harness_notices_a_pod_group_run_again_taken_for_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a core that never starts a new run of a pod group
    monkeypatch.setattr("muster.core.workloads.runs_again", lambda w, e: False)
    # THEN Muster follows an ended run while the cluster runs the next
    assert noticed(range(20), "Muster follows run")


def test_the_harness_notices_a_refused_release_quarantined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a runtime that retries a refused release until it quarantines the workload
    monkeypatch.setattr("muster.runtime.service._releases", lambda w, effect: False)
    # THEN a workload stays admitted with effects never carried out, holding its quota
    assert noticed(range(20), "stuck:")


def test_the_harness_notices_throttled_entries_taken_for_lasting_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a runtime for which no failure is transient (a throttled entry counts
    # towards quarantine)
    monkeypatch.setattr("muster.runtime.service.is_transient", lambda exc: False)
    # THEN some workload ends quarantined, or its view wrong
    assert any(first_divergence(range(30)))


def test_the_harness_notices_old_pods_counted_for_a_new_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN pod rules that credit any pod to the object under its name
    pods = importlib.import_module("muster.core.pods")
    monkeypatch.setattr(pods, "owned_by", lambda w, e: True)
    # THEN the terminating pods of a deleted Job count Ready for its successor
    assert noticed(range(20), "counted Ready for")


def test_the_harness_notices_a_cluster_that_keeps_what_was_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a cluster that never withdraws what the control plane evicts
    monkeypatch.setattr("muster.harness.cluster_truth.Truth.evict", lambda self, effect: None)
    # THEN what it has released exceeds the quota, though the store's holders do not
    assert noticed(range(20), "quota exceeded on the cluster")


def test_the_plain_histories_hold_no_attack() -> None:
    actions = [a for seed in range(30) for a in generate(seed).actions]
    assert not [a for a in actions if a.what in ("grow", "forge") or a.orphan]


def test_the_harness_notices_a_grown_job_kept_on_its_old_charge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a core that keeps a larger spec for the next eviction, as it once did
    monkeypatch.setattr("muster.core.workloads.outgrows", lambda w, spec: False)
    # THEN a Job runs more than it is charged for
    assert noticed(range(20), "(grew, kept)")


def test_the_harness_notices_an_orphaning_delete_that_frees_the_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a core that frees a deleted workload's quota at once, its pods running or not
    monkeypatch.setattr("muster.core.admission.outlived_by_pods", lambda w: False)
    # THEN what runs on the cluster exceeds the quota
    assert noticed(range(20), "quota exceeded on the cluster")


def test_the_harness_notices_forged_pods_counted_by_their_labels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an agent that takes a pod labelled with a Job's name for the Job's
    from muster.core import Kind

    def by_labels(pod: dict[str, Any]) -> tuple[Kind, str]:
        m = pod["metadata"]
        return Kind.JOB, f"{m['namespace']}/{m['labels']['job-name']}"

    monkeypatch.setattr("muster.harness.forged.pod_workload", by_labels)
    # THEN a bare forged pod counts Ready for the gang
    assert noticed(range(20), "of forged:")


def test_the_harness_notices_forged_pods_another_job_controls_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a core that credits a pod to the workload whoever controls it
    pods = importlib.import_module("muster.core.pods")
    monkeypatch.setattr(pods, "owned_by", lambda w, e: True)
    # THEN a pod that another Job of the tenant controls counts Ready for the gang
    assert noticed(range(20), "of forger-")


def test_a_lowered_quota_keeps_earlier_holders_and_admits_nothing_new_over_it() -> None:
    # GIVEN 8 GPUs held, then the quota lowered from 12 to 4
    from muster.core import Kind, WorkloadObserved

    store = MemoryStore()
    high = parse_settings({"gpuQuota": 12})
    log = [(0.0, high), (100.0, replace(high, gpu_quota=4))]
    now = [50.0]

    class Released:
        owners: dict[str, str] = {}
        objects: dict[str, object] = {}
        grown: list[object] = []
        lingering: dict[str, object] = {}

        def released_gpus(self, heard: object, told: int) -> Counter[str]:
            return Counter(default=8)

        def queue(self, key: str) -> str:
            return "default"

    watch = QuotaWatch(store, Released(), log, lambda: now[0])  # type: ignore[arg-type]
    plane = ControlPlane(
        store=store,
        timers=_Nothing(),
        messages=_Nothing(),
        bus=_Nothing(),
        metrics=_Nothing(),
        cluster=_Nothing(),
        settings=lambda: high,
        clock=lambda: now[0],
    )
    plane.handle(WorkloadObserved("ns/held", "default", 1, gpus=8, kind=Kind.JOB, seq=1))
    assert plane.admission_pass() == ["ns/held"]
    watch.admitting(Admit("ns/held", 1, Kind.JOB))
    # WHEN it is released after the change, or the step checks what is held
    now[0] = 150.0
    watch.released(Admit("ns/held", 1, Kind.JOB))
    watch.check()
    # THEN all is well: it was admitted before the change
    assert watch.problems == []
    # AND a new admission while over the lowered quota is seen
    watch.admitting(Admit("ns/new", 1, Kind.JOB))
    assert watch.problems == [
        "quota exceeded: ns/new admitted with 8 GPUs against the cluster's quota of 4 held"
    ]


class _Nothing:
    """A port that does nothing (and answers every call)."""

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None
