"""Node packing (`nodePacking`): a gang that fits on one node goes to the fullest."""

from __future__ import annotations

from dataclasses import replace

import pytest
from muster.core import Phase, plan_admission
from muster.core.capacity import NodeCapacity
from muster.core.model import Kind, Workload
from muster.core.packing import fullest_fitting
from muster.core.settings import SettingsError
from muster.kube.placement import spec_placement

from tests.unit.conftest import settings

PACK = settings(capacityCheck=True, nodePacking=True)
FIT = settings(capacityCheck=True)


def cap(name: str, foreign: int = 0) -> NodeCapacity:
    return NodeCapacity(name, 1, 8, True, None, foreign)


def queued(key: str, pods: int, each: int, created: float = 0.0, **kw: object) -> Workload:
    return Workload(key, "q", pods, gpus=pods * each, created_at=created, queued_at=created, **kw)  # type: ignore[arg-type]


NODES = [cap("n0"), cap("n1", foreign=5), cap("n2", foreign=6)]  # 8, 3 and 2 GPUs free


def test_each_gang_goes_to_the_fullest_node_that_holds_it_and_is_pinned_there() -> None:
    # GIVEN nodes with 8, 3 and 2 free GPUs and three small gangs
    gangs = [queued("t/two", 1, 2, 1), queued("t/three", 1, 3, 2), queued("t/pair", 2, 1, 3)]
    # WHEN a pass plans them with packing
    plan = plan_admission(gangs, [], PACK, 0, nodes=NODES)
    # THEN the 2-GPU gang fills n2, the 3-GPU gang n1, and the pair (both pods) goes to n0
    assert plan.admit == ("t/two", "t/three", "t/pair")
    assert dict(plan.domains) == {
        "t/two": "hostname=n2",
        "t/three": "hostname=n1",
        "t/pair": "hostname=n0",
    }
    # AND with the plain check they are placed by first fit, and nothing is pinned
    plain = plan_admission(gangs, [], FIT, 0, nodes=NODES)
    assert plain.admit == ("t/two", "t/three", "t/pair") and plain.domains == ()


def test_a_gang_no_single_node_holds_is_placed_as_the_plain_check_places_it() -> None:
    big = queued("t/big", 2, 8)
    plan = plan_admission([big], [], PACK, 0, nodes=[cap("n0"), cap("n1")])
    assert plan.admit == ("t/big",) and plan.domains == ()
    skipped = plan_admission([big], [], PACK, 0, nodes=NODES)
    assert skipped.admit == () and skipped.skipped["t/big"].startswith("needs 2 \u00d7 8 GPUs")


def test_a_pinned_gang_not_placed_yet_keeps_its_reservation_on_its_node() -> None:
    # GIVEN two nodes with 3 free GPUs each, and a 3-GPU gang admitted onto n1, not bound yet
    nodes = [cap("n0", foreign=5), cap("n1", foreign=5)]  # 3 and 3 free
    admitted = replace(
        queued("t/first", 1, 3), phase=Phase.ADMITTED, admitted_at=5, domain="hostname=n1"
    )
    # WHEN the next pass plans another 3-GPU gang
    plan = plan_admission([queued("t/next", 1, 3, 6)], [admitted], PACK, 10, nodes=nodes)
    # THEN n1 is taken by the pinned reservation (first fit would have reserved n0)
    assert dict(plan.domains) == {"t/next": "hostname=n0"}


def test_the_fullest_node_is_found_by_the_gangs_gpus_on_one_node() -> None:
    assert fullest_fitting([8, 3, 2, 3], ((1, 3),)) == 1  # ties: the first
    assert fullest_fitting([8, 3, 2], ((2, 1),)) == 2
    assert fullest_fitting([8, 3, 2], ((1, 4), (2, 2))) == 0
    assert fullest_fitting([7, 3, 2], ((1, 8),)) is None


def test_node_packing_needs_the_capacity_check_and_is_cluster_wide() -> None:
    with pytest.raises(SettingsError, match=r"nodePacking: .*needs capacityCheck: true"):
        settings(nodePacking=True)
    with pytest.raises(SettingsError, match=r"queues\.a\.nodePacking: nodePacking is cluster-wide"):
        settings(capacityCheck=True, queues={"a": {"nodePacking": True}})
    with pytest.raises(SettingsError, match="nodePacking: expected true or false"):
        settings(capacityCheck=True, nodePacking="yes")
    assert PACK.to_dict()["nodePacking"] is True and "nodePacking" not in FIT.to_dict()


def test_the_node_goes_on_the_pod_templates_as_a_hostname_selector() -> None:
    spec = {"template": {"spec": {"nodeSelector": {"team": "a"}}}}
    patch = spec_placement(Kind.JOB, spec, "hostname=node-7")
    assert patch == {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "node-7"}}}}
