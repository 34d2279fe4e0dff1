"""A Job deleted with its pods orphaned and re-created under its name while they run,
played through the control plane on the cluster model: the orphans' GPUs stay
charged to their queue until they end, whether the deletion, the new object or the
orphans' reports come first, and the quota holds counting what runs."""

from __future__ import annotations

import pytest
from muster.harness import run_history
from muster.harness.histories import TEAM, Action, History
from muster.harness.perturb import NONE, Perturbation
from muster.runtime.memory import MemoryStore

JOB = "ml/job0"
ORPHANED_AT, LINGER = 60.0, 100.0


def job(at: float) -> Action:
    """8 GPUs (2 pods of 4) in the `team` queue, whose quota is 12."""
    return Action(at, "create", job=JOB, pods=2, gpus_per_pod=4, startup=3.0, queue=TEAM)


GAPS_ONLY = Perturbation(duplicate=0.0, loss=0.0, window=0.0, redelivery=0.0, gaps=True)


def play(*actions: Action, gaps: bool = False) -> tuple[list[str], list[dict[str, object]]]:
    """The history's divergences, and the Job's history at the control plane (no faults
    but the history's agent gaps, with `gaps`)."""
    history = History(1, 3, 4, 400.0, tuple(sorted(actions, key=lambda a: a.at)), ((TEAM, 12),))
    store = MemoryStore()
    perturbation = GAPS_ONLY if gaps else NONE
    outcome = run_history(1, perturbation=perturbation, history=history, store=store)
    return outcome.divergences, store.history(JOB)


def admitted_after_the_last_submission(entries: list[dict[str, object]]) -> list[float]:
    last = max(i for i, e in enumerate(entries) if e["event"] == "Submitted")
    return [float(e["at"]) for e in entries[last:] if e["event"] == "Admitted"]  # type: ignore[arg-type]


def test_a_job_recreated_while_its_orphans_run_waits_for_them() -> None:
    # GIVEN an 8-GPU Job running in a queue of 12 GPUs, deleted with `--cascade=orphan`
    # (its pods run on for 100 s) and re-created a second later asking for 8 GPUs
    delete = Action(ORPHANED_AT, "delete", job=JOB, linger=LINGER, orphan=True)
    divergences, entries = play(job(0.0), delete, job(ORPHANED_AT + 1))
    # THEN the quota held throughout, counting the orphans as they ran
    assert divergences == []
    # AND the new object was admitted only once the orphans had ended
    admitted = admitted_after_the_last_submission(entries)
    assert admitted and admitted[0] >= ORPHANED_AT + LINGER, admitted


LATE_ORPHANED_AT = 90.0


def heard_late() -> tuple[list[str], list[dict[str, object]]]:
    """A never-ready Job of 12 GPUs holds the queue, ours (8 GPUs) queued behind it,
    and an agent gap from 2 s to 150 s: the first is evicted at its deadline (60 s)
    and ours admitted, its pods bound, deleted with them orphaned and re-created,
    all unheard (its own deadline finds it gone, no pod of it known)."""
    blocker = Action(
        0.0,
        "create",
        job="ml/big",
        pods=3,
        gpus_per_pod=4,
        startup=1.0,
        never_ready=True,
        queue=TEAM,
    )
    gap = Action(2.0, "gap", until=150.0)
    delete = Action(LATE_ORPHANED_AT, "delete", job=JOB, linger=LINGER, orphan=True)
    return play(blocker, job(1.0), gap, delete, job(LATE_ORPHANED_AT + 1), gaps=True)


def test_orphans_first_heard_of_after_the_new_object_are_charged() -> None:
    divergences, entries = heard_late()
    orphaned = LATE_ORPHANED_AT
    # WHEN the new agent lists: the new object first, the orphans after
    # THEN the orphans, heard of after the new object, are charged until they end
    assert divergences == []
    admitted = admitted_after_the_last_submission(entries)
    assert admitted and admitted[0] >= orphaned + LINGER, admitted


# --------------------------------------------------------------------------- not hollow


def test_the_harness_notices_a_recreation_that_drops_the_orphans_charge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a core whose new object under a name takes nothing over from the old one
    monkeypatch.setattr("muster.core.workloads.handed_over", lambda w: ())
    # THEN the re-created Job runs beside the orphans, past the queue's quota
    delete = Action(ORPHANED_AT, "delete", job=JOB, linger=LINGER, orphan=True)
    divergences, _ = play(job(0.0), delete, job(ORPHANED_AT + 1))
    assert any("quota exceeded on the cluster" in d for d in divergences), divergences


def test_the_harness_notices_orphans_heard_late_left_out_of_the_ledger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a runtime that does not name a holding that starts again in the ledger
    monkeypatch.setattr("muster.runtime.holding.starts_holding", lambda *a: False)
    # THEN passes do not count the orphans heard of after the new object
    divergences, _ = heard_late()
    assert any("quota exceeded on the cluster" in d for d in divergences), divergences


# --------------------------------------------------------------------------- agent gap

OTHER = "ml/job1"
GAP_FROM, GAP_UNTIL, ORPHANS_END = 50.0, 120.0, 180.0


def orphaned_in_a_gap() -> tuple[list[str], list[dict[str, object]]]:
    """Our 8-GPU Job running and another of 8 GPUs queued behind it (quota 12); an agent
    gap from 50 s to 120 s in which ours is deleted with its pods orphaned (they run on
    until 180 s): the new agent finds them without an owner, the Job gone."""
    other = Action(10.0, "create", job=OTHER, pods=2, gpus_per_pod=4, startup=3.0, queue=TEAM)
    gap = Action(GAP_FROM, "gap", until=GAP_UNTIL)
    delete = Action(ORPHANED_AT, "delete", job=JOB, linger=ORPHANS_END - ORPHANED_AT, orphan=True)
    history = History(1, 3, 4, 400.0, (job(0.0), other, gap, delete), ((TEAM, 12),))
    store = MemoryStore()
    outcome = run_history(1, perturbation=GAPS_ONLY, history=history, store=store)
    return outcome.divergences, store.history(OTHER)


def test_orphans_an_agent_finds_after_a_gap_stay_charged_until_they_end() -> None:
    divergences, entries = orphaned_in_a_gap()
    # THEN the quota held, and the queued Job was admitted only once the orphans ended
    assert divergences == []
    admitted = [float(e["at"]) for e in entries if e["event"] == "Admitted"]  # type: ignore[arg-type]
    assert admitted and admitted[0] >= ORPHANS_END, admitted


def test_the_harness_notices_orphans_an_agent_cannot_map_after_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an agent that does not know an ownerless pod by its labels
    monkeypatch.setattr("muster.harness.cluster_truth.orphaned_from", lambda pod: None)
    # THEN the queued Job runs beside the orphans, past the queue's quota
    divergences, _ = orphaned_in_a_gap()
    assert any("quota exceeded on the cluster" in d for d in divergences), divergences
