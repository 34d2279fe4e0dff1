"""Deadlines after a settings change, and an admission the cluster refused for good.

A gang left without a timer by `dryRun` (or `recoveryTimeout: 0s`) gets its deadline
back when the settings want one again: from the admission function on the "settings
changed" request, and from the sweeper should that request be lost. A workload whose
release the cluster refuses (403, 422) holds neither quota nor the `blockAdmission`
lock: it is withdrawn, not quarantined while Admitted.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from muster.core import Admit, DeadlineReached, Evict, Kind, Phase, TimerKind
from muster.kube.adapter import ClusterActionError
from muster.runtime.admission import AdmissionRequests, admit_after_batch
from muster.runtime.memory import MemoryMetrics
from muster.runtime.messages import SETTINGS_CHANGED, AdmissionRequest
from muster.runtime.ports import RecordingCluster
from muster.runtime.results import EffectFailed
from muster.runtime.service import MAX_EFFECT_TRIES
from muster.runtime.sweeper import Sweeper

from .conftest import Rig

KEY = "ns/train"


def _dry_run_reported(rig: Rig) -> None:
    """Admitted under dryRun; its deadline passed and was only reported."""
    rig.doc = {"timeout": "60s", "dryRun": True, "blockAdmission": True}
    rig.submit(KEY, 1)
    assert rig.admit() == [KEY]
    rig.clock.now += 60
    rig.plane().handle(DeadlineReached(KEY, 1, TimerKind.STARTUP, 1))
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.phase is Phase.ADMITTED
    assert snap.workload.timer is None and snap.workload.dry_run_evicted


def test_dry_run_off_evicts_at_once_on_the_settings_changed_request(rig: Rig):
    _dry_run_reported(rig)
    rig.submit("ns/next", 1)
    assert rig.admit() == []  # the dry-run gang holds the blockAdmission lock
    # WHEN the administrator turns dryRun off (the request `muster settings set` sends)
    rig.doc = {"timeout": "60s", "blockAdmission": True}
    requests = AdmissionRequests()
    requests.add(AdmissionRequest(SETTINGS_CHANGED))
    plane = rig.plane(inline_admission=True)
    admit_after_batch(plane, requests)
    # THEN the gang whose deadline passed is evicted, and the next one admitted
    assert rig.phase(KEY) == "Requeued"
    assert ("evict", KEY, 1) in rig.cluster.calls
    assert rig.phase("ns/next") == "Admitted"


def test_a_lost_settings_changed_request_heals_within_a_sweep(rig: Rig):
    _dry_run_reported(rig)
    rig.doc = {"timeout": "10m", "blockAdmission": True}  # dryRun off, a longer timeout
    sweeper = Sweeper(rig.store, rig.messages, rig.settings, MemoryMetrics())
    report = sweeper.run(rig.clock.now)
    assert report.owed == [KEY]
    ((key, timer, delay),) = rig.messages.deadlines
    assert key == KEY and timer.episode == 0 and delay == 0.0
    # The timer function delivers it: the rest of the longer timeout is armed.
    event = DeadlineReached(key, timer.attempt, timer.kind, timer.episode, timer.incarnation)
    rig.plane().handle(event)
    snap = rig.store.load(KEY)
    assert snap is not None and snap.workload.timer is not None
    assert snap.workload.timer.deadline == 1_000 + 600
    assert snap.workload.timer.episode == 2
    assert (KEY, snap.workload.timer) in [(w, t) for w, t in rig.timers.started]
    # A duplicate changes nothing; the next sweep owes nothing.
    rig.plane().handle(event)
    assert rig.phase(KEY) == "Admitted"
    rig.messages.deadlines.clear()
    assert sweeper.run(rig.clock.now).owed == []


def test_recovery_timeout_back_to_positive_reaches_recovering_gangs(rig: Rig):
    rig.doc = {"timeout": "60s", "recoveryTimeout": "0s"}
    rig.submit(KEY, 1)
    assert rig.admit() == [KEY]
    rig.pod(KEY, "p0", 1, ready=True)
    rig.clock.now += 10
    rig.pod(KEY, "p0", 2, ready=False)
    assert rig.phase(KEY) == "Recovering"
    rig.clock.now += 200
    rig.doc = {"timeout": "60s", "recoveryTimeout": "2m"}
    assert rig.plane().settle_deadlines() == [KEY]
    assert rig.phase(KEY) == "Requeued"  # lost readiness 200 s ago: past its 2 minutes


@dataclass
class RefusingCluster(RecordingCluster):
    """The API server refuses to release the workloads in `refused` (a 403)."""

    refused: set[str] = field(default_factory=set)

    def admit(self, effect: Admit) -> None:
        if effect.workload in self.refused:
            raise ClusterActionError(f"{effect.workload}: the API server refused (403 Forbidden)")
        super().admit(effect)

    def evict(self, effect: Evict) -> None:
        super().evict(effect)


def test_a_refused_admission_frees_the_lock_and_the_quota_instead_of_quarantine():
    cluster = RefusingCluster(refused={"ns/bad"})
    rig = Rig(cluster=cluster, doc={"timeout": "60s", "blockAdmission": True, "gpuQuota": 8})
    rig.submit("ns/bad", 1, gpus=8, created_at=1.0)
    rig.submit("ns/good", 1, gpus=8, created_at=2.0)
    for _ in range(MAX_EFFECT_TRIES - 1):
        plane = rig.plane(inline_admission=True)
        assert plane.admission_pass() in (["ns/bad"], [])
        assert "ns/bad" in plane.failed and rig.phase("ns/bad") == "Admitted"
    # WHEN the last allowed try is refused too
    last = rig.plane(inline_admission=True)
    assert last.admission_pass() == ["ns/good"]
    # THEN the refused attempt was withdrawn, not quarantined, and the next one admitted
    snap = rig.store.load("ns/bad")
    assert snap is not None and snap.quarantine is None
    assert snap.workload.phase is Phase.REQUEUED and snap.workload.requeue_count == 1
    assert "403" in (snap.workload.message or "")
    assert ("evict", "ns/bad", 1) in cluster.calls
    assert ("admit", "ns/good", 1) in cluster.calls
    evicted = [d for e, w, d in rig.bus.events if e == "Evicted" and w == "ns/bad"]
    assert evicted and evicted[0]["reason"] == "AdmissionRefused"
    assert "403" in evicted[0]["error"]
    assert rig.metrics.total("Quarantines") == 0
    assert last.failed == {}  # its own backoff: no retry pass for it


def test_a_refused_release_of_a_pod_groups_replacement_frees_the_quota_instead_of_quarantine():
    # GIVEN a running pod group whose pod was replaced, the replacement's release refused
    group = "ns/grp@podgroup"
    cluster = RefusingCluster()
    rig = Rig(cluster=cluster, doc={"timeout": "60s", "gpuQuota": 8})
    rig.submit(group, 2, gpus=8, kind=Kind.POD_GROUP, created_at=1.0)
    rig.submit("ns/next", 1, gpus=8, created_at=2.0)
    for i, seq in enumerate((2, 3)):
        rig.pod(group, f"g{i}", seq, ready=False, node=None)
    assert rig.admit() == [group]
    for i, seq in enumerate((4, 5)):
        rig.pod(group, f"g{i}", seq, ready=True)
    assert rig.phase(group) == "Running"
    rig.pod(group, "g1", 6, ready=False, deleted=True, phase="Failed")
    cluster.refused.add(group)
    # WHEN every try of its release is refused
    tries = 0
    with contextlib.suppress(EffectFailed):
        rig.pod(group, "g2", 7, ready=False, node=None)
    while (snap := rig.store.load(group)) is not None and snap.outbox and tries < 10:
        tries += 1
        with contextlib.suppress(EffectFailed):
            rig.plane().settled(group)
    # THEN the attempt was withdrawn after the allowed tries, not quarantined
    snap = rig.store.load(group)
    assert snap is not None and snap.quarantine is None and not snap.outbox
    assert snap.workload.phase is Phase.REQUEUED and tries == MAX_EFFECT_TRIES - 1
    assert ("evict", group, 1) in cluster.calls
    # AND the quota it held is free
    assert rig.admit() == ["ns/next"]
