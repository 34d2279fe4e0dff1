"""Settings at run time: the deployment's document, overridden by the table's record.

The record holds only the changes an administrator made (per cluster, with
per-queue overrides inside); it is validated against the deployment's settings
on every write and every read, so a bad record never reaches the core.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from muster import contract
from muster.core import Settings, SettingsError, merge_settings, parse_settings
from muster.core.settings import merge_documents
from muster.runtime.ports import WorkloadStore

log = logging.getLogger("muster.runtime")


def settings_from_json(text: str | None, source: str = contract.ENV_SETTINGS) -> Settings:
    """The deployment's settings; a bad document stops the function at cold start."""
    if not text or not text.strip():
        return parse_settings({})
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{source}: not valid JSON: {exc}") from None
    try:
        return parse_settings(doc)
    except SettingsError as exc:
        raise exc.prefixed(source) from None


def effective_settings(
    base: Settings, record: Mapping[str, Any] | None
) -> tuple[Settings, SettingsError | None]:
    """The settings the functions use: the runtime record over the deployment's.

    A record that does not validate is not used (the deployment's settings are),
    and its error is returned for the caller to log or report.
    """
    if not record:
        return base, None
    try:
        return merge_settings(base, record), None
    except SettingsError as exc:
        return base, exc


class RuntimeSettings:
    """Effective settings, re-read from the table at most every `ttl` seconds."""

    def __init__(
        self,
        base: Settings,
        store: WorkloadStore,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = 10.0,
    ) -> None:
        self.base = base
        self.store = store
        self.clock = clock
        self.ttl = ttl
        self._cached: Settings | None = None
        self._read_at = 0.0

    def __call__(self) -> Settings:
        now = self.clock()
        if self._cached is None or now - self._read_at >= self.ttl:
            self._cached = self._read()
            self._read_at = now
        return self._cached

    def invalidate(self) -> None:
        self._cached = None

    def _read(self) -> Settings:
        record = self.store.settings_record()
        settings, problem = effective_settings(self.base, record[0] if record else None)
        if problem is not None:
            log.error(
                "settings record is invalid; using the deployment's settings",
                extra={"error": str(problem)},
            )
        return settings


def update_settings(store: WorkloadStore, base: Settings, changes: Mapping[str, Any]) -> Settings:
    """Merge `changes` into the settings record (validated first); returns the effective settings.

    A value of null removes a key from the record, falling back to the deployment's.
    """
    record = store.settings_record()
    doc, version = (record[0], record[1]) if record else ({}, None)
    merged = merge_documents(doc, changes)
    effective = merge_settings(base, merged)  # raises SettingsError naming the field
    store.put_settings_record(merged, version)
    return effective
