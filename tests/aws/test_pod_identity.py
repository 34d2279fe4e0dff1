"""Whose pods are whose, through the control plane, on the in-memory store and on
DynamoDB (moto): a deleted Job's terminating pods never count for the Job
re-created under its name; a pod group run again under its name is a new run;
a pod group with no pods at its admission is not finished."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from muster.core import (
    Kind,
    Outcome,
    PodObserved,
    Reason,
    WorkloadFinished,
    WorkloadObserved,
)
from muster.runtime.memory import MemoryStore

from tests.aws.stores import dynamo_store, raw_items

from .conftest import Rig

KEY = "ns/train"
GROUP = "ns/grp"


@pytest.fixture(params=["memory", "dynamodb"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    if request.param == "memory":
        yield Rig()
        return
    with dynamo_store("identity") as store:
        yield Rig(store=store)  # type: ignore[arg-type]


def pod(key: str, name: str, seq: int, *, ready: bool, owner: str = "", **kw: object):
    phase = kw.pop("phase", "Running" if ready else "Pending")
    node = kw.pop("node", "n1" if ready else None)
    return PodObserved(
        key, name, seq, uid=f"{name}-uid", phase=phase, ready=ready, node=node, owner=owner, **kw
    )  # type: ignore[arg-type]


def owners(rig: Rig, key: str) -> dict[str, str]:
    """The `owner` of each pod item the store holds for `key`."""
    if isinstance(rig.store, MemoryStore):
        return {n: v[3] for n, v in rig.store.pods.get(key, {}).items()}
    items = raw_items(rig.store, key)  # type: ignore[arg-type]
    return {
        i["sk"]["S"].removeprefix("POD#"): i["owner"]["S"]
        for i in items
        if i["sk"]["S"].startswith("POD#")
    }


def test_a_deleted_jobs_terminating_pods_do_not_count_for_the_re_created_one(rig: Rig):
    # GIVEN a running Job, deleted and re-created under its name, the new one admitted
    plane = rig.plane()
    plane.handle(WorkloadObserved(KEY, "default", 2, seq=10, uid="job-1"))
    assert rig.admit() == [KEY]
    for i in range(2):
        plane.handle(pod(KEY, f"train-a{i}", 11 + i, ready=True, owner="job-1"))
    assert rig.phase(KEY) == "Running"
    plane.handle(WorkloadFinished(KEY, Reason.DELETED, 20, uid="job-1"))
    plane.handle(WorkloadObserved(KEY, "default", 2, seq=30, uid="job-2"))
    assert rig.admit() == [KEY]
    started = rig.timers.started[-1][1]
    # WHEN the old pods, still terminating and Ready, report after the new object was seen
    outcomes = [
        plane.handle(pod(KEY, f"train-a{i}", 31 + i, ready=True, owner="job-1")) for i in range(2)
    ]
    # ... one by one and as a batch
    batch = plane.handle_pods(
        KEY, [pod(KEY, f"train-a{i}", 33 + i, ready=True, owner="job-1") for i in range(2)]
    )
    # THEN they are not the new object's: it stays Admitted, its start timer running;
    # they are the old one's, kept on its holding (charged until they end)
    assert outcomes == [[Outcome.APPLIED], [Outcome.APPLIED]] and set(batch) == {Outcome.APPLIED}
    assert rig.phase(KEY) == "Admitted"
    assert rig.timers.name(KEY, started) in rig.timers.running
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.pods == {}
    (held,) = snap.workload.predecessors
    assert held.uid == "job-1" and {n: p.seq for n, p in held.pods.items()} == {
        "train-a0": 33,
        "train-a1": 34,
    }
    # AND a pod of an object it holds nothing of is stale
    assert plane.handle(pod(KEY, "train-z", 36, ready=True, owner="job-0")) == [Outcome.STALE]
    # WHEN its own pods turn Ready THEN it runs, and every pod item it wrote is its own
    for i in range(2):
        plane.handle(pod(KEY, f"train-b{i}", 40 + i, ready=True, owner="job-2"))
    assert rig.phase(KEY) == "Running"
    mine = {n: o for n, o in owners(rig, KEY).items() if n.startswith("train-b")}
    assert mine == {"train-b0": "job-2", "train-b1": "job-2"}


def group(seq: int) -> WorkloadObserved:
    return WorkloadObserved(GROUP, "default", 2, kind=Kind.POD_GROUP, seq=seq)


def test_a_pod_group_run_again_under_its_name_is_admitted_as_a_new_run(rig: Rig):
    # GIVEN a pod group that ran and succeeded
    plane = rig.plane()
    plane.handle(group(10))
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-a{i}", 11 + i, ready=False))
    assert rig.admit() == [GROUP]
    old_timer = rig.timers.started[-1][1]
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-a{i}", 13 + i, ready=True))
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-a{i}", 15 + i, ready=False, phase="Succeeded"))
    plane.handle(WorkloadFinished(GROUP, Reason.SUCCEEDED, 20))
    assert rig.phase(GROUP) == "Finished"
    old_uid = rig.store.load(GROUP).workload.uid  # type: ignore[union-attr]
    # WHEN a new run's gated pods appear, reported before the group itself
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-b{i}", 30 + i, ready=False))
    plane.handle(group(32))
    # THEN it is a new run: queued with its pods, admitted at attempt 1 under a new identity
    snap = rig.store.load(GROUP)
    assert snap is not None and snap.workload.phase.value == "Pending"
    assert snap.workload.uid != old_uid and snap.workload.live_pods == 2
    assert rig.admit() == [GROUP]
    snap = rig.store.load(GROUP)
    assert snap is not None and snap.workload.attempt == 1 and rig.phase(GROUP) == "Admitted"
    # with timers named apart from the old run's
    new_timer = rig.timers.started[-1][1]
    assert rig.timers.name(GROUP, new_timer) != rig.timers.name(GROUP, old_timer)
    # and its pods stored as its own
    mine = {n: o for n, o in owners(rig, GROUP).items() if n.startswith("grp-b")}
    assert mine == {"grp-b0": snap.workload.uid, "grp-b1": snap.workload.uid}
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-b{i}", 40 + i, ready=True))
    assert rig.phase(GROUP) == "Running"


def test_a_pod_group_without_pods_at_its_admission_waits_for_its_replacements(rig: Rig):
    # GIVEN a pod group whose pods are all being replaced as it is admitted
    plane = rig.plane()
    plane.handle(group(10))
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-a{i}", 11 + i, ready=False))
    rig.cluster.gone.add(GROUP)  # releasing it finds no pods
    # WHEN it is admitted
    assert rig.admit() == [GROUP]
    # THEN it is not finished: admitted, its start timer running
    assert rig.phase(GROUP) == "Admitted"
    assert rig.timers.name(GROUP, rig.timers.started[-1][1]) in rig.timers.running
    # and once its replacements show up they are released and it runs
    rig.cluster.gone.discard(GROUP)
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-a{i}", 13 + i, ready=False, deleted=True))
        plane.handle(pod(GROUP, f"grp-c{i}", 15 + i, ready=False))
    assert ("admit", GROUP, 1) in rig.cluster.calls
    for i in range(2):
        plane.handle(pod(GROUP, f"grp-c{i}", 17 + i, ready=True))
    assert rig.phase(GROUP) == "Running"
