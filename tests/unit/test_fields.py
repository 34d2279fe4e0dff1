"""The edges' one way of reading documents: every mistake named, all of them in one pass."""

from __future__ import annotations

import pytest
from muster.core.fields import (
    FieldErrors,
    boolean,
    check_keys,
    checked,
    collecting,
    duration,
    mapping,
    number,
    whole_number,
)
from muster.core.settings import SettingsError, parse_settings
from muster.runtime.messages import parse_requeue_message, parse_timer_message
from muster.schema import POD_OBSERVED, InvalidEvent, parse_agent_detail, pod_detail
from muster.sim.scenario import parse_scenario_text
from muster.sim.specs import ScenarioError

from infra import constants as c
from infra.config import ConfigError, load_config


class DocumentError(FieldErrors):
    pass


def test_inside_collecting_every_mistake_is_gathered_and_each_field_falls_back() -> None:
    doc = {"count": "three", "ratio": -1, "on": "yes", "wait": "soon", "extra": 1}
    seen: dict[str, object] = {}
    # WHEN a document with five wrong fields is read
    with pytest.raises(DocumentError) as caught, collecting(DocumentError):
        check_keys(doc, {"count", "ratio", "on", "wait"}, "spec.", "field")
        seen["count"] = whole_number(doc, "count", 1, "spec.")
        seen["ratio"] = number(doc, "ratio", 0.5, "spec.")
        seen["on"] = boolean(doc, "on", False, "spec.")
        seen["wait"] = duration(doc, "wait", 60.0, "spec.")
    # THEN one error lists all five, each with its path, and reading went on with fallbacks
    assert caught.value.errors == (
        "spec.extra: unknown field (known: count, on, ratio, wait)",
        "spec.count: expected a whole number, got 'three'",
        "spec.ratio: must not be negative, got -1",
        "spec.on: expected true or false, got 'yes'",
        caught.value.errors[4],
    )
    assert caught.value.errors[4].startswith("spec.wait: ")
    assert seen == {"count": 1, "ratio": 0.5, "on": False, "wait": 60.0}


def test_outside_collecting_the_first_mistake_raises() -> None:
    with pytest.raises(FieldErrors, match="n: must be at least 1, got 0"):
        whole_number({"n": 0}, "n", None, minimum=1)


def test_checked_gives_the_fallback_when_its_part_had_a_mistake() -> None:
    def part(doc: object) -> str:
        doc = mapping(doc, "part")
        whole_number(doc, "n", 0)  # recorded, not raised, inside collecting
        return "read"

    with pytest.raises(DocumentError) as caught, collecting(DocumentError):
        assert checked("fallback", part, {"n": "x"}) == "fallback"
        assert checked("fallback", part, [1]) == "fallback"
        assert checked("fallback", part, {"n": 1}) == "read"
    assert caught.value.errors == (
        "n: expected a whole number, got 'x'",
        "part: expected a mapping, got [1]",
    )


def test_an_unknown_key_suggests_the_nearest_known_one() -> None:
    with pytest.raises(SettingsError, match="timout: unknown setting; did you mean 'timeout'"):
        parse_settings({"timout": "5m"})


def test_an_event_with_three_wrong_fields_names_all_three() -> None:
    # GIVEN a pod event whose sequence, phase and readiness are all wrong
    detail = pod_detail(cluster="c", workload="a/b", pod="b-0", seq=4)
    detail.update(seq=-1, phase="Sleeping", ready="true")
    # WHEN the ingest path reads it
    with pytest.raises(InvalidEvent) as caught:
        parse_agent_detail(POD_OBSERVED, detail)
    # THEN one error names every field
    text = str(caught.value)
    assert "seq: must be at least 0, got -1" in text
    assert "phase: expected one of" in text
    assert "ready: expected true or false, got 'true'" in text
    assert len(caught.value.errors) == 3


def test_a_control_plane_message_with_two_wrong_fields_names_both() -> None:
    with pytest.raises(InvalidEvent) as caught:
        parse_timer_message(
            '{"workload": "", "attempt": -1, "kind": "startup", "episode": 0, "deadline": "2026-01-01T00:00:00Z"}'
        )
    assert len(caught.value.errors) == 2
    assert "workload: expected a non-empty string" in str(caught.value)
    assert "attempt: must be at least 0, got -1" in str(caught.value)
    with pytest.raises(InvalidEvent, match="retry: must be at least 0"):
        parse_requeue_message('{"type": "admission", "reason": "x", "retry": -2}')


def test_a_scenario_with_mistakes_in_several_places_names_them_all() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_text(
            "cluster: {nodes: 0}\nsettings: {timeout: soon}\n"
            "workloads: [{name: a, pods: two}]\nfaults: [{node: node-9, at: 1s}]\n"
        )
    text = str(caught.value)
    for field in ("cluster.nodes:", "settings.timeout:", "workloads[0].pods:", "faults[0].node:"):
        assert field in text


def test_the_cdk_context_names_every_wrong_key_in_one_run() -> None:
    context = {
        c.CTX_CLUSTER_NAME: "training",
        c.CTX_LOG_LEVEL: "chatty",
        c.CTX_HISTORY_TTL_DAYS: 0,
        c.CTX_SETTINGS: {"timeout": "soon", "dryRun": "yes"},
    }
    with pytest.raises(ConfigError) as caught:
        load_config(context.get)
    assert len(caught.value.errors) == 4, caught.value.errors
    assert any(e.startswith(f"{c.CTX_LOG_LEVEL}:") for e in caught.value.errors)
    assert any(e.startswith(f"{c.CTX_HISTORY_TTL_DAYS}:") for e in caught.value.errors)
    assert any(e.startswith(f"{c.CTX_SETTINGS}.timeout:") for e in caught.value.errors)
    assert any(e.startswith(f"{c.CTX_SETTINGS}.dryRun:") for e in caught.value.errors)
