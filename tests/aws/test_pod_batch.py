"""Pod events of one gang applied together (`ControlPlane.handle_pods`): the same gang and
the same lifecycle as one by one, in fewer writes; lost races applied again."""

from __future__ import annotations

import random

import pytest
from muster.core import Kind, Outcome, PodObserved
from muster.runtime.pod_batch import repairs_first
from muster.runtime.ports import MAX_POD_WRITES

from .conftest import Rig

KEY = "ns/train"
FAULTS = {"limitCount": 1, "evictAfter": "20s"}


def _script(rng: random.Random, gang: int) -> list[PodObserved]:
    """Every pod Pending, Running, Ready; some fail or go away again; duplicates and
    reordered events among them, as the agent's stream has."""
    events: list[PodObserved] = []
    seq = 10
    for step in range(4):
        for i in rng.sample(range(gang), gang):
            seq += 1
            name = f"train-{i}"
            uid = f"{name}-uid"
            if step == 0:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Pending")
            elif step == 1:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Running", node=f"n{i % 3}")
            elif step == 2:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Running", ready=True, node="n1")
            elif rng.random() < 0.3:
                e = PodObserved(
                    KEY, name, seq, uid=uid, phase="Failed", node="n1", terminated="Error"
                )
            elif rng.random() < 0.2:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Running", deleted=True)
            else:
                continue
            events.append(e)
            if rng.random() < 0.2:
                events.append(e)  # delivered twice
    for _ in range(len(events) // 4):  # neighbours swapped: reordered deliveries
        i = rng.randrange(len(events) - 1)
        events[i], events[i + 1] = events[i + 1], events[i]
    return events


def _chunks(rng: random.Random, events: list[PodObserved]) -> list[list[PodObserved]]:
    out, i = [], 0
    while i < len(events):
        n = rng.choice([1, 3, 10, 40, 100])
        out.append(events[i : i + n])
        i += n
    return out


def _rig(doc: dict, gang: int) -> Rig:
    rig = Rig(doc=dict(doc))
    rig.submit(KEY, gang)
    assert rig.admit() == [KEY]
    return rig


def _seen(rig: Rig) -> tuple:
    snap = rig.store.load(KEY)
    assert snap is not None
    return (
        snap.workload,
        snap.ready_count,
        snap.version,
        snap.epoch,
        rig.bus.events,
        rig.timers.started,
        rig.timers.stopped,
        rig.cluster.calls,
        rig.messages.requeues,
    )


@pytest.mark.parametrize("seed", range(24))
def test_a_batch_of_pod_events_leaves_the_gang_as_one_by_one_would(seed: int) -> None:
    # GIVEN two control planes holding the same admitted gang (some with workloadFaults,
    # some keeping a gang that lost a pod waiting)
    rng = random.Random(seed)
    gang = rng.choice([2, 5, 12])
    doc: dict = {"timeout": "60s", "recoveryTimeout": "0s" if seed % 3 == 0 else "60s"}
    if seed % 2:
        doc["workloadFaults"] = FAULTS
    one, many = _rig(doc, gang), _rig(doc, gang)
    chunks = _chunks(rng, _script(rng, gang))
    # WHEN one takes the pod events one at a time and the other in batches
    for chunk in chunks:
        for e in chunk:
            one.plane().handle(e)
        outcomes = many.plane().handle_pods(KEY, chunk)
        assert len(outcomes) == len(chunk)
        one.clock.now += 5
        many.clock.now += 5
    # THEN the stored gang, its version, the lifecycle events, timers and calls agree
    assert _seen(many) == _seen(one)
    assert many.metrics.counts == one.metrics.counts  # duplicates and stale ones alike


def test_a_burst_of_a_gang_s_pod_events_is_a_few_writes() -> None:
    # GIVEN an admitted gang of 64
    rig = _rig({"timeout": "60s"}, 64)
    writes = rig.store.writes
    plane = rig.plane()
    # WHEN its pods report Running then Ready, a hundred events at a time
    events = [
        PodObserved(
            KEY, f"train-{i}", 100 + i + 64 * ready, uid=f"u{i}", phase="Running", ready=ready
        )
        for ready in (False, True)
        for i in range(64)
    ]
    outcomes = [o for i in range(0, 128, 100) for o in plane.handle_pods(KEY, events[i : i + 100])]
    # THEN all are applied, the gang is Running, and every pod item was written twice at most
    assert outcomes == [Outcome.APPLIED] * 128
    assert rig.phase(KEY) == "Running"
    snap = rig.store.load(KEY)
    assert snap is not None and snap.ready_count == 64
    assert rig.store.writes - writes <= 2 * 64 + 2  # pods, the gang's transition


def test_several_events_of_one_pod_fold_into_one_write() -> None:
    rig = _rig({"timeout": "60s"}, 3)
    writes = rig.store.writes
    name = "train-0"
    events = [
        PodObserved(KEY, name, 11, uid="u", phase="Pending"),
        PodObserved(KEY, name, 13, uid="u", phase="Running", ready=True),
        PodObserved(KEY, name, 12, uid="u", phase="Running"),  # older: stale
        PodObserved(KEY, name, 13, uid="u", phase="Running", ready=True),  # again: duplicate
    ]
    outcomes = rig.plane().handle_pods(KEY, events)
    assert outcomes == [Outcome.APPLIED, Outcome.APPLIED, Outcome.STALE, Outcome.DUPLICATE]
    assert rig.store.writes - writes == 1
    snap = rig.store.load(KEY)
    assert snap is not None and snap.ready_count == 1
    assert snap.workload.pods[name].seq == 13 and snap.pod_revs[name] == 1


def test_a_lost_race_reads_the_pods_again_and_applies_the_run_again() -> None:
    # GIVEN a gang of 4 whose first write of the run loses a race
    rig = _rig({"timeout": "60s"}, 4)
    plane = rig.plane()
    events = [
        PodObserved(KEY, f"train-{i}", 20 + i, uid=f"u{i}", phase="Running", ready=True)
        for i in range(4)
    ]
    rig.store.conflict_next = 2
    # WHEN the run is applied
    outcomes = plane.handle_pods(KEY, events)
    # THEN it was read and applied again, once per lost race, and the gang counts every pod
    assert plane.stats.conflicts == 2
    assert outcomes == [Outcome.APPLIED] * 4
    assert rig.phase(KEY) == "Running"
    assert rig.bus.names(KEY).count("PodsReady") == 1
    snap = rig.store.load(KEY)
    assert snap is not None and snap.ready_count == 4


def test_a_run_that_keeps_losing_gives_up_and_leaves_nothing_half_written() -> None:
    from muster.runtime.results import TooManyConflicts

    rig = _rig({"timeout": "60s"}, 2)
    rig.store.conflict_next = 1000
    events = [PodObserved(KEY, "train-0", 20, uid="u", phase="Running", ready=True)]
    with pytest.raises(TooManyConflicts):
        rig.plane().handle_pods(KEY, [*events, PodObserved(KEY, "train-1", 21, uid="v")])
    rig.store.conflict_next = 0
    assert rig.store.load(KEY).ready_count == 0  # type: ignore[union-attr]
    assert rig.store.pods.get(KEY, {}) == {}


def test_a_run_larger_than_one_transaction_is_written_in_a_few() -> None:
    rig = _rig({"timeout": "60s"}, 250)
    writes: list[int] = []
    inner = rig.store.write_pods

    def write_pods(key, pods, epoch, delta, now=0.0, **kw):  # type: ignore[no-untyped-def]
        writes.append(len(pods))
        inner(key, pods, epoch, delta, now, **kw)

    rig.store.write_pods = write_pods  # type: ignore[method-assign]
    events = [
        PodObserved(KEY, f"train-{i}", 30 + i, uid=f"u{i}", phase="Pending") for i in range(250)
    ]
    assert rig.plane().handle_pods(KEY, events) == [Outcome.APPLIED] * 250
    assert writes == [MAX_POD_WRITES, MAX_POD_WRITES, 250 - 2 * MAX_POD_WRITES]


def test_an_unfinished_outbox_is_carried_out_by_the_one_event_way_then_the_run_goes_on() -> None:
    # GIVEN a gang whose admission left its outbox unfinished (the cluster failed once)
    rig = Rig()
    rig.submit(KEY, 3)
    rig.cluster.fail_next = RuntimeError("API down")
    rig.admit()
    snap = rig.store.load(KEY)
    assert snap is not None and snap.outbox
    # WHEN a run of pod events comes
    events = [
        PodObserved(KEY, f"train-{i}", 20 + i, uid=f"u{i}", phase="Pending") for i in range(3)
    ]
    outcomes = rig.plane().handle_pods(KEY, events)
    # THEN the outbox is carried out and every event applied
    assert outcomes == [Outcome.APPLIED] * 3
    snap = rig.store.load(KEY)
    assert snap is not None and not snap.outbox
    assert set(snap.workload.pods) == {"train-0", "train-1", "train-2"}
    assert ("admit", KEY, 1) in rig.cluster.calls


def test_a_pod_group_s_release_under_way_is_not_carried_out_again_by_its_pod_events() -> None:
    # GIVEN a pod group whose release is committed and still under way (its outbox holds
    # the release, and nothing failed)
    rig = Rig()
    rig.submit(KEY, 2, kind=Kind.POD_GROUP)
    gated = [PodObserved(KEY, f"g-{i}", 20 + i, uid=f"g{i}", phase="Pending") for i in range(2)]
    rig.plane().handle_pods(KEY, gated)
    release = rig.cluster.admit
    rig.cluster.admit = lambda effect: None  # type: ignore[method-assign]
    rig.store.clear_outbox = lambda key, version: None  # type: ignore[method-assign]
    assert rig.admit() == [KEY]
    snap = rig.store.load(KEY)
    assert snap is not None and snap.outbox and snap.failures == 0
    del rig.store.clear_outbox
    rig.cluster.admit = release  # type: ignore[method-assign]
    # WHEN more of its pods' events come meanwhile (a spare pod created, one scheduled)
    events = [
        PodObserved(KEY, "g-0", 30, uid="g0", phase="Pending", node="n1", scheduled=True),
        PodObserved(KEY, "g-1", 31, uid="g1", phase="Pending", node="n1", scheduled=True),
    ]
    assert rig.plane().handle_pods(KEY, events) == [Outcome.APPLIED] * 2
    # THEN they are applied without releasing the group again
    assert not any(call[0] == "admit" for call in rig.cluster.calls)
    # while a release that failed is carried out again by the next pod event
    assert repairs_first(snap.outbox, 1) and not repairs_first(snap.outbox, 0)


def test_pod_events_of_an_unknown_workload_are_not_yet_known() -> None:
    from muster.runtime.results import WorkloadNotYetKnown

    rig = Rig()
    with pytest.raises(WorkloadNotYetKnown):
        rig.plane().handle_pods(KEY, [PodObserved(KEY, "train-0", 5)])


def _group_steps(rng: random.Random, gang: int) -> list[list[PodObserved]]:
    """A pod group's pods created gated; then (once released) Ready; some lost and
    replaced (a new pod under a new name); some done: with duplicates and neighbours
    swapped within each step."""
    steps: list[list[PodObserved]] = []
    seq = 10
    names = [f"train-{i}" for i in range(gang)]
    for step in range(4):
        events: list[PodObserved] = []
        for name in rng.sample(names, len(names)):
            seq += 1
            uid = f"{name}-uid"
            if step == 0:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Pending")
            elif step == 1:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Running", ready=True, node="n1")
            elif step == 2 and rng.random() < 0.3:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Running", deleted=True)
                events.append(e)
                seq += 1
                spare = f"{name}-r"
                e = PodObserved(KEY, spare, seq, uid=f"{spare}-uid", phase="Pending")
            elif step == 3 and rng.random() < 0.2:
                e = PodObserved(KEY, name, seq, uid=uid, phase="Succeeded", node="n1")
            else:
                continue
            events.append(e)
            if rng.random() < 0.2:
                events.append(e)
        for _ in range(len(events) // 6):
            i = rng.randrange(len(events) - 1)
            events[i], events[i + 1] = events[i + 1], events[i]
        steps.append(events)
    return steps


def _with_spares(rng: random.Random, steps: list[list[PodObserved]], gang: int) -> None:
    """Pods beyond the gang created once it runs (a tenant adding to it), and members
    lost among them: the release has gated pods to choose from."""
    seq = 100_000
    for j in range(gang + rng.randrange(1, 4)):
        seq += 1
        steps[1].insert(
            rng.randrange(len(steps[1]) + 1),
            PodObserved(KEY, f"spare-{j}", seq, uid=f"s{j}", phase="Pending"),
        )
    for i in rng.sample(range(gang), rng.randrange(1, gang + 1)):
        seq += 1
        lost = PodObserved(
            KEY, f"train-{i}", seq, uid=f"train-{i}-uid", phase="Running", deleted=True
        )
        steps[3].insert(rng.randrange(len(steps[3]) + 1), lost)


@pytest.mark.parametrize("seed", range(18))
def test_a_pod_group_s_events_counted_live_lead_where_the_whole_gang_would(seed: int) -> None:
    # GIVEN two control planes with the same waiting pod group: one whose store counts
    # live pods (its events go the light way), one whose store does not (every event
    # loads the whole group, as for an item written before the count was kept)
    rng = random.Random(seed)
    gang = rng.choice([2, 5, 12])
    doc: dict = {"timeout": "60s", "recoveryTimeout": "0s" if seed % 3 == 0 else "60s"}
    light, whole = Rig(doc=dict(doc)), Rig(doc=dict(doc))
    for rig in (light, whole):
        rig.submit(KEY, gang, kind=Kind.POD_GROUP)
    whole.store.items[KEY].live_count = None
    loads = {id(light): 0, id(whole): 0}
    counting = 0
    for rig in (light, whole):
        inner = rig.store.load

        def counted(key: str, inner=inner, rig=rig):  # type: ignore[no-untyped-def]
            loads[id(rig)] += counting
            return inner(key)

        rig.store.load = counted  # type: ignore[method-assign]
    # WHEN both take the same batches, with an admission pass after each
    steps = _group_steps(rng, gang)
    if seed >= 12:  # pods beyond the gang
        _with_spares(rng, steps, gang)
    chunks = [c for step in steps for c in _chunks(rng, step) if c]
    events = sum(len(c) for c in chunks)
    for chunk in chunks:
        for rig in (light, whole):
            counting = 1
            assert len(rig.plane().handle_pods(KEY, chunk)) == len(chunk)
            counting = 0
            rig.admit()
            rig.clock.now += 5
    # THEN the group, its lifecycle, its timers and the cluster calls agree
    a, b = light.store.load(KEY), whole.store.load(KEY)
    assert a is not None and b is not None
    assert a.workload == b.workload and a.ready_count == b.ready_count
    assert light.bus.events == whole.bus.events
    assert (light.timers.started, light.timers.stopped) == (
        whole.timers.started,
        whole.timers.stopped,
    )
    assert light.cluster.calls == whole.cluster.calls
    assert light.messages.requeues == whole.messages.requeues
    # and the light store's live count is the group's live pods
    assert a.live_count == a.workload.live_pods
    assert b.live_count is None
    # having been admitted, the light way loading the whole group far less often
    # (the whole way: once an event)
    assert a.workload.attempt >= 1
    assert loads[id(whole)] >= events > loads[id(light)]
