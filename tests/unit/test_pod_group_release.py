"""A pod group runs no more pods than it is charged for: its release lifts the gates
of at most its admitted gang size, and after the admission only of replacements of
lost members (`muster.core.pod_groups`)."""

from __future__ import annotations

from muster.core import AdmissionGranted, Admit, Kind, Phase, PodObserved, decide
from muster.core.model import Workload
from muster.core.pod_groups import ListedMember, gpus_each, pods_to_release

from tests.unit.conftest import ready, settings, submit

KEY = "team/grp@podgroup"
S = settings(gpuQuota=1024, timeout="60s")
N = 8


class Group:
    """The group's pods as the cluster lists them (name -> gated), and the core's
    record of it; each release the core asks for is carried out as the adapter does."""

    def __init__(self) -> None:
        self.gated: dict[str, bool] = {}
        self.seq = 0
        self.released: list[str] = []
        w = decide(None, submit(KEY, pods=N, gpus=8 * N, kind=Kind.POD_GROUP), S, 0).workload
        assert w is not None
        self.w: Workload = w

    def step(self, event: object, now: float = 1.0) -> list[Admit]:
        d = decide(self.w, event, S, now)  # type: ignore[arg-type]
        assert d.workload is not None
        self.w = d.workload
        admits = [e for e in d.effects if isinstance(e, Admit)]
        for effect in admits:
            listed = [ListedMember(name, gated) for name, gated in self.gated.items()]
            for name in pods_to_release(effect.size, listed):
                self.gated[name] = False
                self.released.append(name)
        return admits

    def create(self, name: str) -> list[Admit]:
        self.seq += 1
        self.gated[name] = True
        return self.step(PodObserved(KEY, name, self.seq, uid=f"{name}-uid", phase="Pending"))

    def lose(self, name: str) -> list[Admit]:
        self.seq += 1
        del self.gated[name]
        return self.step(
            PodObserved(KEY, name, self.seq, uid=f"{name}-uid", phase="Running", deleted=True)
        )

    def run_released(self) -> None:
        for name, gated in self.gated.items():
            if not gated and not self.w.pods[name].ready:
                self.seq += 1
                self.step(ready(KEY, name, seq=self.seq, uid=f"{name}-uid"))

    @property
    def running(self) -> list[str]:
        return sorted(name for name, gated in self.gated.items() if not gated)


def admitted_with_spares(spares: int) -> Group:
    g = Group()
    for i in range(N + spares):
        g.create(f"p{i:03d}")
    (release,) = g.step(AdmissionGranted(KEY, 1))
    assert release.size == N
    return g


def test_an_admitted_group_of_n_with_50_more_pods_releases_exactly_n() -> None:
    # GIVEN a gang of 8 whose owner created 58 pods; WHEN it is admitted
    g = admitted_with_spares(50)
    # THEN its first 8 pods by name are released, the other 50 stay gated
    assert g.released == [f"p{i:03d}" for i in range(N)]
    # AND 50 pods more added after the admission release nothing: 8 pods run, for 8 charged
    for i in range(50):
        g.create(f"q{i:03d}")
    assert len(g.released) == N and len(g.running) == N
    g.run_released()
    assert g.w.phase is Phase.RUNNING and g.w.gang_size == N and g.w.gpus == 8 * N


def test_after_losing_k_members_exactly_k_replacements_are_released() -> None:
    # GIVEN a gang of 8 running, with no pods beyond it
    g = admitted_with_spares(0)
    g.run_released()
    assert g.w.phase is Phase.RUNNING
    # WHEN 3 members are lost (no release yet: nothing waits to replace them)
    for name in ("p000", "p003", "p005"):
        assert g.lose(name) == []
    # AND their controller creates 3 replacements, then (a tenant) 20 pods more
    for i in range(3):
        g.create(f"r{i:03d}")
    for i in range(20):
        g.create(f"x{i:03d}")
    # THEN exactly the 3 replacements were released, and 8 pods run
    assert g.released[N:] == ["r000", "r001", "r002"]
    assert len(g.running) == N


def test_a_member_lost_while_pods_beyond_the_gang_wait_is_replaced_by_one_of_them() -> None:
    # GIVEN a running gang of 8 with 5 gated pods beyond it
    g = admitted_with_spares(5)
    g.run_released()
    # WHEN 2 members are lost and their controller makes no replacement
    for name in ("p001", "p002"):
        assert [a.size for a in g.lose(name)] == [N]
    # THEN 2 of the waiting pods (first by name) are released: 8 run again, 3 wait
    assert g.released[N:] == ["p008", "p009"]
    assert len(g.running) == N and sum(g.gated.values()) == 3


def test_the_release_counts_what_still_runs() -> None:
    listed = [
        ListedMember("a", gated=False),
        ListedMember("b", gated=False, ended=True),  # failed, succeeded or terminating
        ListedMember("c", gated=True),
        ListedMember("d", gated=True, ended=True),  # a terminating gated pod: never
        ListedMember("e", gated=True),
        ListedMember("f", gated=True),
    ]
    assert pods_to_release(3, listed) == ("c", "e")
    assert pods_to_release(1, listed) == ()
    assert pods_to_release(0, listed) == ()


def test_a_pod_asking_for_more_than_the_charge_per_pod_stays_gated() -> None:
    # GIVEN a group charged 1 GPU a pod, and a pod created after (first by name) asking 8
    listed = [
        ListedMember("a-odd", gated=True, gpus=8),
        ListedMember("b", gated=True, gpus=None),  # a count no pod can have
        ListedMember("c", gated=True, gpus=1),
        ListedMember("d", gated=True, gpus=0),
    ]
    # THEN only pods within the charge are released
    assert pods_to_release(4, listed, each=1) == ("c", "d")
    assert pods_to_release(4, listed) == ("a-odd", "b", "c", "d")  # no charge: count only


def test_a_groups_release_carries_its_charge() -> None:
    g = Group()
    for i in range(N):
        g.create(f"p{i:03d}")
    (release,) = g.step(AdmissionGranted(KEY, 1))
    assert (release.size, release.gpus, gpus_each(release)) == (N, 8 * N, 8)


def test_only_a_pod_groups_release_carries_a_size() -> None:
    job = decide(None, submit("team/job", pods=4, gpus=32), S, 0).workload
    assert job is not None
    (release,) = [
        e
        for e in decide(job, AdmissionGranted("team/job", 1), S, 1).effects
        if isinstance(e, Admit)
    ]
    assert (release.size, release.gpus) == (0, 0)
