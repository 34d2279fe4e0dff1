"""A workload's key holds its kind: the key functions, and the schema's reading of them."""

from __future__ import annotations

import re

import pytest
from muster.core import Kind, WorkloadObserved
from muster.core.keys import canonical_key, kind_keys, parse_workload_key, workload_key
from muster.schema import (
    AGENT_SOURCE,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    InvalidEvent,
    parse_agent_event,
    pod_detail,
    workload_detail,
)


def envelope(detail_type: str, detail: dict) -> dict:
    return {"source": AGENT_SOURCE, "detail-type": detail_type, "detail": detail}


def test_a_job_keeps_namespace_slash_name_and_other_kinds_add_their_marker() -> None:
    assert workload_key(Kind.JOB, "ml", "train") == "ml/train"
    assert workload_key(Kind.JOBSET, "ml", "train") == "ml/train@jobset"
    assert workload_key(Kind.PYTORCHJOB, "ml", "train") == "ml/train@pytorchjob"
    assert workload_key(Kind.POD_GROUP, "ml", "train") == "ml/train@podgroup"
    assert len(set(kind_keys("ml", "train"))) == len(Kind)


@pytest.mark.parametrize("kind", list(Kind))
def test_a_key_splits_back_into_namespace_name_and_kind(kind: Kind) -> None:
    assert parse_workload_key(workload_key(kind, "ml", "a.b-1")) == ("ml", "a.b-1", kind)


def test_a_marker_is_read_in_any_case_and_stored_in_lower_case() -> None:
    assert parse_workload_key("ml/train@PyTorchJob") == ("ml", "train", Kind.PYTORCHJOB)
    assert canonical_key("ml/train@PyTorchJob") == "ml/train@pytorchjob"


@pytest.mark.parametrize("key", ["train", "ml/", "/train", "ml/a/b", "ml/train@", "ml/x@cronjob"])
def test_anything_else_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="expected 'namespace/name'"):
        parse_workload_key(key)


def observed(key: str, kind: str) -> dict:
    return workload_detail(cluster="c", workload=key, kind=kind, queue="q", gang_size=2, seq=1)


def test_the_schema_accepts_each_kinds_key() -> None:
    for kind in Kind:
        key = workload_key(kind, "ml", "train")
        _, event = parse_agent_event(envelope(WORKLOAD_OBSERVED, observed(key, kind.value)))
        assert isinstance(event, WorkloadObserved)
        assert (event.workload, event.kind) == (key, kind)


def test_a_key_without_a_marker_is_accepted_for_every_kind_as_older_agents_send_it() -> None:
    _, event = parse_agent_event(envelope(WORKLOAD_OBSERVED, observed("ml/train", "JobSet")))
    assert isinstance(event, WorkloadObserved) and event.kind is Kind.JOBSET


@pytest.mark.parametrize(
    ("key", "kind", "message"),
    [
        ("ml/train@jobset", "PyTorchJob", "is the key of a JobSet, not of a PyTorchJob"),
        ("ml/train@podgroup", "Job", "is the key of a PodGroup, not of a Job"),
        ("ml/train@JobSet", "JobSet", "the kind's marker is lower case"),
        ("ml/train@cronjob", "Job", "workload: expected 'namespace/name'"),
        ("ml/Train@jobset", "JobSet", "workload (name): 'Train' is not a DNS-1123 subdomain"),
    ],
)
def test_a_key_that_contradicts_its_kind_or_is_no_key_is_refused(
    key: str, kind: str, message: str
) -> None:
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        parse_agent_event(envelope(WORKLOAD_OBSERVED, observed(key, kind)))


def test_a_pods_workload_key_may_carry_a_marker() -> None:
    detail = pod_detail(
        cluster="c", workload="ml/train@pytorchjob", pod="train-master-0", seq=4, uid="u",
        phase="Running", ready=True, node="n1",
    )  # fmt: skip
    assert parse_agent_event(envelope(POD_OBSERVED, detail))[1].workload == "ml/train@pytorchjob"
