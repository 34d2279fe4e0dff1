"""Small builders for core tests."""

from __future__ import annotations

from collections.abc import Iterable

from muster.core import (
    Effect,
    Kind,
    PodObserved,
    Publish,
    Settings,
    WorkloadObserved,
    parse_settings,
)


def settings(**doc: object) -> Settings:
    return parse_settings(doc)


def submit(
    key: str = "team/a", queue: str = "q", pods: int = 2, gpus: int = 8, **kw: object
) -> WorkloadObserved:
    return WorkloadObserved(
        key, queue, pods, gpus=gpus, seq=kw.pop("seq", 1), kind=kw.pop("kind", Kind.JOB), **kw
    )  # type: ignore[arg-type]


def ready(
    key: str, pod: str, seq: int = 1, uid: str = "", node: str = "n0", ready: bool = True
) -> PodObserved:
    return PodObserved(
        key, pod, seq, uid=uid or f"{pod}-uid", phase="Running", ready=ready, node=node
    )


def kinds(effects: Iterable[Effect]) -> list[str]:
    """Effect names, with Publish shown as its event-log name."""
    return [f"Publish:{e.event}" if isinstance(e, Publish) else type(e).__name__ for e in effects]


def published(effects: Iterable[Effect], name: str) -> list[Publish]:
    return [e for e in effects if isinstance(e, Publish) and e.event == name]
