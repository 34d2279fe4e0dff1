"""Deployment configuration read from CDK context (cdk.json or `cdk -c key=value`).

Every key is documented in docs/install.md ("Context keys"). Values given on the
command line arrive as strings, so numbers, booleans and JSON documents are
accepted in either form. Bad input raises one `ConfigError` that names every
wrong key (read with `muster.core.fields`, as settings, events and scenarios are).

The settings document is passed through to the functions as JSON
(`MUSTER_SETTINGS`) and validated here by the decision core's settings parser,
the one pure module of the `muster` package the infrastructure uses, so that a
typo fails at synth rather than at the first event, with the same message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from muster.core.fields import FieldErrors, collecting, problem

from infra import constants as c
from infra.network import NetworkConfig, NetworkConfigError, load_network


class ConfigError(FieldErrors):
    """Unusable deployment configuration; each of its `errors` names the context key."""

    default = "invalid deployment configuration"


# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192,
    2557, 2922, 3288, 3653,
)  # fmt: skip
REMOVAL_POLICIES = ("retain", "destroy")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True, slots=True)
class AlarmThresholds:
    """When the alarms fire; each is documented, as `muster:alarmThresholds`, in
    docs/install.md ("Context keys")."""

    dlq_messages: int = 1
    function_errors: int = 1
    function_throttles: int = 10
    ingest_oldest_message_seconds: int = 300
    timer_oldest_message_seconds: int = 300
    admission_oldest_message_seconds: int = 1800
    timer_executions_failed: int = 1
    evictions_per_hour: int = 20
    deactivations_per_hour: int = 1
    quarantined_workloads: int = 1


_THRESHOLD_KEYS = {
    "dlqMessages": "dlq_messages",
    "functionErrors": "function_errors",
    "functionThrottles": "function_throttles",
    "ingestOldestMessageSeconds": "ingest_oldest_message_seconds",
    "timerOldestMessageSeconds": "timer_oldest_message_seconds",
    "admissionOldestMessageSeconds": "admission_oldest_message_seconds",
    # The admission queue's former name, still read so that older contexts deploy.
    "requeueOldestMessageSeconds": "admission_oldest_message_seconds",
    "timerExecutionsFailed": "timer_executions_failed",
    "evictionsPerHour": "evictions_per_hour",
    "deactivationsPerHour": "deactivations_per_hour",
    "quarantinedWorkloads": "quarantined_workloads",
}


@dataclass(frozen=True, slots=True)
class MusterConfig:
    """Everything a deployment may choose, resolved with defaults."""

    cluster_name: str
    stack_name: str = c.DEFAULT_STACK_NAME
    settings: Mapping[str, Any] = field(default_factory=dict)
    alarm_email: str | None = None
    alarm_topic_arn: str | None = None
    alarm_thresholds: AlarmThresholds = field(default_factory=AlarmThresholds)
    log_retention_days: int = 30
    removal_policy: str = "retain"
    create_eks_access_entries: bool = True
    agent_namespace: str = c.DEFAULT_AGENT_NAMESPACE
    agent_service_account: str = c.DEFAULT_AGENT_SERVICE_ACCOUNT
    history_ttl_days: int = 30
    log_level: str = "INFO"
    sweep_minutes: int = c.DEFAULT_SWEEP_MINUTES
    network: NetworkConfig | None = None
    tuner: bool = False  # `muster tune --on aws`'s distributed map (infra/tuner.py)
    tuner_concurrency: int = c.DEFAULT_TUNER_CONCURRENCY

    @property
    def settings_json(self) -> str:
        return json.dumps(dict(self.settings), sort_keys=True, separators=(",", ":"))


def load_config(get: Callable[[str], Any]) -> MusterConfig:
    """Configuration from a context lookup such as `app.node.try_get_context`."""
    with collecting(ConfigError):
        config = _read(get)
    return config


def _read(get: Callable[[str], Any]) -> MusterConfig:
    cluster, stack_name = _cluster_and_stack(get)
    settings = _document(get, c.CTX_SETTINGS)
    check_settings(settings)
    email, topic_arn = _alarm_targets(get)
    thresholds = _thresholds(_document(get, c.CTX_ALARM_THRESHOLDS))
    retention = _log_retention(get)
    removal = _removal_policy(get)
    level = _log_level(get)
    sweep = _sweep_minutes(get)
    ttl = _history_ttl(get)
    namespace, account = _agent_identity(get)
    return MusterConfig(
        cluster_name=cluster or "",
        stack_name=stack_name,
        settings=settings,
        alarm_email=email,
        alarm_topic_arn=topic_arn,
        alarm_thresholds=thresholds,
        log_retention_days=retention,
        removal_policy=removal,
        create_eks_access_entries=_boolean(get, c.CTX_CREATE_EKS_ACCESS, True),
        agent_namespace=namespace or c.DEFAULT_AGENT_NAMESPACE,
        agent_service_account=account or c.DEFAULT_AGENT_SERVICE_ACCOUNT,
        history_ttl_days=ttl,
        log_level=level,
        sweep_minutes=sweep,
        network=_network(get),
        tuner=_boolean(get, c.CTX_TUNER, False),
        tuner_concurrency=_tuner_concurrency(get),
    )


# ---------------------------------------------------------------- the values, each checked


def _cluster_and_stack(get: Callable[[str], Any]) -> tuple[str | None, str]:
    cluster = _string(get, c.CTX_CLUSTER_NAME, None)
    if not cluster:
        problem(
            f"{c.CTX_CLUSTER_NAME}: required; the name of the EKS cluster Muster manages "
            f"(set it in cdk.json or pass -c {c.CTX_CLUSTER_NAME}=NAME)"
        )
    elif not re.fullmatch(r"[0-9A-Za-z][A-Za-z0-9\-_]{0,99}", cluster):
        problem(f"{c.CTX_CLUSTER_NAME}: {cluster!r} is not a valid EKS cluster name")
    stack_name = _string(get, c.CTX_STACK_NAME, c.DEFAULT_STACK_NAME) or c.DEFAULT_STACK_NAME
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,127}", stack_name):
        problem(f"{c.CTX_STACK_NAME}: {stack_name!r} is not a valid stack name")
    return cluster, stack_name


def _alarm_targets(get: Callable[[str], Any]) -> tuple[str | None, str | None]:
    email = _string(get, c.CTX_ALARM_EMAIL, None) or None
    if email is not None and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
        problem(f"{c.CTX_ALARM_EMAIL}: {email!r} is not an e-mail address")
    topic_arn = _string(get, c.CTX_ALARM_TOPIC_ARN, None) or None
    if topic_arn is not None and not re.fullmatch(r"arn:aws[a-z-]*:sns:[^:]+:\d{12}:.+", topic_arn):
        problem(f"{c.CTX_ALARM_TOPIC_ARN}: {topic_arn!r} is not an SNS topic ARN")
    return email, topic_arn


def _log_retention(get: Callable[[str], Any]) -> int:
    retention = _integer(get, c.CTX_LOG_RETENTION_DAYS, 30)
    if retention not in LOG_RETENTION_DAYS:
        problem(
            f"{c.CTX_LOG_RETENTION_DAYS}: {retention} is not a CloudWatch Logs retention; "
            f"use one of {', '.join(map(str, LOG_RETENTION_DAYS))}"
        )
    return retention


def _removal_policy(get: Callable[[str], Any]) -> str:
    removal = (_string(get, c.CTX_REMOVAL_POLICY, "retain") or "retain").lower()
    if removal not in REMOVAL_POLICIES:
        problem(f"{c.CTX_REMOVAL_POLICY}: must be one of {REMOVAL_POLICIES}, got {removal!r}")
    return removal


def _log_level(get: Callable[[str], Any]) -> str:
    level = (_string(get, c.CTX_LOG_LEVEL, "INFO") or "INFO").upper()
    if level not in LOG_LEVELS:
        problem(f"{c.CTX_LOG_LEVEL}: must be one of {LOG_LEVELS}, got {level!r}")
    return level


def _sweep_minutes(get: Callable[[str], Any]) -> int:
    sweep = _integer(get, c.CTX_SWEEP_MINUTES, c.DEFAULT_SWEEP_MINUTES)
    if not 1 <= sweep <= 1440:
        problem(f"{c.CTX_SWEEP_MINUTES}: minutes between sweeps, from 1 to 1440, got {sweep}")
    return sweep


def _tuner_concurrency(get: Callable[[str], Any]) -> int:
    found = _integer(get, c.CTX_TUNER_CONCURRENCY, c.DEFAULT_TUNER_CONCURRENCY)
    if not 1 <= found <= c.TUNER_MAX_CONCURRENCY:
        problem(
            f"{c.CTX_TUNER_CONCURRENCY}: settings simulated at once, from 1 to "
            f"{c.TUNER_MAX_CONCURRENCY}, got {found}"
        )
    return found


def _history_ttl(get: Callable[[str], Any]) -> int:
    ttl = _integer(get, c.CTX_HISTORY_TTL_DAYS, 30)
    if ttl < 1:
        problem(f"{c.CTX_HISTORY_TTL_DAYS}: must be at least 1 day, got {ttl}")
    return ttl


def _agent_identity(get: Callable[[str], Any]) -> tuple[str | None, str | None]:
    """The agent's namespace and service account, each a Kubernetes name."""
    namespace = _string(get, c.CTX_AGENT_NAMESPACE, c.DEFAULT_AGENT_NAMESPACE)
    account = _string(get, c.CTX_AGENT_SERVICE_ACCOUNT, c.DEFAULT_AGENT_SERVICE_ACCOUNT)
    for key, value in ((c.CTX_AGENT_NAMESPACE, namespace), (c.CTX_AGENT_SERVICE_ACCOUNT, account)):
        if not value or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", value):
            problem(f"{key}: {value!r} is not a Kubernetes name")
    return namespace, account


