"""Deployment configuration: defaults, and errors that name the context key."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra import constants as c
from infra.app import cdk_json_context
from infra.config import ConfigError, load_config
from tests.infra.conftest import REPO_ROOT, deployment_context, offline_env

INSTALL = REPO_ROOT / "docs" / "install.md"


def config_of(**context: Any) -> Any:
    base = {c.CTX_CLUSTER_NAME: "training"}
    base.update(context)
    return load_config(base.get)


def test_defaults_match_the_documented_ones() -> None:
    # GIVEN only a cluster name WHEN the configuration is loaded
    config = config_of()
    # THEN every other key takes its documented default
    assert config.stack_name == "Muster"
    assert config.log_retention_days == 30
    assert config.removal_policy == "retain"
    assert config.create_eks_access_entries is True
    assert config.history_ttl_days == 30
    assert config.alarm_thresholds.dlq_messages == 1
    assert config.settings_json == "{}"


def test_the_shipped_cdk_json_is_valid_once_a_cluster_is_named() -> None:
    config = load_config(deployment_context().get)
    assert json.loads(config.settings_json)["timeout"] == "5m"


def test_the_shipped_cdk_json_names_no_cluster_so_a_forgotten_one_is_refused() -> None:
    # GIVEN cdk.json as shipped WHEN it is read without `-c muster:clusterName=...`
    with pytest.raises(ConfigError) as failure:
        load_config(cdk_json_context().get)
    # THEN the cluster is required, not quietly some other cluster's name
    assert failure.value.errors == (
        f"{c.CTX_CLUSTER_NAME}: required; the name of the EKS cluster Muster manages "
        f"(set it in cdk.json or pass -c {c.CTX_CLUSTER_NAME}=NAME)",
    )


def test_a_synth_with_bad_configuration_names_every_mistake_and_exits_2(tmp_path: Path) -> None:
    # GIVEN `python app.py` with no cluster and a settings document with a mistake
    # (the one docs/install.md quotes)
    quoted = re.search(r"\(for example\s+`([^`]+)`\)", INSTALL.read_text())
    assert quoted is not None, "docs/install.md no longer quotes a synth error"
    settings = json.dumps({"requeuingStrategy": {"timestamp": "Later"}})
    # WHEN it is synthesised
    done = subprocess.run(
        [sys.executable, "app.py", "-c", f"{c.CTX_SETTINGS}={settings}"],
        cwd=REPO_ROOT,
        env=offline_env() | {"CDK_OUTDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    # THEN one message lists both mistakes, worded as the docs quote it; no traceback
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{c.CTX_CLUSTER_NAME}: required" in done.stderr
    assert " ".join(quoted.group(1).split()) in done.stderr


def test_command_line_strings_are_accepted() -> None:
    # WHEN values come from `cdk -c key=value` (always strings)
    config = config_of(
        **{
            c.CTX_LOG_RETENTION_DAYS: "90",
            c.CTX_CREATE_EKS_ACCESS: "false",
            c.CTX_SETTINGS: '{"timeout": "10m", "blockAdmission": true}',
            c.CTX_ALARM_THRESHOLDS: '{"evictionsPerHour": 5}',
        }
    )
    assert config.log_retention_days == 90
    assert config.create_eks_access_entries is False
    assert json.loads(config.settings_json) == {"blockAdmission": True, "timeout": "10m"}
    assert config.alarm_thresholds.evictions_per_hour == 5


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({c.CTX_CLUSTER_NAME: ""}, c.CTX_CLUSTER_NAME),
        ({c.CTX_CLUSTER_NAME: "bad name"}, c.CTX_CLUSTER_NAME),
        ({c.CTX_SETTINGS: {"timout": "5m"}}, "muster:settings.timout"),
        ({c.CTX_SETTINGS: {"timeout": "five minutes"}}, "muster:settings.timeout"),
        (
            {c.CTX_SETTINGS: {"requeuingStrategy": {"timestamp": "Later"}}},
            "muster:settings.requeuingStrategy.timestamp",
        ),
        (
            {c.CTX_SETTINGS: {"requeuingStrategy": {"backoffLimitCount": -1}}},
            "muster:settings.requeuingStrategy.backoffLimitCount",
        ),
        (
            {c.CTX_SETTINGS: {"queues": {"gpu": {"blockAdmission": True}}}},
            "muster:settings.queues.gpu.blockAdmission",
        ),
        ({c.CTX_SETTINGS: "{not json"}, c.CTX_SETTINGS),
        ({c.CTX_LOG_RETENTION_DAYS: 31}, c.CTX_LOG_RETENTION_DAYS),
        ({c.CTX_REMOVAL_POLICY: "keep"}, c.CTX_REMOVAL_POLICY),
        ({c.CTX_ALARM_EMAIL: "not-an-address"}, c.CTX_ALARM_EMAIL),
        ({c.CTX_ALARM_TOPIC_ARN: "arn:aws:sqs:eu-west-1:123456789012:x"}, c.CTX_ALARM_TOPIC_ARN),
        ({c.CTX_ALARM_THRESHOLDS: {"evictions": 3}}, "muster:alarmThresholds.evictions"),
        ({c.CTX_ALARM_THRESHOLDS: {"dlqMessages": 0}}, "muster:alarmThresholds.dlqMessages"),
        ({c.CTX_CREATE_EKS_ACCESS: "yes"}, c.CTX_CREATE_EKS_ACCESS),
        ({c.CTX_AGENT_NAMESPACE: "Muster_System"}, c.CTX_AGENT_NAMESPACE),
        ({c.CTX_HISTORY_TTL_DAYS: 0}, c.CTX_HISTORY_TTL_DAYS),
        ({c.CTX_LOG_LEVEL: "chatty"}, c.CTX_LOG_LEVEL),
    ],
)
def test_bad_input_names_the_key(context: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_of(**context)
    assert str(error.value).startswith(named + ":")


def test_valid_settings_pass_through_unchanged() -> None:
    settings = {
        "timeout": "1h30m",
        "recoveryTimeout": "0s",
        "maxTimeout": 7200,
        "dryRun": True,
        "gpuQuota": 64,
        "requeuingStrategy": {
            "timestamp": "Creation",
            "backoffLimitCount": 5,
            "backoffLimitTimeout": "2h",
            "backoffBaseSeconds": 30,
            "backoffMaxSeconds": 1800,
            "backoffJitter": 0.2,
        },
        "queues": {"spot": {"timeout": "15m", "nodeReplacementEviction": False}},
    }
    assert json.loads(config_of(**{c.CTX_SETTINGS: settings}).settings_json) == settings


@pytest.mark.parametrize("source", ["app.py", "infra/config.py"])
def test_where_the_app_sends_a_reader_exists(source: str) -> None:
    # GIVEN the CDK entry point and its configuration's docstrings
    text = (REPO_ROOT / source).read_text()
    # WHEN they name a section of a document
    pointers = re.findall(r"(docs/[\w.]+\.md),? \(\"([^\"]+)\"\)", text)
    # THEN each such section exists, and none is the README's (which has no Deploy section)
    assert pointers, f"{source} names no section of the docs"
    for doc, heading in pointers:
        headings = re.findall(r"^#+ (.+)$", (REPO_ROOT / doc).read_text(), flags=re.MULTILINE)
        assert any(h.startswith(heading) for h in headings), (source, doc, heading)
    assert "README's" not in text and "in the README" not in text
