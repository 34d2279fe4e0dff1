"""The functions' environment, parsed once into a typed value (errors name every variable)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from muster import contract
from muster.core.fields import FieldErrors, collecting, problem


class ConfigError(FieldErrors):
    """Required environment variables are missing or malformed; each error names one."""

    default = "invalid environment"


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    table_name: str
    event_bus_name: str
    admission_queue_url: str
    timer_state_machine_arn: str
    cluster_name: str
    settings_json: str = ""
    history_ttl_days: int = 30
    timer_queue_url: str = ""  # where deadline signals go (re-armed or sent by the sweeper)
    ingest_queue_url: str = ""  # where reconciliation slices go (unset: run in the call)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeConfig:
        env = os.environ if env is None else env
        with collecting(ConfigError):
            config = cls._read(env)
        return config

    @classmethod
    def _read(cls, env: Mapping[str, str]) -> RuntimeConfig:
        def required(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                problem(f"{name}: required environment variable is not set")
            return value

        ttl_text = env.get(contract.ENV_HISTORY_TTL_DAYS, "30").strip() or "30"
        ttl = 30
        if not ttl_text.isdigit():
            problem(
                f"{contract.ENV_HISTORY_TTL_DAYS}: expected a whole number of days, got {ttl_text!r}"
            )
        elif int(ttl_text) < 1:
            problem(f"{contract.ENV_HISTORY_TTL_DAYS}: must be at least 1, got {int(ttl_text)}")
        else:
            ttl = int(ttl_text)
        return cls(
            table_name=required(contract.ENV_TABLE_NAME),
            event_bus_name=required(contract.ENV_EVENT_BUS_NAME),
            admission_queue_url=required(contract.ENV_ADMISSION_QUEUE_URL),
            timer_state_machine_arn=required(contract.ENV_TIMER_STATE_MACHINE_ARN),
            cluster_name=required(contract.ENV_CLUSTER_NAME),
            settings_json=env.get(contract.ENV_SETTINGS, ""),
            history_ttl_days=ttl,
            timer_queue_url=env.get(contract.ENV_TIMER_QUEUE_URL, "").strip(),
            ingest_queue_url=env.get(contract.ENV_INGEST_QUEUE_URL, "").strip(),
        )