# ---------------------------------------------------------------- settings


def check_settings(doc: Mapping[str, Any]) -> None:
    """Validate the settings document with the decision core's own parser.

    `muster.core.settings` is pure (no AWS, no I/O), so synth rejects exactly what
    the functions would reject, with the same messages, under the context key.
    """
    from muster.core.settings import SettingsError, parse_settings

    try:
        parse_settings(doc)
    except SettingsError as exc:
        for error in exc.errors:
            problem(f"{c.CTX_SETTINGS}.{error}")


# ---------------------------------------------------------------- context value helpers
# Each records a mistake (see `muster.core.fields.problem`) and returns the default.


def _string(get: Callable[[str], Any], key: str, default: str | None) -> str | None:
    value = get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        problem(f"{key}: expected a string, got {value!r}")
        return default
    return value.strip()


def _integer(get: Callable[[str], Any], key: str, default: int) -> int:
    value = get(key)
    if value is None:
        return default
    if isinstance(value, str) and re.fullmatch(r"\d+", value.strip()):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    problem(f"{key}: expected a whole number, got {value!r}")
    return default


def _boolean(get: Callable[[str], Any], key: str, default: bool) -> bool:
    value = get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    problem(f"{key}: expected true or false, got {value!r}")
    return default


def _document(get: Callable[[str], Any], key: str) -> dict[str, Any]:
    value = get(key)
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            problem(f"{key}: not valid JSON ({exc.msg} at column {exc.colno})")
            return {}
    if not isinstance(value, Mapping):
        problem(f"{key}: expected a JSON object, got {value!r}")
        return {}
    return dict(value)


def _thresholds(doc: Mapping[str, Any]) -> AlarmThresholds:
    values: dict[str, int] = {}
    for key, value in doc.items():
        attr = _THRESHOLD_KEYS.get(key)
        name = f"{c.CTX_ALARM_THRESHOLDS}.{key}"
        if attr is None:
            problem(f"{name}: unknown threshold; known: {', '.join(sorted(_THRESHOLD_KEYS))}")
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problem(f"{name}: expected a whole number of at least 1, got {value!r}")
        else:
            values[attr] = value
    return AlarmThresholds(**values)


def _network(get: Callable[[str], Any]) -> NetworkConfig | None:
    try:
        return load_network(get)
    except NetworkConfigError as exc:
        raise ConfigError(str(exc)) from None
