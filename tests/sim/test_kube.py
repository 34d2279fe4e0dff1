"""The simulated cluster on its own: controllers, scheduler, kubelet, faults."""

from __future__ import annotations

import pytest
from muster.core import PodObserved
from muster.sim.kube import ClusterError, JobSpec, PodChange, SimulatedCluster, Wakeup


def changes(c: SimulatedCluster) -> list[PodChange]:
    out = [x for x in c.outbox if isinstance(x, PodChange)]
    c.outbox[:] = [x for x in c.outbox if not isinstance(x, PodChange)]
    return out


def wakeups(c: SimulatedCluster) -> list[Wakeup]:
    out = [x for x in c.outbox if isinstance(x, Wakeup)]
    c.outbox[:] = [x for x in c.outbox if not isinstance(x, Wakeup)]
    return out


def test_jobs_released_together_get_pods_interleaved_and_bind_first_fit():
    # GIVEN two 3-pod jobs of 8 GPUs on four 8-GPU nodes, released together
    c = SimulatedCluster(4, 8)
    for name in ("a", "b"):
        c.add_job(JobSpec(name, 3, 8, 30, 100))
        c.unsuspend(name)
    c.reconcile()
    created = changes(c)
    assert [p.pod for p in created] == ["a-0", "b-0", "a-1", "b-1", "a-2", "b-2"]
    # WHEN the scheduler runs
    assert c.bind_pending(0) == 4
    bound = {p.pod: p.node for p in changes(c)}
    # THEN pods bind in creation order to the first node with room; two fit nowhere
    assert bound == {"a-0": "node-0", "b-0": "node-1", "a-1": "node-2", "b-1": "node-3"}
    assert c.free_gpus == (0, 0, 0, 0)


def test_a_pod_that_fits_nowhere_is_skipped_and_the_next_one_tried():
    c = SimulatedCluster(1, 8)
    c.add_job(JobSpec("big", 1, 8, 0, 10))
    c.add_job(JobSpec("small", 1, 2, 0, 10))
    c.add_job(JobSpec("filler", 1, 7, 0, 10))
    for name in ("filler", "big", "small"):
        c.unsuspend(name)
        c.reconcile()
    c.bind_pending(0)
    assert {p.pod for p in changes(c) if p.node} == {"filler-0"}
    # big (8) does not fit in the 1 GPU left; small (2) neither; a later 1-GPU pod would
    c.add_job(JobSpec("tiny", 1, 1, 0, 10))
    c.unsuspend("tiny")
    c.reconcile()
    c.bind_pending(1)
    assert [p.pod for p in changes(c) if p.node] == ["tiny-0"]


def test_a_pod_change_is_the_event_the_core_is_given():
    # GIVEN a job released on the simulated cluster
    c = SimulatedCluster(1, 8)
    c.add_job(JobSpec("a", 1, 8, 30, 100))
    c.unsuspend("a")
    # WHEN its controller creates the pod and the scheduler binds it
    c.reconcile()
    c.bind_pending(0)
    # THEN each change is a PodObserved as a watcher reports it, in order
    seen = changes(c)
    assert all(type(p) is PodObserved for p in seen)
    assert [(p.workload, p.pod, p.phase, p.node, p.seq) for p in seen] == [
        ("a", "a-0", "Pending", None, 1),
        ("a", "a-0", "Running", "node-0", 2),
    ]
    assert all(p.scheduled is None and not p.deleted for p in seen)


