"""A scripted `WatchSource`: lists and watch streams written out by the test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from muster.agent.watch import WatchExpired
from muster.kube.conventions import Resource


@dataclass
class ScriptedSource:
    """Per resource plural: a queue of listings and a queue of watch streams.

    A stream is a list of raw watch events; an Exception in it is raised at that
    point (a dropped connection, `WatchExpired`). Calls are recorded.
    """

    listings: dict[str, list[tuple[list[dict[str, Any]], str]]] = field(default_factory=dict)
    streams: dict[str, list[list[Any]]] = field(default_factory=dict)
    calls: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)

    def list(
        self, resource: Resource, label_selector: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(("list", resource.plural, None, label_selector))
        return self.listings[resource.plural].pop(0)

    def watch(
        self, resource: Resource, resource_version: str, label_selector: str | None, timeout: int
    ) -> Iterator[dict[str, Any]]:
        self.calls.append(("watch", resource.plural, resource_version, label_selector))
        streams = self.streams.get(resource.plural) or []
        stream = streams.pop(0) if streams else []
        for item in stream:
            if isinstance(item, Exception):
                raise item
            yield item


def expired() -> WatchExpired:
    return WatchExpired()


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}
