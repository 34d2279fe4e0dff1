"""Random cluster histories, perturbed, through the real control plane: the view stays true."""

from __future__ import annotations

import pytest
from muster.core import Outcome as EventOutcome
from muster.harness import Perturbation, generate, run_history
from muster.harness.perturb import NONE
from muster.runtime.memory import MemoryStore
from muster.runtime.service import ControlPlane

SEEDS = range(240)


@pytest.mark.parametrize("chunk", range(4))
def test_perturbed_histories_converge_to_the_truth(chunk: int) -> None:
    # GIVEN random histories (re-created Jobs, node failures and flaps, agent gaps with
    # deletions in them) whose events are duplicated, reordered, lost and redelivered late
    seeds = [s for s in SEEDS if s % 4 == chunk]
    # WHEN each is played through the control plane, then the agent relists
    outcomes = [run_history(seed) for seed in seeds]
    # THEN Muster's view equals the cluster's in every one of them
    diverged = {o.seed: o.divergences for o in outcomes if o.diverged}
    assert diverged == {}
    assert sum(o.events for o in outcomes) > 100 * len(seeds)
    faults = {k for o in outcomes for k in o.faults}
    assert faults >= {"duplicated", "lost", "unsent", "redelivered late"}


def test_histories_converge_under_heavy_faults() -> None:
    # 40% duplicated, 30% lost, reordered within 20 s, 30% redelivered minutes late
    heavy = Perturbation(duplicate=0.4, loss=0.3, window=20.0, redelivery=0.3)
    outcomes = [run_history(seed, perturbation=heavy) for seed in range(21000, 21040)]
    assert [o.divergences for o in outcomes if o.diverged] == []


def test_histories_converge_with_events_over_the_wire() -> None:
    # every event built by the schema's builders, sent as JSON and parsed by the ingest
    outcomes = [run_history(seed, wire=True) for seed in range(1000, 1040)]
    assert [o.divergences for o in outcomes if o.diverged] == []


def test_histories_converge_with_the_capacity_check_on() -> None:
    # node events report each node's GPUs; admission fits gangs onto them
    outcomes = [run_history(seed, capacity=True, wire=seed % 2 == 0) for seed in range(2000, 2040)]
    assert [o.divergences for o in outcomes if o.diverged] == []
    assert sum(o.events for o in outcomes) > 100 * len(outcomes)


@pytest.mark.parametrize("chunk", range(2))
def test_histories_converge_with_workload_faults_on(chunk: int) -> None:
    # GIVEN the same perturbed histories with failure-aware retry on, broken Jobs' pods
    # crash looping, some over the wire
    faults = {"limitCount": 1, "evictAfter": "20s"}
    seeds = [s for s in range(120) if s % 2 == chunk]
    stores = {seed: MemoryStore() for seed in seeds}
    outcomes = [
        run_history(seed, workload_faults=faults, wire=seed % 3 == 0, store=stores[seed])
        for seed in seeds
    ]
    workloads = [
        snap.workload
        for store in stores.values()
        for key in store.items
        if (snap := store.load(key)) is not None
    ]
    early = sum(
        n for w in workloads for k, n in w.evictions.items() if k.startswith("WorkloadFault")
    )
    stopped = sum(1 for w in workloads if w.reason == "WorkloadFaults")
    assert early >= 3 and stopped >= 10, (early, stopped)
    # THEN the view still converges, every fault timer is running or stopped as it
    # should be, and no healthy Job is ever deactivated as failing on its own
    assert [(o.seed, o.divergences) for o in outcomes if o.diverged] == []
    heavy = Perturbation(duplicate=0.4, loss=0.3, window=20.0, redelivery=0.3)
    more = [run_history(s, perturbation=heavy, workload_faults=faults) for s in range(30)]
    assert [(o.seed, o.divergences) for o in more if o.diverged] == []


def test_an_unperturbed_history_converges_too() -> None:
    assert not run_history(1, perturbation=NONE).diverged


def test_histories_have_what_the_faults_need() -> None:
    kinds = {a.what for seed in range(50) for a in generate(seed).actions}
    assert kinds >= {"create", "delete", "fail", "repair", "flap", "unflap", "gap", "resync"}
    recreated = sum(
        1
        for seed in range(50)
        for a, b in zip(generate(seed).actions, generate(seed).actions[1:], strict=False)
        if a.what == "delete" and b.what == "create" and a.job == b.job
    )
    assert recreated > 0


