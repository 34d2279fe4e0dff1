"""Topology-aware admission: a gang that asks for a level is admitted inside one domain of it."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from muster.core import Fleet, NodeObserved, WorkloadObserved, plan_admission
from muster.core.capacity import NodeCapacity
from muster.core.model import Admit, LogEvent, Phase, Publish, Workload
from muster.core.settings import SettingsError, merge_settings, parse_settings
from muster.core.topology import (
    common_domain,
    domain_at,
    domain_selector,
    node_topology,
    parse_request,
    request_of,
)

L1, L2, L3 = "network-node-layer-1", "network-node-layer-2", "network-node-layer-3"
TAS = parse_settings({"capacityCheck": True, "topologyLevels": [L1, L2, L3]})


def cap(name: str, spine: str, block: str, gpus: int = 8, foreign: int = 0) -> NodeCapacity:
    return NodeCapacity(
        name, 1, gpus, foreign_gpus=foreign, topology=((L1, "s"), (L2, spine), (L3, block))
    )


def gang(key: str, pods: int, each: int, topology: str, created: float = 0.0) -> Workload:
    return Workload(
        key,
        "q",
        pods,
        gpus=pods * each,
        created_at=created,
        queued_at=created,
        shape=((pods, each),),
        topology=topology,
    )


# --------------------------------------------------------------------------- the annotation


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("required=network-node-layer-3", "required=network-node-layer-3"),
        ("preferred=topology.k8s.aws/network-node-layer-2", "preferred=network-node-layer-2"),
        (" required = topology.kubernetes.io/zone ", "required=zone"),
    ],
)
def test_a_request_names_a_mode_and_a_level_by_short_name_or_label(
    text: str, canonical: str
) -> None:
    assert str(parse_request(text)) == canonical
    assert request_of(canonical) == parse_request(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("network-node-layer-3", "expected required=<level> or preferred=<level>"),
        ("must=network-node-layer-3", "expected required=<level> or preferred=<level>"),
        ("required=network-node-layer3", "did you mean 'network-node-layer-3'?"),
        ("required=rack", "unknown topology level 'rack'"),
    ],
)
def test_a_bad_request_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_request(text)


def test_a_nodes_topology_is_its_known_labels_widest_first_and_bounded() -> None:
    labels = {
        "topology.k8s.aws/network-node-layer-3": "nn-3",
        "topology.kubernetes.io/zone": "us-east-1a",
        "topology.k8s.aws/network-node-layer-1": "x" * 64,  # not a label value: left out
        "kubernetes.io/hostname": "n1",
    }
    assert node_topology(labels) == (("zone", "us-east-1a"), (L3, "nn-3"))


def test_a_domain_is_named_by_its_path_and_selected_by_every_label_of_it() -> None:
    topology = (("zone", "z"), (L1, "a"), (L2, "b"), (L3, "c"))
    assert domain_at(topology, L2) == "zone=z,network-node-layer-1=a,network-node-layer-2=b"
    assert domain_at(((L1, "a"),), L3) is None  # no layer-3 label: in no layer-3 domain
    assert domain_selector("zone=z,network-node-layer-1=a") == {
        "topology.kubernetes.io/zone": "z",
        "topology.k8s.aws/network-node-layer-1": "a",
    }


# --------------------------------------------------------------------------- settings


def test_levels_are_named_globally_and_per_queue() -> None:
    s = parse_settings(
        {
            "capacityCheck": True,
            "topologyLevels": ["topology.k8s.aws/network-node-layer-3", L2],
            "queues": {"wide": {"topologyLevels": ["zone"]}, "plain": {"timeout": "1m"}},
        }
    )
    assert s.defaults.topology_levels == (L2, L3)
    assert s.for_queue("wide").topology_levels == ("zone",)
    assert s.for_queue("plain").topology_levels == (L2, L3)
    assert parse_settings(s.to_dict()) == s
    assert merge_settings(s, {"topologyLevels": None}).defaults.topology_levels == ()


def test_every_mistake_in_the_levels_is_named_in_one_pass() -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(
            {
                "topologyLevels": ["network-node-layer3", "zon"],
                "queues": {"a": {"topologyLevels": "zone"}},
            }
        )
    errors = raised.value.errors
    assert any("did you mean 'network-node-layer-3'?" in e for e in errors)
    assert any("topologyLevels[1]" in e and "did you mean 'zone'?" in e for e in errors)
    assert any(e.startswith("queues.a.topologyLevels: expected a list") for e in errors)
    assert any("needs capacityCheck: true" in e for e in errors)


def test_with_the_levels_unset_nothing_changes_in_the_settings_document() -> None:
    assert "topologyLevels" not in parse_settings({"capacityCheck": True}).to_dict()


# --------------------------------------------------------------------------- the fit

NODES = [
    cap("n1", "s1", "b1"),
    cap("n2", "s1", "b1"),
    cap("n3", "s1", "b2"),
    cap("n4", "s1", "b2"),
    cap("n5", "s1", "b2"),
    cap("n6", "s2", "b3"),
]


def test_a_required_gang_goes_to_the_smallest_block_it_fits() -> None:
    plan = plan_admission([gang("t/a", 2, 8, f"required={L3}")], [], TAS, 0, nodes=NODES)
    assert plan.admit == ("t/a",)
    assert (
        plan.domain_of("t/a")
        == "network-node-layer-1=s,network-node-layer-2=s1,network-node-layer-3=b1"
    )


def test_a_required_gang_that_fits_no_single_block_waits_and_says_why() -> None:
    # GIVEN 48 free GPUs in all but at most 24 in one block
    plan = plan_admission([gang("t/big", 4, 8, f"required={L3}")], [], TAS, 0, nodes=NODES)
    # THEN it waits, though it fits the cluster
    assert plan.admit == ()
    assert plan.skipped["t/big"] == (
        "needs 4 \u00d7 8 GPUs in one network-node-layer-3 block; "
        "the largest free block has room for 3"
    )
    # AND the same gang without topology is admitted
    assert plan_admission([gang("t/big", 4, 8, "")], [], TAS, 0, nodes=NODES).admit == ("t/big",)


def test_a_preferred_gang_widens_level_by_level_then_goes_anywhere() -> None:
    four = gang("t/p", 4, 8, f"preferred={L3}")
    plan = plan_admission([four], [], TAS, 0, nodes=NODES)
    assert plan.domain_of("t/p") == "network-node-layer-1=s,network-node-layer-2=s1"
    six = gang("t/p", 6, 8, f"preferred={L3}")
    plan = plan_admission([six], [], TAS, 0, nodes=NODES)
    assert plan.domain_of("t/p") == "network-node-layer-1=s"
    only_l3 = parse_settings({"capacityCheck": True, "topologyLevels": [L3]})
    plan = plan_admission([four], [], only_l3, 0, nodes=NODES)
    assert plan.admit == ("t/p",)
    assert plan.domain_of("t/p") == ""  # anywhere: the queue names no wider level


def test_gangs_admitted_into_a_block_keep_their_reservation_inside_it() -> None:
    # GIVEN a gang admitted into block b2 whose pods are not bound yet
    first = gang("t/first", 2, 8, f"required={L3}")
    admitted = replace(
        first,
        phase=Phase.ADMITTED,
        attempt=1,
        admitted_at=1.0,
        domain="network-node-layer-1=s,network-node-layer-2=s1,network-node-layer-3=b2",
    )
    # WHEN a gang of one 8-GPU pod asks for a block
    plan = plan_admission([gang("t/next", 1, 8, f"required={L3}")], [admitted], TAS, 2, nodes=NODES)
    # THEN it is reserved inside b2 (not on the first nodes, in b1), so b2 has 8 left and,
    # of the two blocks with 8 free, it is the first by name
    assert plan.domain_of("t/next").endswith("network-node-layer-3=b2")


def test_a_required_level_the_queue_does_not_name_is_refused_and_a_preferred_one_ignored() -> None:
    only_l3 = parse_settings({"capacityCheck": True, "topologyLevels": [L3]})
    fleet = Fleet(only_l3)
    for n in NODES:
        fleet.apply(NodeObserved(n.node, seq=1, gpus=8, topology=n.topology), 0)
    fleet.apply(
        WorkloadObserved("t/r", "q", 1, gpus=8, shape=((1, 8),), topology=f"required={L2}"), 1
    )
    step = fleet.apply(
        WorkloadObserved("t/p", "q", 1, gpus=8, shape=((1, 8),), topology=f"preferred={L2}"), 2
    )
    refused = fleet.get("t/r")
    assert refused is not None and refused.phase is Phase.PENDING
    assert refused.message == (
        "topology required=network-node-layer-2 is not allowed on queue q "
        "(its topologyLevels: network-node-layer-3)"
    )
    admitted = [e for e in step.effects if type(e) is Publish and e.event is LogEvent.ADMITTED]
    assert admitted[0].detail["domain"] is None
    assert admitted[0].detail["topologyIgnored"] == (
        "queue q does not name network-node-layer-2 in topologyLevels"
    )


def test_the_domain_reaches_the_workload_the_admit_effect_and_the_log() -> None:
    fleet = Fleet(TAS)
    for n in NODES:
        fleet.apply(NodeObserved(n.node, seq=1, gpus=8, topology=n.topology), 0)
    step = fleet.apply(
        WorkloadObserved("t/a", "q", 3, gpus=24, shape=((3, 8),), topology=f"required={L3}"), 1
    )
    b2 = "network-node-layer-1=s,network-node-layer-2=s1,network-node-layer-3=b2"
    w = fleet.get("t/a")
    assert w is not None and w.phase is Phase.ADMITTED and w.domain == b2
    assert [e.domain for e in step.effects if type(e) is Admit] == [b2]
    logged = [e.detail for e in step.effects if type(e) is Publish and e.event is LogEvent.ADMITTED]
    assert logged[0]["topology"] == f"required={L3}" and logged[0]["domain"] == b2


def test_a_required_gang_the_check_cannot_judge_waits_instead_of_going_anywhere() -> None:
    unknown = Workload("t/u", "q", 3, gpus=10, topology=f"required={L3}")  # 10 over 3 pods
    plan = plan_admission([unknown], [], TAS, 0, nodes=NODES)
    assert plan.admit == ()
    assert "required network-node-layer-3 topology cannot be judged" in plan.skipped["t/u"]


# --------------------------------------------------------------------------- properties

_layout = st.lists(
    st.tuples(
        st.integers(0, 1),  # spine (layer 1)
        st.integers(0, 2),  # block under it (layer 2)
        st.integers(0, 2),  # rack under that (layer 3)
        st.integers(0, 8),  # free GPUs
    ),
    min_size=1,
    max_size=24,
)


def _nodes(layout: list[tuple[int, int, int, int]]) -> list[NodeCapacity]:
    return [
        NodeCapacity(
            f"n{i}",
            1,
            8,
            foreign_gpus=8 - free,
            topology=((L1, f"a{s}"), (L2, f"b{s}{b}"), (L3, f"c{s}{b}{r}")),
        )
        for i, (s, b, r, free) in enumerate(layout)
    ]


def _domains(nodes: list[NodeCapacity], level: str) -> dict[str, list[NodeCapacity]]:
    found: dict[str, list[NodeCapacity]] = {}
    for n in nodes:
        name = domain_at(n.topology, level)
        assert name is not None
        found.setdefault(name, []).append(n)
    return found


def _key(name: str) -> tuple[object, ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


@hsettings(max_examples=200, deadline=None)
@given(
    layout=_layout,
    gangs=st.lists(
        st.tuples(st.integers(1, 12), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=5
    ),
    level=st.sampled_from([L1, L2, L3]),
)
def test_a_required_gang_is_never_admitted_across_domains(
    layout: list[tuple[int, int, int, int]], gangs: list[tuple[int, int]], level: str
) -> None:
    """Each admitted gang's domain is one of its level, and all of them together fit their
    domains' free GPUs; a gang is left waiting only when no domain has room for it."""
    nodes = _nodes(layout)
    queued = [
        gang(f"t/g{i}", n, g, f"required={level}", created=i) for i, (n, g) in enumerate(gangs)
    ]
    plan = plan_admission(queued, [], TAS, 0, nodes=nodes)
    free = {n.node: n.free for n in nodes}
    by_domain = _domains(nodes, level)
    for w in queued:
        pods, each = w.shape[0]
        if w.key not in plan.admit:
            # Waiting: no domain has room for it after the gangs admitted before it.
            assert all(sum(free[n.node] // each for n in at) < pods for at in by_domain.values())
            continue
        domain = plan.domain_of(w.key)
        assert domain in by_domain  # a domain of the required level, never wider
        left = pods
        for n in by_domain[domain]:
            take = min(left, free[n.node] // each)
            free[n.node] -= take * each
            left -= take
        assert left == 0, f"{w.key} admitted into {domain} without room there"


@hsettings(max_examples=200, deadline=None)
@given(layout=_layout, pods=st.integers(1, 16), each=st.sampled_from([1, 2, 4, 8]))
def test_a_preferred_gang_gets_the_smallest_domain_that_fits(
    layout: list[tuple[int, int, int, int]], pods: int, each: int
) -> None:
    nodes = _nodes(layout)
    plan = plan_admission([gang("t/p", pods, each, f"preferred={L3}")], [], TAS, 0, nodes=nodes)
    expected = ""
    for level in (L3, L2, L1):
        fitting = [
            (sum(n.free for n in at), _key(name), name)
            for name, at in _domains(nodes, level).items()
            if sum(n.free // each for n in at) >= pods
        ]
        if fitting:
            expected = min(fitting)[2]
            break
    fits_anywhere = sum(n.free // each for n in nodes) >= pods
    assert plan.admit == (("t/p",) if fits_anywhere else ())
    assert plan.domain_of("t/p") == expected


@hsettings(max_examples=100, deadline=None)
@given(
    layout=_layout,
    gangs=st.lists(
        st.tuples(st.integers(1, 10), st.sampled_from([1, 2, 4, 8]), st.sampled_from([L1, L2, L3])),
        min_size=1,
        max_size=8,
    ),
)
def test_across_passes_the_gangs_admitted_into_domains_all_fit_them_together(
    layout: list[tuple[int, int, int, int]], gangs: list[tuple[int, int, str]]
) -> None:
    """Gangs arrive one by one (a pass each): a gang admitted earlier keeps its pods
    reserved inside its domain, so every later one is fitted around them."""
    nodes = _nodes(layout)
    fleet = Fleet(TAS)
    for n in nodes:
        fleet.apply(
            NodeObserved(n.node, seq=1, gpus=8, foreign_gpus=n.foreign_gpus, topology=n.topology), 0
        )
    for i, (pods, each, level) in enumerate(gangs):
        fleet.apply(
            WorkloadObserved(
                f"t/g{i}", "q", pods, gpus=pods * each, shape=((pods, each),),
                topology=f"required={level}", created_at=i,
            ),
            i,
        )  # fmt: skip
    free = {n.node: n.free for n in nodes}
    admitted = sorted(
        (w for w in fleet if w.phase is Phase.ADMITTED), key=lambda w: w.admitted_at or 0.0
    )
    for w in admitted:
        pods, each = w.shape[0]
        level = w.topology.partition("=")[2]
        left = pods
        for n in _domains(nodes, level)[w.domain]:
            take = min(left, free[n.node] // each)
            free[n.node] -= take * each
            left -= take
        assert left == 0, f"{w.key} admitted into {w.domain} over what earlier gangs hold there"


def test_common_domain_says_whether_bound_pods_stayed_in_one_block() -> None:
    nodes = {n.node: n.topology for n in NODES}
    b2 = "network-node-layer-1=s,network-node-layer-2=s1,network-node-layer-3=b2"
    assert common_domain(nodes, ["n3", "n5", "n4"], L3) == b2
    assert common_domain(nodes, ["n1", "n3"], L3) is None  # two blocks
    assert (
        common_domain(nodes, ["n1", "n3"], L2) == "network-node-layer-1=s,network-node-layer-2=s1"
    )
    assert common_domain(nodes, ["n1", "gone"], L3) is None  # a node it knows nothing of
