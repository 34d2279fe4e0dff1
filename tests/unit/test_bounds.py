"""Bounds at the edge: settings the runtime cannot carry out, event fields beyond
Kubernetes' limits, messages cut on a character boundary, JSON nested too deeply."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from muster.core import SettingsError, merge_settings, parse_settings
from muster.core.settings import MAX_DURATION_SECONDS
from muster.runtime.messages import parse_requeue_message, parse_timer_message
from muster.schema import (
    AGENT_SOURCE,
    MESSAGE_BYTES,
    NODE_OBSERVED,
    POD_OBSERVED,
    WORKLOAD_OBSERVED,
    InvalidEvent,
    clip_utf8,
    node_detail,
    parse_agent_event,
    pod_detail,
    workload_detail,
)

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"requeuingStrategy": {"backoffJitter": float("nan")}}, "backoffJitter"),
        ({"requeuingStrategy": {"backoffBaseSeconds": float("inf")}}, "backoffBaseSeconds"),
        ({"requeuingStrategy": {"backoffMaxSeconds": float("nan")}}, "backoffMaxSeconds"),
        ({"timeout": "100000000d"}, "timeout"),
        ({"timeout": "366d"}, "timeout"),
        ({"recoveryTimeout": "9000h"}, "recoveryTimeout"),
        ({"maxTimeout": 40_000_000}, "maxTimeout"),
        ({"requeuingStrategy": {"backoffLimitTimeout": "400d"}}, "backoffLimitTimeout"),
        ({"requeuingStrategy": {"backoffMaxSeconds": 1e12}}, "backoffMaxSeconds"),
        ({"queues": {"spot": {"timeout": "1000d"}}}, "queues.spot.timeout"),
    ],
)
def test_settings_the_runtime_cannot_carry_out_are_refused_naming_the_field(changes, field):
    with pytest.raises(SettingsError, match=field) as caught:
        merge_settings(parse_settings({}), changes)
    assert "finite" in str(caught.value) or "365d" in str(caught.value)


def test_a_year_is_the_longest_duration_and_it_is_accepted():
    settings = parse_settings({"timeout": "365d", "requeuingStrategy": {"backoffMaxSeconds": 3600}})
    assert settings.defaults.timeout == MAX_DURATION_SECONDS


def test_the_error_says_why_a_year():
    with pytest.raises(SettingsError) as caught:
        parse_settings({"timeout": "400d"})
    assert "Standard execution" in str(caught.value)


# --------------------------------------------------------------------------- event fields


def _pod(**overrides: object) -> dict:
    detail = pod_detail(
        cluster="training",
        workload="team-a/bert",
        pod="bert-0",
        seq=3,
        uid="8f0c2b7e-1d2a-4c55-9a1b-3e2f4d5c6b7a",
        phase="Pending",
        node="node-1",
        observed_at=WHEN,
    )
    detail.update(overrides)
    return {"source": AGENT_SOURCE, "detail-type": POD_OBSERVED, "detail": detail}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"workload": "../x"}, "workload"),
        ({"workload": "team-a/x?dryRun=All"}, "workload"),
        ({"workload": "Team-A/x"}, "workload"),
        ({"workload": "team-a/" + "x" * 254}, "workload"),
        ({"workload": "n" * 64 + "/x"}, "workload"),
        ({"pod": "p" * 1100}, "pod"),
        ({"pod": "p/../q"}, "pod"),
        ({"node": "node 1"}, "node"),
        ({"uid": "u" * 200}, "uid"),
    ],
)
def test_names_beyond_kubernetes_rules_are_rejected_naming_the_field(overrides, field):
    with pytest.raises(InvalidEvent, match=rf"^{field}"):
        parse_agent_event(_pod(**overrides))


def test_queue_and_health_must_be_label_values():
    workload = workload_detail(
        cluster="training", workload="a/b", kind="Job", queue="q" * 64, gang_size=1, seq=1
    )
    with pytest.raises(InvalidEvent, match=r"^queue"):
        parse_agent_event(
            {"source": AGENT_SOURCE, "detail-type": WORKLOAD_OBSERVED, "detail": workload}
        )
    node = node_detail(cluster="training", node="n1", seq=1, health="x" * 100)
    with pytest.raises(InvalidEvent, match=r"^health"):
        parse_agent_event({"source": AGENT_SOURCE, "detail-type": NODE_OBSERVED, "detail": node})


def test_a_workload_timeout_beyond_a_year_is_rejected():
    detail = workload_detail(
        cluster="training", workload="a/b", kind="Job", queue="q", gang_size=1, seq=1,
        timeout="100000000d",
    )  # fmt: skip
    with pytest.raises(InvalidEvent, match=r"^timeout"):
        parse_agent_event(
            {"source": AGENT_SOURCE, "detail-type": WORKLOAD_OBSERVED, "detail": detail}
        )


def test_messages_are_cut_at_a_byte_budget_on_a_character_boundary():
    crash = "💥 segfault in rank 3 " * 100  # 4-byte characters among 1-byte ones
    _, event = parse_agent_event(_pod(message=crash, reason="R" * 500))
    assert len(event.message.encode()) <= MESSAGE_BYTES  # type: ignore[union-attr]
    assert crash.startswith(event.message)  # type: ignore[union-attr, arg-type]
    assert len(event.reason.encode()) == 128  # type: ignore[union-attr]
    # The agent cuts the same way before sending.
    built = pod_detail(cluster="c", workload="a/b", pod="p", seq=1, message="é" * 1000)
    assert built["message"] == "é" * (MESSAGE_BYTES // 2)


@pytest.mark.parametrize("budget", range(0, 12))
def test_clip_never_splits_a_character(budget: int):
    text = "a€💥b"
    clipped = clip_utf8(text, budget)
    assert len(clipped.encode()) <= budget
    assert text.startswith(clipped)


def test_deeply_nested_json_is_a_clean_rejection_not_a_recursion_error():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidEvent, match="nested too deeply"):
        parse_requeue_message(deep)
    with pytest.raises(InvalidEvent, match="nested too deeply"):
        parse_timer_message(deep)
    assert json.loads("[" * 10 + "]" * 10)  # ordinary nesting is fine