def test_pod_uids_change_between_attempts_and_seq_increases():
    c = SimulatedCluster(1, 8)
    c.add_job(JobSpec("a", 1, 8, 5, 100))
    c.unsuspend("a")
    c.reconcile()
    c.bind_pending(0)
    first = changes(c)
    c.suspend("a", 3)
    deleted = changes(c)
    c.unsuspend("a")
    c.reconcile()
    c.bind_pending(3)
    second = changes(c)
    assert deleted[0].deleted and deleted[0].uid == first[0].uid
    assert first[0].pod == second[0].pod and first[0].uid != second[0].uid
    seqs = [x.seq for x in first + deleted + second]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_job_completes_after_run_seconds_of_whole_gang_and_pauses_while_broken():
    c = SimulatedCluster(3, 8)
    c.add_job(JobSpec("a", 2, 8, 10, 100))
    c.unsuspend("a")
    c.reconcile()
    c.bind_pending(0)
    ready = wakeups(c)
    assert [(w.at, w.what) for w in ready] == [(10, "ready"), (10, "ready")]
    for w in ready:
        assert c.pod_ready("a", str(w.ref), 10)
    (done,) = wakeups(c)
    assert (done.at, done.what) == (110, "complete")
    # a node fault at 40 takes a pod: the completion at 110 no longer counts
    node = next(p.node for p in changes(c) if p.node)
    assert node == "node-0"
    assert c.fail_node(node, 40) == ["a"]
    assert not c.complete("a", int(done.ref), 110)
    c.reconcile()
    c.bind_pending(40)  # the replacement goes to the spare node
    (again,) = wakeups(c)
    assert c.pod_ready("a", str(again.ref), again.at)
    (final,) = wakeups(c)
    assert final.at == 50 + 70  # 30 s done before the fault, 70 s left
    assert c.complete("a", int(final.ref), final.at)
    assert c.free_gpus == (0, 8, 8)  # all GPUs back, but node-0 is still down


def test_gpu_accounting_splits_useful_from_held_by_incomplete_gangs():
    c = SimulatedCluster(2, 8)
    c.add_job(JobSpec("a", 2, 8, 10, 100))
    c.unsuspend("a")
    c.reconcile()
    c.bind_pending(0)
    for w in wakeups(c):
        c.pod_ready("a", str(w.ref), 10)
    c.finish_accounting(60)
    assert c.held_gpu_seconds == 16 * 60
    assert c.useful_gpu_seconds == 16 * 50


def test_unknown_job_or_node_is_a_clear_error():
    c = SimulatedCluster(1, 8)
    with pytest.raises(ClusterError, match="no job 'x'"):
        c.unsuspend("x")
    with pytest.raises(ClusterError, match="no node 'node-5'"):
        c.fail_node("node-5", 0)


def test_pods_lost_with_a_node_are_recreated_in_creation_order_after_existing_pods():
    # GIVEN "z" created before "a", both with a pod on node-0, and a pending pod of "p"
    c = SimulatedCluster(2, 4)
    for name, gpus in (("z", 2), ("a", 2), ("p", 4), ("q", 4)):
        c.add_job(JobSpec(name, 1, gpus, 5, 100))
        c.unsuspend(name)
        c.reconcile()
    c.bind_pending(0)
    assert {x.pod: x.node for x in changes(c) if x.node} == {
        "z-0": "node-0",
        "a-0": "node-0",
        "p-0": "node-1",
    }
    # WHEN node-0 fails
    assert c.fail_node("node-0", 10) == ["z", "a"]
    c.reconcile()
    recreated = [x.pod for x in changes(c) if not x.deleted]
    # THEN z's pod comes back before a's (creation order, not names), both after q's
    assert recreated == ["z-0", "a-0"]
    c.repair_node("node-0", 20)
    c.bind_pending(20)
    assert [x.pod for x in changes(c) if x.node == "node-0"] == ["q-0"]


def test_simulated_actions_carry_out_the_cores_admit_and_evict():
    from muster.core import Admit, Evict, Kind, Reason
    from muster.runtime.ports import ClusterActions
    from muster.sim.engine import SimulatedActions

    c = SimulatedCluster(1, 8)
    c.add_job(JobSpec("a", 2, 4, 5, 100))
    actions: ClusterActions = SimulatedActions(c, lambda: 7.0)
    actions.admit(Admit("a", 1, Kind.JOB))
    c.reconcile()
    c.bind_pending(0)
    assert c.free_gpus == (0,)
    changes(c)
    actions.evict(Evict("a", 1, Kind.JOB, Reason.PODS_READY_TIMEOUT, Reason.WAIT_FOR_START))
    assert c.free_gpus == (8,)
    assert all(x.deleted for x in changes(c))


# --------------------------------------------------------------------------- failure modes


