"""The workload item stays small whatever the gang's size: no pods, no pod listing.

A 4,096-pod gang whose pods have 60-character names, listed in full: today's
listing (name -> uid) alone would be about 400 KB, DynamoDB's item limit.
"""

from __future__ import annotations

import pytest
from muster.core import Kind, Outcome, Phase, Pod, PodsListed, Workload
from muster.runtime.codec import dumps

from tests.aws.conftest import Rig
from tests.aws.stores import dynamo_store, item_size, raw_items

KEY = "research-team/llama-pretraining-run"
GANG = 4096
BUDGET = 16 * 1024


def _name(i: int) -> str:
    return f"llama-pretraining-run-worker-{i:05d}-".ljust(60, "x")


def _uid(i: int) -> str:
    return f"4f1c9a2e-{i:04x}-4b6e-9d2a-{i:012x}"


@pytest.mark.slow
def test_a_4096_pod_gang_listed_in_full_keeps_its_workload_item_under_16_kb(capsys):
    with dynamo_store() as store:
        rig = Rig(store=store)  # type: ignore[arg-type]
        # GIVEN a Running gang of 4,096 pods, every pod stored (60-character names)
        gang = Workload(
            key=KEY, queue="default", gang_size=GANG, gpus=GANG * 8, kind=Kind.JOB, uid="job-1"
        )
        gang = Workload(**{**gang.__dict__, "phase": Phase.RUNNING, "attempt": 1})
        store.write_workload(None, gang, 0, (), 1.0)
        pods = {
            _name(i): Pod(_name(i), 10 + i, _uid(i), "Running", True, f"node-{i // 8:04d}")
            for i in range(GANG)
        }
        names = list(pods)
        # (written as the store writes them, in batches: moto copies the table per transaction)
        for start in range(0, GANG, 25):
            requests = [
                {"PutRequest": {"Item": store._pod_item(KEY, n, pods[n], 1, 0, "job-1", 1.0)}}
                for n in names[start : start + 25]
            ]
            store.client.batch_write_item(RequestItems={store.table: requests})
        # WHEN a complete listing names all 4,096, and then one that lists 96 of them
        # under new uids (replaced pods), through the control plane
        listed = {n: p.uid for n, p in pods.items()}
        assert rig.plane().handle(PodsListed(KEY, 100_000, listed)) == [Outcome.APPLIED]
        steady = raw_items(store, KEY)
        replaced = {n: f"new-{i}" for i, n in enumerate(names[:96])}
        assert rig.plane().handle(PodsListed(KEY, 100_001, {**listed, **replaced})) == [
            Outcome.APPLIED
        ]
        items = raw_items(store, KEY)
        state = next(i for i in items if i["sk"]["S"] == "STATE")
        size = item_size(state)
        with capsys.disabled():
            listing = len(dumps(listed).encode())
            print(f"\nworkload item of a {GANG}-pod gang after a full listing: {size} bytes")
            print(f"(the listing it no longer holds: {listing} bytes of JSON)")
        # THEN the workload item is under 16 KB and holds the listing's revision only
        assert size < BUDGET
        snap = store.load(KEY)
        assert snap is not None and snap.workload.listed_seq == 100_001
        # AND the steady-state listing stamped no pod item; the second stamped the
        # 96 replaced pods (their tombstones) and nothing else
        assert not any("listedRev" in i for i in steady)
        stamped = {i["sk"]["S"].removeprefix("POD#") for i in items if "listedRev" in i}
        assert stamped == set(replaced)
        # AND the store gives the core back the listing as the core had it
        assert {n: snap.workload.listed[n] for n in replaced} == replaced
        assert all(snap.workload.listed[n] == listed[n] for n in names[96:])


def test_a_4096_pod_predecessors_holding_keeps_the_workload_item_small() -> None:
    # GIVEN a 4,096-pod Job re-created under its name while its pods still run (a
    # Job controller's names: the Job's, the completion index, a random suffix)
    import random

    from muster.core import Holding
    from muster.runtime.codec import decode_workload, encode_workload

    draw = random.Random(7)
    letters = "bcdfghjklmnpqrstvwxz2456789"
    pods = {}
    for i in range(GANG):
        name = f"llama-pretraining-run-{i}-{''.join(draw.choices(letters, k=5))}"
        ended = i % 3 == 0
        pods[name] = Pod(name, 7_000_000 + 17 * i, _uid(i), "Failed" if ended else "Running")
    held = Holding("job-1", "default", GANG * 8, pods)
    w = Workload(KEY, "default", GANG, gpus=GANG * 8, uid="job-2", predecessors=(held,))
    # WHEN its record is encoded for the workload item
    doc = encode_workload(w)
    size = len(dumps(doc).encode())
    # THEN the holding takes well under DynamoDB's 400 KB item limit
    assert size < 64 * 1024, size
    # AND decodes to what deciding on the pods' later events needs: each pod's
    # revision, and whether it ended
    (back,) = decode_workload(doc).predecessors
    assert (back.uid, back.queue, back.gpus) == ("job-1", "default", GANG * 8)
    assert {n: (p.seq, p.deleted) for n, p in back.pods.items()} == {
        n: (p.seq, p.phase == "Failed") for n, p in pods.items()
    }
    # (a small one is stored plainly)
    few = Holding("job-1", "default", 8, dict(list(pods.items())[:2]))
    assert (
        "pods"
        in encode_workload(Workload(KEY, "default", 1, predecessors=(few,)))["predecessors"][0]
    )
