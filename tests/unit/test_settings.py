"""Settings: Kueue's names and defaults, strict parsing, per-queue overrides."""

from __future__ import annotations

import json

import pytest
from muster.core import (
    DEFAULT_SETTINGS,
    SettingsError,
    Timestamp,
    load_settings_text,
    merge_settings,
    parse_duration,
    parse_settings,
)
from muster.core.durations import DurationError, format_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("5m", 300),
        ("1h30m", 5400),
        ("0s", 0),
        (90, 90),
        ("90", 90),
        ("1.5h", 5400),
        ("250ms", 0.25),
    ],
)
def test_durations_accept_kubernetes_style_and_plain_seconds(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["-5m", "5 minutes", "m5", "", "1h-30m", -1, True, None, [], "5mm"])
def test_malformed_or_negative_durations_are_rejected(bad: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(bad)


def test_format_duration_round_trips() -> None:
    for seconds in (0, 1, 59, 60, 90, 3600, 5400, 86399):
        assert parse_duration(format_duration(seconds)) == seconds


def test_defaults_match_kueue() -> None:
    q = DEFAULT_SETTINGS.defaults
    assert q.timeout == 300
    assert q.recovery_timeout is None and q.effective_recovery_timeout == 300
    assert DEFAULT_SETTINGS.block_admission is False
    assert q.timestamp is Timestamp.EVICTION
    assert q.backoff_limit_count is None
    assert (q.backoff_base_seconds, q.backoff_max_seconds) == (60, 3600)
    assert q.backoff_jitter == 0
    assert q.dry_run is False


def test_a_full_document_is_parsed_with_its_names() -> None:
    s = parse_settings(
        {
            "timeout": "10m",
            "recoveryTimeout": "0s",
            "blockAdmission": True,
            "gpuQuota": 64,
            "requeuingStrategy": {
                "timestamp": "Creation",
                "backoffLimitCount": 3,
                "backoffLimitTimeout": "2h",
                "backoffBaseSeconds": 10,
                "backoffMaxSeconds": 600,
                "backoffJitter": 0.2,
            },
            "maxTimeout": "30m",
            "dryRun": True,
            "nodeReplacementEviction": False,
        }
    )
    q = s.defaults
    assert (q.timeout, q.recovery_timeout, q.effective_recovery_timeout) == (600, 0, 0)
    assert s.block_admission and s.gpu_quota == 64
    assert q.timestamp is Timestamp.CREATION
    assert (q.backoff_limit_count, q.backoff_limit_timeout) == (3, 7200)
    assert (q.backoff_base_seconds, q.backoff_max_seconds, q.backoff_jitter) == (10, 600, 0.2)
    assert q.max_timeout == 1800 and q.dry_run and not q.node_replacement_eviction


def test_queue_overrides_inherit_the_rest_from_the_global_settings() -> None:
    s = parse_settings(
        {
            "timeout": "2m",
            "requeuingStrategy": {"backoffLimitCount": 5},
            "queues": {"spot": {"requeuingStrategy": {"backoffLimitCount": 20}, "gpuQuota": 16}},
        }
    )
    spot = s.for_queue("spot")
    assert spot.timeout == 120 and spot.backoff_limit_count == 20 and spot.gpu_quota == 16
    other = s.for_queue("anything-else")
    assert other.backoff_limit_count == 5 and other.gpu_quota is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"timeot": "5m"}, "timeot: unknown setting; did you mean 'timeout'?"),
        (
            {"requeuingStrategy": {"backofLimitCount": 1}},
            "requeuingStrategy.backofLimitCount: unknown setting; did you mean 'backoffLimitCount'?",
        ),
        ({"timeout": "-1m"}, "timeout: duration '-1m' is negative"),
        ({"timeout": "0s"}, "timeout: must be greater than 0s"),
        ({"timeout": "five"}, "timeout: malformed duration"),
        ({"requeuingStrategy": {"backoffLimitCount": -1}}, "backoffLimitCount: must be at least 0"),
        (
            {"requeuingStrategy": {"backoffLimitCount": 1.5}},
            "backoffLimitCount: expected a whole number",
        ),
        (
            {"requeuingStrategy": {"timestamp": "Admission"}},
            "timestamp: must be 'Eviction' or 'Creation'",
        ),
        (
            {"requeuingStrategy": {"backoffBaseSeconds": 100, "backoffMaxSeconds": 10}},
            "backoffMaxSeconds: 10 is below backoffBaseSeconds 100",
        ),
        ({"requeuingStrategy": {"backoffJitter": 2}}, "backoffJitter: must be between 0 and 1"),
        ({"blockAdmission": "yes"}, "blockAdmission: expected true or false"),
        (
            {"queues": {"a": {"blockAdmission": True}}},
            "queues.a.blockAdmission: blockAdmission is cluster-wide",
        ),
        ({"queues": {"a": {"timout": "1m"}}}, "queues.a.timout: unknown setting"),
        ({"gpuQuota": -4}, "gpuQuota: must be at least 0"),
        ({"capacityCheck": "on"}, "capacityCheck: expected true or false, got 'on'"),
        (
            {"queues": {"a": {"capacityCheck": True}}},
            "queues.a.capacityCheck: capacityCheck is cluster-wide",
        ),
        ({"capacityChek": True}, "did you mean 'capacityCheck'?"),
    ],
)
def test_bad_settings_name_the_field(doc: dict, message: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_settings(doc)
    assert message in str(err.value)


def test_the_capacity_check_is_off_by_default_and_round_trips() -> None:
    assert parse_settings({}).capacity_check is False
    assert "capacityCheck" not in parse_settings({}).to_dict()
    on = parse_settings({"capacityCheck": True})
    assert on.capacity_check and parse_settings(on.to_dict()) == on
    assert not merge_settings(on, {"capacityCheck": False}).capacity_check


def test_text_loading_names_the_source_and_accepts_json() -> None:
    assert load_settings_text(json.dumps({"timeout": "1m"})).defaults.timeout == 60
    with pytest.raises(SettingsError, match=r"^cluster.yaml: timeot: unknown setting"):
        load_settings_text("timeot: 5m\n", "cluster.yaml")
    with pytest.raises(SettingsError, match="not valid YAML"):
        load_settings_text("timeout: [5m\n", "cluster.yaml")


def test_to_dict_round_trips_and_merge_changes_one_field() -> None:
    s = parse_settings(
        {"timeout": "90s", "blockAdmission": True, "queues": {"q": {"dryRun": True}}}
    )
    assert parse_settings(s.to_dict()) == s
    merged = merge_settings(s, {"requeuingStrategy": {"backoffLimitCount": 2}})
    assert merged.defaults.backoff_limit_count == 2
    assert merged.defaults.timeout == 90 and merged.block_admission
    assert merged.for_queue("q").dry_run and merged.for_queue("q").backoff_limit_count == 2
    with pytest.raises(SettingsError):
        merge_settings(s, {"timeout": "-3s"})


def test_a_workload_timeout_is_capped_by_the_administrator() -> None:
    no_cap = parse_settings({"timeout": "5m"}).defaults
    assert no_cap.startup_timeout(None) == 300
    assert no_cap.startup_timeout(60) == 60  # shortening is always allowed
    assert no_cap.startup_timeout(3600) == 300  # lengthening needs maxTimeout
    capped = parse_settings({"timeout": "5m", "maxTimeout": "20m"}).defaults
    assert capped.startup_timeout(900) == 900
    assert capped.startup_timeout(7200) == 1200


def test_every_mistake_of_a_document_is_reported_at_once_with_its_path() -> None:
    # GIVEN a document with mistakes at the top, in the strategy, in a queue and in access
    doc = {
        "timeot": "5m",
        "requeuingStrategy": {"backoffJitter": 2, "timestamp": "Admission"},
        "blockAdmission": "yes",
        "queues": {"a": {"timeout": "five", "blockAdmission": True}, "b": {"dryRun": 1}},
        "queueAccess": {"queues": {"c": {"maxPriority": "high"}}},
    }
    # WHEN it is parsed
    with pytest.raises(SettingsError) as err:
        parse_settings(doc)
    # THEN one error carries every mistake, each naming its field
    paths = [e.split(":")[0] for e in err.value.errors]
    assert paths == [
        "timeot",
        "requeuingStrategy.timestamp",
        "requeuingStrategy.backoffJitter",
        "blockAdmission",
        "queues.a.blockAdmission",
        "queues.a.timeout",
        "queues.b.dryRun",
        "queueAccess.queues.c.maxPriority",
    ]
    assert str(err.value).splitlines() == list(err.value.errors)


def test_a_single_mistake_reads_as_before_and_text_loading_prefixes_every_error() -> None:
    with pytest.raises(SettingsError) as one:
        parse_settings({"timeout": "0s"})
    assert str(one.value) == "timeout: must be greater than 0s"
    with pytest.raises(SettingsError) as two:
        load_settings_text("timeot: 5m\ndryRun: maybe\n", "cluster.yaml")
    assert [e.split(": ")[:2] for e in two.value.errors] == [
        ["cluster.yaml", "timeot"],
        ["cluster.yaml", "dryRun"],
    ]


def test_the_effective_settings_are_the_record_over_the_deployment_unless_it_is_invalid():
    from muster.runtime.settings import effective_settings

    base = parse_settings({"timeout": "5m"})
    # GIVEN no record, a valid one and one with a typo
    assert effective_settings(base, None) == (base, None)
    merged, problem = effective_settings(base, {"timeout": "2m"})
    assert problem is None and merged.for_queue("q").timeout == 120
    kept, problem = effective_settings(base, {"timout": "2m"})
    # THEN a bad record is not used, and its error names the field
    assert kept is base and problem is not None and "timout" in str(problem)
