"""A pod group is charged from all its members: they must agree on what the charge is
made of, or the group is refused (never charged from one pod while the others ask
for more), and GPUs are the GPUs of each pod times the gang size."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from muster.agent.mapping import compact_pod, pod_group_view
from muster.agent.watch import Change
from muster.core.model import Kind, PodObserved, WorkloadObserved
from muster.kube.conventions import POD_RESOURCE
from muster.schema import parse_agent_event

from .test_agent import (  # noqa: F401 (fixtures)
    Clock,
    aws,
    clock,
    group_pod,
    landed,
    make_agent,
    sleeps,
)

KEY = "ml/grp@podgroup"


def member(i: int, gpus: str = "8", size: str = "64") -> dict[str, Any]:
    pod = group_pod(f"grp-{i:02d}", str(100 + i), min_available=size)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": gpus}}
    return pod


def test_a_zero_gpu_first_pod_does_not_make_the_group_free() -> None:
    # GIVEN one pod without GPUs, first by name, and 63 pods of 8 GPUs, gang of 64
    pods = [member(0, gpus="0"), *(member(i) for i in range(1, 64))]
    # WHEN the group is mapped
    view = pod_group_view(KEY, pods)
    # THEN it is refused (not charged 0 while its pods hold 504 GPUs), naming both pods
    assert view is not None
    assert view.refused == (
        "its pods disagree on GPUs per pod: grp-00 has 0, grp-01 has 8; "
        "every pod of a group must ask for the same"
    )


def test_a_group_whose_pods_agree_is_charged_every_pod_of_its_gang() -> None:
    view = pod_group_view(KEY, [member(i) for i in range(64)])
    assert view is not None and view.refused == ""
    assert (view.gang_size, view.gpus, view.shape) == (64, 512, ((64, 8),))


def test_the_same_gpus_written_another_way_agree() -> None:
    # "8000m" is 8: read exactly, the same charge
    view = pod_group_view(KEY, [member(0, gpus="8000m"), member(1, gpus="8")])
    assert view is not None and view.refused == "" and view.gpus == 64 * 8


def disagree(pod: dict[str, Any], what: str) -> None:
    notes, spec = pod["metadata"]["annotations"], pod["spec"]
    if what == "muster.io/queue":
        pod["metadata"]["labels"]["muster.io/queue"] = "other"
    elif what == "priorityClassName":
        spec["priorityClassName"] = "high"
    elif what == "priority":
        spec["priority"] = 1000
    elif what == "muster.io/min-available":
        notes[what] = "1"
    else:
        notes[what] = {"muster.io/priority": "9", "muster.io/timeout": "2h"}[what]


@pytest.mark.parametrize(
    "what",
    [
        "muster.io/min-available",
        "muster.io/queue",
        "muster.io/priority",
        "muster.io/timeout",
        "priorityClassName",
        "priority",
    ],
)
def test_members_that_disagree_on_the_charge_refuse_the_group(what: str) -> None:
    # GIVEN a gang of pods that agree but for the last one
    pods = [member(i, size="3") for i in range(3)]
    disagree(pods[2], what)
    # WHEN the group is mapped, THEN it is refused with the difference and both pods
    view = pod_group_view(KEY, pods)
    assert view is not None
    assert view.refused.startswith(f"its pods disagree on {what}: grp-00 has ")
    assert "grp-02 has " in view.refused
    # AND, whichever pod comes first, the group is refused all the same
    flipped = pod_group_view(KEY, [pods[2], *pods[:2]])
    assert flipped is not None and flipped.refused


def test_finished_members_of_an_earlier_run_do_not_refuse_the_next() -> None:
    # a pipeline runs the group again with more GPUs; the last run's pods succeeded
    old = member(0, gpus="1", size="2")
    old["status"] = {"phase": "Succeeded"}
    view = pod_group_view(KEY, [old, member(1, size="2"), member(2, size="2")])
    assert view is not None and view.refused == "" and view.gpus == 16


def test_a_compacted_group_pod_counts_its_sidecars() -> None:
    # one container of 1 GPU and two sidecars of 1 GPU each: 3 GPUs a pod
    pod = member(0, gpus="1", size="1")
    sidecar = {
        "name": "s",
        "restartPolicy": "Always",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    pod["spec"]["initContainers"] = [sidecar, {**copy.deepcopy(sidecar), "name": "t"}]
    full = pod_group_view(KEY, [pod])
    small = pod_group_view(KEY, [compact_pod(pod)])
    assert full is not None and small is not None
    assert full.gpus == small.gpus == 3


def test_the_agent_does_not_report_a_group_whose_members_disagree(
    aws: dict[str, Any],  # noqa: F811
    clock: Clock,  # noqa: F811
    sleeps: list[float],  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN the agent watching a zero-GPU pod and 63 pods of 8 GPUs of one group
    agent = make_agent(aws["events"], clock, sleeps)
    with caplog.at_level(logging.ERROR):
        agent.handle(Change(POD_RESOURCE, "ADDED", member(0, gpus="0")))
        for i in range(1, 64):
            agent.handle(Change(POD_RESOURCE, "ADDED", member(i)))
    agent.flush(everything=True)
    # THEN the group was reported while it had its one pod, never once its pods disagreed
    events = [e for _, e in map(parse_agent_event, landed(aws))]
    views = [e for e in events if isinstance(e, WorkloadObserved)]
    assert [(v.kind, v.gang_size, v.gpus) for v in views] == [(Kind.POD_GROUP, 64, 0)]
    assert agent.stats["invalid_workloads"] == 1
    assert caplog.text.count("its pods disagree on GPUs per pod: grp-00 has 0, grp-01 has 8") == 1
    # AND its pods were held back: the control plane counts one pod of 64, never
    # enough to admit the group on its free view and release 504 GPUs
    assert [e.pod for e in events if isinstance(e, PodObserved)] == ["grp-00"]
    # WHEN the odd pod is deleted, THEN the group is charged what its pods ask for
    # and the pods held back are reported
    agent.handle(Change(POD_RESOURCE, "DELETED", member(0, gpus="0")))
    agent.flush(everything=True)
    later = [e for _, e in map(parse_agent_event, landed(aws))]
    assert [(v.gang_size, v.gpus) for v in later if isinstance(v, WorkloadObserved)] == [(64, 512)]
    reported = [e.pod for e in later if isinstance(e, PodObserved) and not e.deleted]
    assert sorted(reported) == [f"grp-{i:02d}" for i in range(1, 64)]
