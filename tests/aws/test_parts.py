"""Codecs, names, messages, configuration and run-time settings."""

from __future__ import annotations

import json
import re

import pytest
from muster.aws.config import ConfigError, RuntimeConfig
from muster.aws.stepfunctions import execution_arn, execution_name
from muster.core import (
    Admit,
    Evict,
    Kind,
    LogEvent,
    Pod,
    Publish,
    Reason,
    Requeue,
    RunAdmission,
    SettingsError,
    StartTimer,
    Timer,
    TimerKind,
    Workload,
)
from muster.runtime.codec import decode_effect, decode_workload, encode_effect, encode_workload
from muster.runtime.memory import MemoryStore
from muster.runtime.messages import parse_timer_message, sqs_delay, timer_input
from muster.runtime.settings import RuntimeSettings, settings_from_json, update_settings
from muster.schema import InvalidEvent

ENV = {
    "MUSTER_TABLE_NAME": "muster",
    "MUSTER_EVENT_BUS_NAME": "muster",
    "MUSTER_ADMISSION_QUEUE_URL": "https://sqs/requeue",
    "MUSTER_TIMER_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:1:stateMachine:timer",
    "MUSTER_CLUSTER_NAME": "training",
}


def test_workload_and_effects_round_trip():
    timer = Timer(TimerKind.RECOVERY, 3, 2, 1234.5)
    w = Workload(
        "ns/a",
        "q",
        4,
        gpus=8,
        kind=Kind.JOBSET,
        timer=timer,
        evictions={"PodsReadyTimeout/WaitForStart": 2},
    )
    assert decode_workload(encode_workload(w)) == w
    effects = [
        Evict(
            "ns/a",
            3,
            Kind.JOBSET,
            Reason.PODS_READY_TIMEOUT,
            Reason.WAIT_FOR_START,
            (Pod("p", 2, node="n"),),
        ),
        StartTimer("ns/a", timer),
        Requeue("ns/a", 2, 120.0, 9999.0),
        Publish(LogEvent.EVICTED, "ns/a", {"notReady": [{"pod": "p"}]}),
        RunAdmission("evicted"),
        Admit("ns/g@podgroup", 2, Kind.POD_GROUP, size=8),
        Admit("ns/a", 2, Kind.JOB, "uid-a"),
    ]
    assert [decode_effect(encode_effect(e)) for e in effects] == effects


def test_execution_names_are_deterministic_legal_and_bounded():
    timer = Timer(TimerKind.STARTUP, 2, 1, 0.0)
    assert execution_name("team-a/bert-large", timer) == "team-a.bert-large.a2.startup.e1"
    long = "n" * 63 + "/" + "x" * 253
    name = execution_name(long, timer)
    assert len(name) <= 80 and re.fullmatch(r"[A-Za-z0-9_.-]+", name)
    assert name == execution_name(long, timer)
    assert name != execution_name(long[:-1] + "y", timer)
    arn = execution_arn("arn:aws:states:us-east-1:1:stateMachine:timer", "x")
    assert arn == "arn:aws:states:us-east-1:1:execution:timer:x"


def test_a_new_object_under_a_name_gets_new_execution_names_and_timer_messages():
    old = Timer(TimerKind.STARTUP, 1, 1, 0.0, incarnation="5f1c2a9b")
    new = Timer(TimerKind.STARTUP, 1, 1, 0.0, incarnation="0d3e7c11")
    assert execution_name("ns/a", old) == "ns.a.a1.startup.e1.5f1c2a9b"
    assert execution_name("ns/a", old) != execution_name("ns/a", new)
    assert len(execution_name("n" * 63 + "/" + "x" * 253, new)) <= 80
    event, _ = parse_timer_message(json.dumps(timer_input("ns/a", old)))
    assert event.incarnation == "5f1c2a9b"


def test_timer_message_round_trip_and_errors():
    body = timer_input("ns/a", Timer(TimerKind.STARTUP, 1, 1, 1796029499.2))
    assert body["deadline"] == "2026-11-30T09:05:00Z"  # rounded up: never early
    event, deadline = parse_timer_message(json.dumps(body))
    assert deadline == 1796029500.0
    assert (event.workload, event.attempt, event.kind, event.episode) == (
        "ns/a",
        1,
        TimerKind.STARTUP,
        1,
    )
    with pytest.raises(InvalidEvent, match="attempt"):
        parse_timer_message(json.dumps({**body, "attempt": "one"}))
    with pytest.raises(InvalidEvent, match="deadline"):
        parse_timer_message(json.dumps({**body, "deadline": "soon"}))


def test_sqs_delay_is_capped_at_fifteen_minutes():
    assert sqs_delay(0.2) == 1
    assert sqs_delay(60) == 60
    assert sqs_delay(3600) == 900
    assert sqs_delay(-5) == 0


def test_config_names_the_missing_variable():
    assert RuntimeConfig.from_env(ENV).history_ttl_days == 30
    with pytest.raises(ConfigError, match="MUSTER_CLUSTER_NAME"):
        RuntimeConfig.from_env({k: v for k, v in ENV.items() if k != "MUSTER_CLUSTER_NAME"})
    with pytest.raises(ConfigError, match="MUSTER_HISTORY_TTL_DAYS"):
        RuntimeConfig.from_env({**ENV, "MUSTER_HISTORY_TTL_DAYS": "a month"})


def test_settings_record_overrides_the_deployment_per_queue():
    store = MemoryStore()
    base = settings_from_json('{"timeout": "5m"}')
    effective = update_settings(store, base, {"queues": {"spot": {"timeout": "90s"}}})
    assert effective.for_queue("spot").timeout == 90
    live = RuntimeSettings(base, store)
    assert live().for_queue("spot").timeout == 90
    assert live().for_queue("other").timeout == 300


def test_bad_settings_are_refused_naming_the_field():
    store = MemoryStore()
    base = settings_from_json("")
    with pytest.raises(SettingsError, match="timout"):
        update_settings(store, base, {"timout": "5m"})
    assert store.settings_record() is None
    with pytest.raises(SettingsError, match="MUSTER_SETTINGS"):
        settings_from_json("{nope")


def test_emf_metrics_carry_the_service_and_the_named_dimensions(capsys):
    from muster.aws.metrics import EmfMetrics

    metrics = EmfMetrics(namespace="Muster", service="muster")
    metrics.count("Evictions", reason="PodsReadyTimeout", cause="WaitForStart")
    metrics.seconds("AdmittedToReadySeconds", 42.5)
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    meta = first["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == "Muster"
    assert sorted(meta["Dimensions"][0]) == ["cause", "reason", "service"]
    assert first["reason"] == "PodsReadyTimeout" and first["Evictions"] == [1.0]
    assert second["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] == "Seconds"
    assert second["AdmittedToReadySeconds"] == [42.5]


def test_metrics_honour_powertools_switch(monkeypatch, capsys) -> None:
    from muster.aws.metrics import EmfMetrics

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    EmfMetrics().count("Admissions")
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    EmfMetrics().count("Admissions")
    assert '"Admissions"' in capsys.readouterr().out


def test_a_kinds_key_never_shares_an_execution_name_with_a_job():
    timer = Timer(TimerKind.STARTUP, 1, 1, 0.0)
    # `@` becomes `_`, which no Kubernetes name holds: a Job named train-jobset stays apart
    assert execution_name("ml/train@jobset", timer) == "ml.train_jobset.a1.startup.e1"
    names = {execution_name(k, timer) for k in ("ml/train@jobset", "ml/train-jobset", "ml/train")}
    assert len(names) == 3
