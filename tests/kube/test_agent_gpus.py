"""What the agent charges a workload: GPUs read exactly from any quantity, summed as
the scheduler sums a pod's containers, and workloads Muster cannot manage refused.

A custom resource's pod templates reach the agent as written (the API server does
not canonicalise them), so "8000m" and "0.008k" are 8 GPUs; sidecars run beside the
containers, so they add up; a Job may say `parallelism: 2147483647`.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

import pytest
from muster.agent.mapping import (
    QuantityError,
    is_gpu_resource,
    node_gpus,
    parse_quantity,
    pod_gpus,
    pod_group_view,
    workload_view,
)
from muster.agent.watch import Change
from muster.core.model import Kind, WorkloadObserved
from muster.kube.conventions import JOB_RESOURCE, POD_RESOURCE
from muster.schema import (
    MAX_WORKLOAD_PODS,
    WORKLOAD_OBSERVED,
    InvalidEvent,
    parse_agent_detail,
    parse_agent_event,
    workload_detail,
)

from .test_agent import (  # noqa: F401 (fixtures)
    Clock,
    aws,
    clock,
    group_pod,
    job,
    landed,
    make_agent,
    sleeps,
)
from .test_kinds import pytorchjob


def limits(gpus: Any, name: str = "nvidia.com/gpu", **container: Any) -> dict[str, Any]:
    return {"resources": {"limits": {name: gpus}}, **container}


def pod(containers: list[Any], init: list[Any] | None = None) -> dict[str, Any]:
    return {"spec": {"containers": containers, "initContainers": init or []}}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        (8, 8),
        (8.0, 8),
        ("8000m", 8),
        ("8.0", 8),
        ("8.", 8),
        ("0.008k", 8),
        ("80e-1", 8),
        (".8e1", 8),
        ("1e1", 10),
        ("1E", 10**18),
        ("8Ki", 8192),
        ("+8", 8),
        ("500m", Fraction(1, 2)),
        ("0.1", Fraction(1, 10)),
        ("-2", -2),
    ],
)
def test_quantities_are_read_exactly(text: Any, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "8 GPUs", " 8", "1e", "--8", "8ki", "0x10", True, None, []])
def test_what_is_not_a_quantity_is_refused(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_a_custom_resource_written_in_any_notation_is_charged_its_gpus() -> None:
    # GIVEN PyTorchJobs of 2 pods whose template writes 8 GPUs in other notations
    for written in ("8000m", "8.0", "0.008k", "80e-1", 8.0):
        obj = pytorchjob()
        replica = obj["spec"]["pytorchReplicaSpecs"]["Master"]
        replica["replicas"] = 2
        replica["template"]["spec"]["containers"] = [limits(written)]
        # THEN each is charged 16
        view = workload_view(Kind.PYTORCHJOB, obj)
        assert view is not None
        assert (view.gpus, view.shape, view.refused) == (16, ((2, 8),), ""), written


@pytest.mark.parametrize("written", ["500m", "0.5", 0.5, "7.999", "abc", "-8", "8Ki"])
def test_a_gpu_count_no_pod_can_have_refuses_the_workload_by_name(written: Any) -> None:
    obj = pytorchjob()
    obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = [
        limits(written)
    ]
    view = workload_view(Kind.PYTORCHJOB, obj)
    assert view is not None
    assert view.refused.startswith("its pod template asks for nvidia.com/gpu: ")
    assert repr(written) in view.refused
    assert view.gpus == 0


def test_sidecars_add_up_with_the_containers() -> None:
    # one container and seven sidecars (init containers that keep running) of 1 GPU
    sidecar = limits("1", restartPolicy="Always")
    assert pod_gpus(pod([limits("1")], [sidecar] * 7)) == 8
    # an init container runs beside the sidecars started before it, not after it
    assert pod_gpus(pod([limits("1")], [limits("2", restartPolicy="Always"), limits("8")])) == 10
    assert pod_gpus(pod([limits("1")], [limits("8"), limits("2", restartPolicy="Always")])) == 8
    # init containers that run alone: the largest of them, against the containers' sum
    assert pod_gpus(pod([limits("2"), limits("2")], [limits("3"), limits("1")])) == 4
    assert pod_gpus(pod([limits("2"), limits("2")], [limits("6"), limits("1")])) == 6
    # a request above its limit counts (the larger of the two)
    both = {"resources": {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": 2}}}
    assert pod_gpus(pod([both])) == 4


def test_a_job_with_sidecars_is_charged_for_them() -> None:
    obj = job(parallelism=2)
    obj["spec"]["template"]["spec"]["initContainers"] = [
        limits("1", name="nvidia.com/gpu", restartPolicy="Always")
    ] * 7
    obj["spec"]["template"]["spec"]["containers"] = [limits("1")]
    view = workload_view(Kind.JOB, obj)
    assert view is not None
    assert (view.gpus, view.shape) == (16, ((2, 8),))


def test_which_resources_are_gpus() -> None:
    counted = [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-7g.80gb",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neurondevice",
        "aws.amazon.com/neuroncore",
    ]
    assert all(is_gpu_resource(name) for name in counted)
    others = ["cpu", "memory", "nvidia.com/gpu.shared", "amd.com/gpu", "vpc.amazonaws.com/efa"]
    assert not any(is_gpu_resource(name) for name in others)
    # a pod's MIG slices and NeuronCores count one each, beside its whole GPUs
    mixed = pod([limits("2", "nvidia.com/mig-1g.10gb"), limits("4", "aws.amazon.com/neuroncore")])
    assert pod_gpus(mixed) == 6
    assert pod_gpus(pod([limits("4", "vpc.amazonaws.com/efa")])) == 0


def test_a_nodes_gpus_count_its_neuron_chips_once() -> None:
    trn1 = {
        "aws.amazon.com/neuron": "16",
        "aws.amazon.com/neurondevice": "16",
        "aws.amazon.com/neuroncore": "32",
        "vpc.amazonaws.com/efa": "8",
        "cpu": "128",
    }
    assert node_gpus(trn1) == 32
    mig = {"nvidia.com/gpu": "6", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"}
    assert node_gpus(mig) == 15
    assert node_gpus({"nvidia.com/gpu": "8000m", "memory": "1Ti"}) == 8
    assert node_gpus({"nvidia.com/gpu": "lots"}) == 0


# --------------------------------------------------------------------------- bounds


def test_an_absurd_parallelism_is_refused_and_never_reported(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN a suspended NonIndexed Job of 0 GPUs and 2147483647 pods
    absurd = job("absurd", rv="10", parallelism=2**31 - 1)
    absurd["spec"]["template"]["spec"]["containers"] = [{"name": "c"}]
    view = workload_view(Kind.JOB, absurd)
    assert view is not None
    assert view.refused == (
        f"2147483647 pods (parallelism or replicas) are more than {MAX_WORKLOAD_PODS}, "
        "the most Muster manages in one workload"
    )
    # WHEN the agent sees it, beside an ordinary Job
    agent = make_agent(aws["events"], clock, sleeps)
    with caplog.at_level(logging.ERROR, logger="muster.agent"):
        agent.handle(Change(JOB_RESOURCE, "ADDED", absurd))
        agent.handle(Change(JOB_RESOURCE, "ADDED", job("fine", rv="11")))
        agent.handle(Change(JOB_RESOURCE, "MODIFIED", {**absurd, "metadata": absurd["metadata"]}))
    agent.flush(everything=True)
    # THEN only the ordinary one reaches the control plane; the other is logged once, with why
    observed = [
        e for _, e in map(parse_agent_event, landed(aws)) if isinstance(e, WorkloadObserved)
    ]
    assert [e.workload for e in observed] == ["ml/fine"]
    assert caplog.text.count("ml/absurd: 2147483647 pods") == 1
    assert agent.stats["invalid_workloads"] == 1
    # AND a Job of exactly the bound is reported as it is
    edge = workload_view(Kind.JOB, job("edge", parallelism=MAX_WORKLOAD_PODS))
    assert edge is not None and edge.refused == "" and edge.gang_size == MAX_WORKLOAD_PODS


def test_every_kind_is_bounded() -> None:
    jobset = {
        "metadata": {"name": "js", "namespace": "ml", "labels": {"muster.io/queue": "gpu"}},
        "spec": {
            "replicatedJobs": [
                {"replicas": 50_000, "template": {"spec": {"parallelism": 3, "template": {}}}}
            ]
        },
    }
    assert "150000 pods" in (workload_view(Kind.JOBSET, jobset) or pytest.fail()).refused
    obj = pytorchjob()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"] = {"replicas": 2**31 - 1, "template": {}}
    assert "2147483648 pods" in (workload_view(Kind.PYTORCHJOB, obj) or pytest.fail()).refused
    member = group_pod("grp-0", "7", min_available=str(2**31 - 1))
    group = pod_group_view("ml/grp@podgroup", [member])
    assert group is not None and "2147483647 pods" in group.refused
    # a pod group whose pods ask for half a GPU
    member = group_pod("grp-0", "7")
    member["spec"]["containers"] = [limits("500m")]
    group = pod_group_view("ml/grp@podgroup", [member])
    assert group is not None and "nvidia.com/gpu: '500m'" in group.refused


def test_a_group_of_refused_pods_is_not_reported(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
) -> None:
    agent = make_agent(aws["events"], clock, sleeps)
    agent.handle(Change(POD_RESOURCE, "ADDED", group_pod("grp-0", "7", min_available="200000")))
    agent.flush(everything=True)
    assert [e for _, e in map(parse_agent_event, landed(aws))] == []
    assert agent.stats["invalid_workloads"] == 1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"gang_size": MAX_WORKLOAD_PODS + 1}, "gangSize: must be at most 100000"),
        ({"gpus": MAX_WORKLOAD_PODS * 1024 + 1}, "gpus: must be at most"),
        ({"shape": ((MAX_WORKLOAD_PODS + 1, 0),)}, "podGpus[0].pods: must be at most"),
        ({"shape": ((1, 1025),)}, "podGpus[0].gpus: must be at most 1024"),
        ({"shape": ((60_000, 1), (60_000, 0))}, "podGpus: more than 100000 pods in all"),
    ],
)
def test_the_schema_refuses_what_no_agent_sends(fields: dict[str, Any], named: str) -> None:
    base: dict[str, Any] = {"gang_size": 1, "gpus": 0, "shape": ()} | fields
    detail = workload_detail(
        cluster="prod", workload="ml/x", kind="Job", queue="gpu", seq=1, **base
    )
    with pytest.raises(InvalidEvent) as raised:
        parse_agent_detail(WORKLOAD_OBSERVED, detail)
    assert any(named in error for error in raised.value.errors), raised.value.errors
