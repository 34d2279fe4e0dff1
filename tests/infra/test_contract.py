"""The stack and the runtime meet on the names in `muster.contract`.

These checks would catch a real mismatch between the two sides, not a copy that
drifted: a variable the runtime needs that the stack does not set, an alarm on a
metric (or with a dimension) that the runtime never emits, an ingest rule on a
source the agent does not send from.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from muster import contract
from muster.agent.sender import Entry, EventBridgeSender
from muster.aws.config import RuntimeConfig
from muster.aws.metrics import EmfMetrics
from muster.core import DeadlineReached, TimerKind
from muster.runtime.sweeper import sweep

from infra import constants as c
from tests.aws.conftest import Rig
from tests.infra.conftest import Synthesized

pytestmark = pytest.mark.slow


def resources(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def test_every_function_environment_is_one_the_runtime_reads(synthesized: Synthesized) -> None:
    for name, function in resources(synthesized.template, "AWS::Lambda::Function").items():
        env = function["Properties"]["Environment"]["Variables"]
        # CloudFormation references become placeholders: what matters is that each is set.
        plain = {k: v if isinstance(v, str) else f"<{k}>" for k, v in env.items()}
        config = RuntimeConfig.from_env(plain)
        assert config.table_name and config.admission_queue_url and config.timer_queue_url, name
        assert config.cluster_name == "training" or config.cluster_name, name
        assert env[contract.ENV_POWERTOOLS_SERVICE_NAME] == contract.SERVICE_NAME


def emitted_metrics(capsys: pytest.CaptureFixture[str]) -> dict[str, set[frozenset[str]]]:
    """What the runtime's EMF documents say: each metric with its sets of dimension names."""
    seen: dict[str, set[frozenset[str]]] = {}
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        for block in doc.get("_aws", {}).get("CloudWatchMetrics", []):
            assert block["Namespace"] == contract.METRICS_NAMESPACE
            for metric in block["Metrics"]:
                for dims in block["Dimensions"]:
                    seen.setdefault(metric["Name"], set()).add(frozenset(dims))
    return seen


def alarmed_metrics(template: dict[str, Any]) -> dict[str, set[frozenset[str]]]:
    """Every metric of the Muster namespace that an alarm watches, with its dimension names."""
    watched: dict[str, set[frozenset[str]]] = {}
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        stats = [m["MetricStat"]["Metric"] for m in props.get("Metrics", []) if "MetricStat" in m]
        if "MetricName" in props:
            stats.append(props)
        for metric in stats:
            if metric.get("Namespace") == contract.METRICS_NAMESPACE:
                dims = frozenset(d["Name"] for d in metric.get("Dimensions", []))
                watched.setdefault(metric["MetricName"], set()).add(dims)
    return watched


def test_every_alarm_watches_a_metric_the_runtime_emits_with_its_dimensions(
    synthesized: Synthesized, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.delenv(contract.ENV_POWERTOOLS_SERVICE_NAME, raising=False)
    # GIVEN the control plane with its real metrics adapter, through the stories alarms watch:
    # a startup timeout, a recovery timeout, a deactivation, and a quarantined workload
    rig = Rig(metrics=EmfMetrics())  # type: ignore[arg-type]
    rig.doc = {
        "timeout": "60s",
        "queues": {"strict": {"requeuingStrategy": {"backoffLimitCount": 0}}},
    }
    capsys.readouterr()
    rig.submit("ns/start", 1)
    rig.admit()
    rig.clock.now += 61
    rig.plane().handle(DeadlineReached("ns/start", 1, TimerKind.STARTUP, 1))
    rig.submit("ns/recover", 1)
    rig.admit()
    rig.pod("ns/recover", "p0", 1, ready=True)
    rig.pod("ns/recover", "p0", 2, ready=False)
    timer = rig.store.load("ns/recover").workload.timer  # type: ignore[union-attr]
    assert timer is not None and timer.kind is TimerKind.RECOVERY
    rig.clock.now = timer.deadline + 1
    rig.plane().handle(DeadlineReached("ns/recover", timer.attempt, timer.kind, timer.episode))
    rig.submit("ns/strict", 1, queue="strict")
    rig.admit()
    rig.clock.now += 61
    rig.plane().handle(DeadlineReached("ns/strict", 1, TimerKind.STARTUP, 1))
    assert rig.phase("ns/strict") == "Deactivated"
    sweep(rig.store, rig.messages, rig.settings(), rig.clock(), rig.metrics)
    emitted = emitted_metrics(capsys)
    # THEN every metric an alarm watches is emitted, with the dimensions the alarm names
    watched = alarmed_metrics(synthesized.template)
    assert watched, "no alarm on a Muster metric"
    for name, dimension_sets in watched.items():
        assert name in emitted, f"alarm on {name}, which the runtime never emits"
        assert dimension_sets <= emitted[name], (name, dimension_sets, emitted[name])


def test_the_ingest_rule_matches_what_the_agents_sender_sends(synthesized: Synthesized) -> None:
    sent: list[dict[str, Any]] = []

    class Client:
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            sent.extend(Entries)
            return {"Entries": [{} for _ in Entries]}

    EventBridgeSender(Client(), "bus").send(
        [Entry("a/b/p", contract.POD_OBSERVED, {"workload": "a/b"})]
    )
    (rule,) = [
        r
        for r in resources(synthesized.template, "AWS::Events::Rule").values()
        if "EventPattern" in r["Properties"]
    ]
    pattern = rule["Properties"]["EventPattern"]
    assert [e["Source"] for e in sent] == pattern["source"] == [c.AGENT_SOURCE]
