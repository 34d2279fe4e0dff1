"""The agent and topology: nodes report their topology labels, workloads their request."""

from __future__ import annotations

from typing import Any

import pytest
from muster.agent.mapping import node_view, placement_rules, workload_view
from muster.agent.watch import Change, Sync
from muster.core.model import Kind, NodeObserved, WorkloadObserved
from muster.kube.conventions import JOB_RESOURCE, NODE_RESOURCE
from muster.schema import InvalidEvent, node_detail, parse_agent_event

from .test_agent import (  # noqa: F401
    Clock,
    aws,
    clock,
    job,
    landed,
    make_agent,
    sleeps,
)
from .test_agent_capacity import gpu_node

LAYER3 = "topology.k8s.aws/network-node-layer-3"
ZONE = "topology.kubernetes.io/zone"


def test_a_node_reports_its_topology_labels_with_its_capacity(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    labels = {ZONE: "us-east-1a", LAYER3: "nn-0a1", "kubernetes.io/hostname": "node-a"}
    agent.handle(Sync(NODE_RESOURCE, [gpu_node(rv="10", labels=labels)], "10"))
    agent.flush(everything=True)
    events = [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, NodeObserved)]
    assert [e.topology for e in events] == [
        (("zone", "us-east-1a"), ("network-node-layer-3", "nn-0a1"))
    ]
    # WHEN the node moves to another block, a new report says so
    moved = gpu_node(rv="11", labels={**labels, LAYER3: "nn-0b2"})
    agent.handle(Change(NODE_RESOURCE, "MODIFIED", moved))
    agent.flush(everything=True)
    [latest] = [e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, NodeObserved)]
    assert dict(latest.topology)["network-node-layer-3"] == "nn-0b2"


def test_an_overlong_or_malformed_label_value_is_left_out() -> None:
    view = node_view(gpu_node(labels={ZONE: "z" * 64, LAYER3: "bad value"}))
    assert view.topology == ()


def test_a_node_event_with_a_bad_topology_names_every_wrong_entry() -> None:
    detail = node_detail(cluster="c", node="n", seq=1, gpus=8)
    detail["topology"] = {"network-node-layer3": "a", "zone": "x y"}
    envelope = {"source": "muster.agent", "detail-type": "Node Observed", "detail": detail}
    with pytest.raises(InvalidEvent) as raised:
        parse_agent_event(envelope)
    errors = raised.value.errors
    assert any("did you mean 'network-node-layer-3'?" in e for e in errors)
    assert any(e.startswith("topology.zone: 'x y' is not a Kubernetes label value") for e in errors)


def test_a_workload_reports_its_topology_request_canonically(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    asks = job(annotations={"muster.io/topology": f"required={LAYER3}"})
    agent.handle(Sync(JOB_RESOURCE, [asks], "100"))
    agent.flush(everything=True)
    [observed] = [
        e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, WorkloadObserved)
    ]
    assert observed.topology == "required=network-node-layer-3"


def test_a_bad_topology_annotation_is_a_problem_and_left_out() -> None:
    view = workload_view(Kind.JOB, job(annotations={"muster.io/topology": "required=rack"}))
    assert view is not None and view.topology == ""
    assert view.problems == (
        "muster.io/topology: unknown topology level 'rack' (known: zone, network-node-layer-1, "
        "network-node-layer-2, network-node-layer-3)",
    )


def test_the_node_selector_muster_sets_for_a_domain_is_not_a_placement_rule() -> None:
    ours = {"spec": {"nodeSelector": {LAYER3: "nn-1", ZONE: "z"}}}
    theirs = {"spec": {"nodeSelector": {LAYER3: "nn-1", "gpu": "h100"}}}
    assert placement_rules([ours], owned=True) == ""
    assert placement_rules([ours]) == "nodeSelector"  # no topology asked for: a rule of its own
    assert placement_rules([ours, theirs], owned=True) == "nodeSelector"