def test_the_harness_notices_a_control_plane_that_does_not_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a control plane that ignores the agent's listings
    monkeypatch.setattr(ControlPlane, "reconcile", lambda self, part: [EventOutcome.IGNORED])
    # WHEN histories with agent gaps run through it
    outcomes = [run_history(seed) for seed in range(60)]
    # THEN some end with workloads deleted in a gap still queued or holding GPUs
    problems = [p for o in outcomes for p in o.divergences]
    assert any("gone from the cluster" in p for p in problems)


def test_the_harness_notices_a_deleted_pod_coming_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN pod rules that forget tombstones and listings (a deleted pod's late event
    # recreates it)
    import importlib

    # (the runtime's pod path reaches them through the core's `observe_stored_pod`,
    # and `decide` through `observe_pod`: both look `pod_update` up in `muster.core.pods`)
    pods_module = importlib.import_module("muster.core.pods")
    original = pods_module.pod_update

    def forgetful(known, event, born=0, listed=None):  # type: ignore[no-untyped-def]
        return original(None if known is not None and known.deleted else known, event, born=born)

    monkeypatch.setattr(pods_module, "pod_update", forgetful)
    # WHEN late redeliveries are frequent
    heavy = Perturbation(redelivery=0.3)
    outcomes = [run_history(seed, perturbation=heavy) for seed in range(100, 160)]
    # THEN the harness sees pods in Muster that the cluster does not have
    assert any("in Muster" in p for o in outcomes for p in o.divergences)


def test_the_harness_notices_node_conditions_out_of_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN node rules that ignore the node events' order (every NotReady applies)
    import importlib
    from dataclasses import replace

    # (`decide` looks `observe_node` up in its own module)
    decide_module = importlib.import_module("muster.core.decide")
    original = decide_module.observe_node

    def unordered(w, e, qs, now):  # type: ignore[no-untyped-def]
        return original(w, replace(e, seq=0), qs, now)

    monkeypatch.setattr(decide_module, "observe_node", unordered)
    # WHEN node flaps are duplicated and redelivered late
    heavy = Perturbation(duplicate=0.4, loss=0.3, window=20.0, redelivery=0.3)
    outcomes = [run_history(seed, perturbation=heavy) for seed in range(0, 90, 3)]
    # THEN some healthy gangs are left Recovering in Muster's view
    assert any(
        "whole=True in the cluster but Recovering" in p for o in outcomes for p in o.divergences
    )


def test_histories_with_a_job_and_a_pytorchjob_of_one_name_converge() -> None:
    # GIVEN histories where some Jobs have a PyTorchJob of their name (another kind) next
    # to them, created, deleted and re-created apart, some events over the wire
    from muster.harness.histories import generate_shared_names

    outcomes = [
        run_history(seed, history=generate_shared_names(seed), wire=seed % 2 == 0)
        for seed in range(3000, 3040)
    ]
    # THEN Muster's view equals the cluster's: two workloads per name, each true
    assert [o.divergences for o in outcomes if o.diverged] == []


def test_the_harness_notices_a_listing_of_one_kind_deleting_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN reconciliation that forgets a snapshot is of one kind (a Job listing that
    # lacks the PyTorchJob of a Job's name finishes it)
    import muster.core.reconcile as reconcile
    from muster.core.model import Reason, WorkloadFinished
    from muster.harness.histories import generate_shared_names

    def kindless(w, snapshot):  # type: ignore[no-untyped-def]
        if w.phase.value == "Finished" or snapshot.scope == "Pod":
            return original(w, snapshot)
        if w.key in snapshot.workloads:
            return []
        return [WorkloadFinished(w.key, Reason.DELETED, snapshot.revision, uid=w.uid)]

    original = reconcile.gone
    monkeypatch.setattr("muster.runtime.reconciliation.gone", kindless)
    # WHEN such histories run
    outcomes = [run_history(seed, history=generate_shared_names(seed)) for seed in range(40)]
    # THEN the harness sees PyTorchJobs the cluster runs gone from Muster
    assert any(o.diverged for o in outcomes)
