"""The functions' environment, parsed once into a typed value (errors name the variable)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


class ConfigError(ValueError):
    """A required environment variable is missing or malformed."""


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    table_name: str
    event_bus_name: str
    requeue_queue_url: str
    timer_state_machine_arn: str
    cluster_name: str
    settings_json: str = ""
    history_ttl_days: int = 30
    timer_queue_url: str = ""  # where deadline signals go (re-armed or sent by the sweeper)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeConfig:
        env = os.environ if env is None else env

        def required(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise ConfigError(f"{name}: required environment variable is not set")
            return value

        ttl_text = env.get("MUSTER_HISTORY_TTL_DAYS", "30").strip() or "30"
        try:
            ttl = int(ttl_text)
        except ValueError:
            raise ConfigError(
                f"MUSTER_HISTORY_TTL_DAYS: expected a whole number of days, got {ttl_text!r}"
            ) from None
        if ttl < 1:
            raise ConfigError(f"MUSTER_HISTORY_TTL_DAYS: must be at least 1, got {ttl}")
        return cls(
            table_name=required("MUSTER_TABLE_NAME"),
            event_bus_name=required("MUSTER_EVENT_BUS_NAME"),
            requeue_queue_url=required("MUSTER_REQUEUE_QUEUE_URL"),
            timer_state_machine_arn=required("MUSTER_TIMER_STATE_MACHINE_ARN"),
            cluster_name=required("MUSTER_CLUSTER_NAME"),
            settings_json=env.get("MUSTER_SETTINGS", ""),
            history_ttl_days=ttl,
            timer_queue_url=env.get("MUSTER_TIMER_QUEUE_URL", "").strip(),
        )