def _bound(failure: str, startup: float = 30) -> tuple[SimulatedCluster, str]:
    c = SimulatedCluster(1, 8)
    c.add_job(JobSpec("bad", 1, 8, startup, 100, never_ready=True, failure=failure))
    c.unsuspend("bad")
    c.reconcile()
    c.bind_pending(0)
    uid = changes(c)[-1].uid
    return c, uid


def test_an_image_that_cannot_be_pulled_shows_only_after_the_startup_time():
    # GIVEN a bound pod whose image cannot be pulled, startup 30 s
    c, uid = _bound("ImagePullBackOff")
    # THEN until then it is merely creating its container
    (wake,) = wakeups(c)
    assert (wake.at, wake.what) == (30, "fault")
    # WHEN the pull fails
    assert c.pod_fault("bad", uid, 30)
    (change,) = changes(c)
    # THEN the kubelet's reason shows, and nothing more is scheduled
    assert (change.phase, change.waiting, change.reason) == (
        "Pending",
        "ImagePullBackOff",
        "ImagePullBackOff",
    )
    assert "Back-off pulling image" in (change.message or "")
    assert wakeups(c) == []


def test_a_crash_loop_restarts_with_the_kubelets_back_off():
    c, uid = _bound("CrashLoopBackOff", startup=30)
    seen: list[tuple[float, str | None, int]] = []
    now = 0.0
    for _ in range(10):
        pending = wakeups(c)
        if not pending:
            break
        (wake,) = pending
        now = wake.at
        assert c.pod_fault("bad", uid, now)
        (change,) = changes(c)
        seen.append((now, change.waiting, change.restarts))
    # exits 30 s after binding, restarted 10 s later, exits 5 s after that, restarted
    # after 20 s; from the second restart on its state no longer changes its class
    assert seen == [
        (30, "CrashLoopBackOff", 0),
        (40, None, 1),
        (45, "CrashLoopBackOff", 1),
        (65, None, 2),
    ]


def test_wasted_gpu_time_is_kept_per_failure_mode():
    c = SimulatedCluster(2, 8)
    c.add_job(JobSpec("ok", 1, 8, 10, 100))
    c.add_job(JobSpec("bad", 1, 8, 10, 100, never_ready=True, failure="CrashLoopBackOff"))
    for name in ("ok", "bad"):
        c.unsuspend(name)
    c.reconcile()
    c.bind_pending(0)
    ok_uid = next(p.uid for p in changes(c) if p.workload == "ok")
    c.pod_ready("ok", ok_uid, 10)
    c.finish_accounting(100)
    assert c.held_by == {"": 800.0, "CrashLoopBackOff": 800.0}
    assert c.useful_by == {"": 720.0}


def test_room_freed_on_an_earlier_node_is_the_first_fit_again():
    # GIVEN three 8-GPU nodes filled by 4-GPU pods of six one-pod jobs
    c = SimulatedCluster(3, 8)
    for i in range(6):
        c.add_job(JobSpec(f"j{i}", 1, 4, 30, 100))
        c.unsuspend(f"j{i}")
        c.reconcile()
    c.bind_pending(0)
    assert {p.pod: p.node for p in changes(c) if p.node} == {
        "j0-0": "node-0",
        "j1-0": "node-0",
        "j2-0": "node-1",
        "j3-0": "node-1",
        "j4-0": "node-2",
        "j5-0": "node-2",
    }
    # WHEN a pod on node-2 and then one on node-0 go, and node-1 fails and is repaired
    c.suspend("j5", 1)
    c.suspend("j1", 2)
    c.fail_node("node-1", 3)
    c.repair_node("node-1", 4)
    changes(c)
    # THEN pods go, in creation order, to the lowest-numbered node with room: the
    # recreated pods of node-1 first, an 8-GPU pod fits nowhere and is passed over
    for name, gpus in (("k0", 8), ("k1", 4), ("k2", 4), ("k3", 4)):
        c.add_job(JobSpec(name, 1, gpus, 30, 100))
        c.unsuspend(name)
        c.reconcile()
    c.bind_pending(5)
    assert {p.pod: p.node for p in changes(c) if p.node and not p.deleted} == {
        "j2-0": "node-0",
        "j3-0": "node-1",
        "k1-0": "node-1",
        "k2-0": "node-2",
    }
    assert c.free_gpus == (0, 0, 0)
