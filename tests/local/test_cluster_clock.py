"""The local mode's simulated cluster keeps the scenario's clock on a busy machine.

A step carried out late (the loop that plays the cluster came round late) happens at
its own time in the scenario, and what it schedules (a pod's Ready, a run's end) is
due from that time: one late step does not push back the steps after it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from muster.core import Admit, Evict, Kind, Reason
from muster.local.cluster import LocalCluster, workload_key
from muster.schema import POD_OBSERVED, WORKLOAD_OBSERVED

from tests.local.test_node_faults import Clock, Sent
from tests.sim.conftest import scenario

STORY = """
cluster: {nodes: 1, gpusPerNode: 8}
workloads: [{name: a, pods: 1, gpusPerPod: 8, startupSeconds: 2, runSeconds: 10}]
"""


def admitted(clock: Clock, sent: Sent) -> LocalCluster:
    """`a` submitted and admitted at second 0: its pod is due Ready at 2 s, its run ends at 12 s."""
    cluster = LocalCluster(scenario(STORY), sent, clock=clock)
    cluster.start()
    cluster.step()
    cluster.admit(Admit(workload_key("a"), 1, Kind.JOB))
    return cluster


def seconds_into(cluster: LocalCluster, entry: Any) -> float:
    at = datetime.fromisoformat(entry.detail["observedAt"].replace("Z", "+00:00"))
    return at.timestamp() - datetime.fromtimestamp(cluster.started_at, UTC).timestamp()


def test_a_late_step_does_not_push_back_the_next() -> None:
    clock, sent = Clock(), Sent()
    cluster = admitted(clock, sent)
    # WHEN the step that makes the pod Ready comes 3 s late (at 5 s, not 2 s)
    clock.now = 5.0
    cluster.step()
    ready = [e for e in sent.entries if e.detail_type == POD_OBSERVED and e.detail["ready"]]
    assert len(ready) == 1
    # THEN the pod was Ready at 2 s, as the agent reports it
    assert seconds_into(cluster, ready[0]) == 2.0
    # AND the run still ends at 12 s on the scenario's clock (2 s + 10 s), not at 15 s
    clock.now = 11.9
    cluster.step()
    assert "a" not in cluster.finished
    clock.now = 12.0
    cluster.step()
    assert "a" in cluster.finished
    (done,) = [
        e
        for e in sent.entries
        if e.detail_type == WORKLOAD_OBSERVED and e.detail["status"] == "Succeeded"
    ]
    assert seconds_into(cluster, done) == 12.0
    # AND the GPU time is the scenario's: 8 GPUs for 10 s of useful work
    assert cluster.kube.useful_gpu_seconds == 80.0


def test_a_step_long_overdue_plays_each_instant_at_its_own_time() -> None:
    clock, sent = Clock(), Sent()
    cluster = admitted(clock, sent)
    # WHEN no step comes round until long after the run should have ended
    clock.now = 30.0
    cluster.step()
    # THEN the pod's Ready and the run's end both happened, each at its own time
    assert "a" in cluster.finished
    times = {
        (e.detail_type, e.detail.get("status") or e.detail.get("ready")): seconds_into(cluster, e)
        for e in sent.entries
    }
    assert times[(POD_OBSERVED, True)] == 2.0
    assert times[(WORKLOAD_OBSERVED, "Succeeded")] == 12.0
    assert cluster.kube.useful_gpu_seconds == 80.0


def test_an_eviction_finds_the_cluster_where_the_scenario_has_it() -> None:
    clock, sent = Clock(), Sent()
    cluster = admitted(clock, sent)
    # WHEN the control plane evicts at 5 s before any step played the pod's Ready (2 s)
    clock.now = 5.0
    cluster.evict(Evict(workload_key("a"), 1, Kind.JOB, Reason.PODS_READY_TIMEOUT, None))
    # THEN the pod was Ready from 2 s and ran until the eviction at 5 s
    assert cluster.kube.useful_gpu_seconds == 3 * 8.0


class Timed(Sent):
    """What was sent, each with the moment (the cluster's clock) it went."""

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self.clock = clock
        self.at: list[tuple[float, Any]] = []

    def send(self, entries: Any) -> None:
        super().send(entries)
        self.at += [(self.clock(), e) for e in entries]


def test_the_cluster_keeps_time_in_a_thread_of_its_own() -> None:
    # GIVEN a run of 0.3 s that becomes Ready 0.2 s after its admission, on the real clock
    story = scenario(
        "cluster: {nodes: 1, gpusPerNode: 8}\n"
        "workloads: [{name: a, pods: 1, gpusPerPod: 8, startupSeconds: 0.2, runSeconds: 0.3}]\n"
    )
    holder: list[LocalCluster] = []
    sent = Timed(lambda: holder[0].now())
    cluster = LocalCluster(story, sent)
    holder.append(cluster)
    cluster.start()
    # WHEN it keeps time on its own while the caller is busy with something else
    thread = cluster.keep_time(idle=5.0)
    try:
        before = cluster.now()
        cluster.admit(Admit(workload_key("a"), 1, Kind.JOB))
        after = cluster.now()
        time.sleep(1.5)  # a slow read of the control plane's table, say
    finally:
        cluster.halt()
        thread.join(timeout=5)
    assert not thread.is_alive()
    # THEN the pod was Ready 0.2 s after its admission and the run over 0.3 s later
    went = {(e.detail_type, e.detail.get("status") or e.detail.get("ready")): e for _, e in sent.at}
    ready, done = went[(POD_OBSERVED, True)], went[(WORKLOAD_OBSERVED, "Succeeded")]
    assert before + 0.2 - 0.002 <= seconds_into(cluster, ready) <= after + 0.2 + 0.002
    assert before + 0.5 - 0.002 <= seconds_into(cluster, done) <= after + 0.5 + 0.002
    # AND each went to the bus when due, not at the next idle wake-up 5 s on
    sent_at = {id(e): at for at, e in sent.at}
    assert sent_at[id(ready)] - seconds_into(cluster, ready) < 0.5
    assert sent_at[id(done)] - seconds_into(cluster, done) < 0.5
