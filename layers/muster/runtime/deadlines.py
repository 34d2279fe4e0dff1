"""Deadlines a settings change brought back, and the signals that make the core act on them.

A gang left without a readiness timer by settings that wanted none (a `dryRun`
eviction reported, `recoveryTimeout: 0s`) is owed one once they want one again
(`muster.core.owed_timer`). The signal is a deadline signal of the gang's attempt
with episode 0, which no timer has: the core answers it by evicting the gang if
the owed deadline passed, else by arming the timer for what remains; once armed,
a duplicate is stale. The admission function sends them when an administrator
changes the settings; the sweeper sends them for whatever is still owed, so a
lost request heals within a sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Protocol

from muster.core import (
    NOT_READY_PHASES,
    DeadlineReached,
    Outcome,
    Settings,
    Timer,
    Workload,
    owed_timer,
)
from muster.runtime.planning import quota_holders
from muster.runtime.ports import WorkloadStore
from muster.runtime.results import EffectFailed

log = logging.getLogger("muster.runtime")

OWED_EPISODE = 0


def owed_signals(
    holders: Iterable[Workload], settings: Settings, *, leave_out: Collection[str] = ()
) -> list[tuple[str, Timer]]:
    """(workload, the signal's timer) for each not-ready holder owed a deadline."""
    owed: list[tuple[str, Timer]] = []
    for w in holders:
        if w.phase not in NOT_READY_PHASES or w.key in leave_out:
            continue
        timer = owed_timer(w, settings.for_queue(w.queue))
        if timer is not None:
            owed.append((w.key, replace(timer, episode=OWED_EPISODE)))
    return owed


def signal(workload: str, timer: Timer) -> DeadlineReached:
    return DeadlineReached(workload, timer.attempt, timer.kind, timer.episode, timer.incarnation)


class Settler(Protocol):
    """What settling needs of the control plane (`muster.runtime.service.ControlPlane`)."""

    @property
    def store(self) -> WorkloadStore: ...
    @property
    def settings(self) -> Callable[[], Settings]: ...

    def handle(self, event: DeadlineReached) -> list[Outcome]: ...


def settle_deadlines(plane: Settler) -> list[str]:
    """Act on every deadline the settings now in force brought back: evict the gangs
    whose deadline passed, arm the others' timers. Returns the workloads signalled.

    Called when an administrator changed the settings, so they are read afresh.
    """
    invalidate = getattr(plane.settings, "invalidate", None)
    if callable(invalidate):
        invalidate()
    quarantined = {key for key, _ in plane.store.quarantined()}
    owed = owed_signals(quota_holders(plane.store), plane.settings(), leave_out=quarantined)
    for key, timer in owed:
        try:
            plane.handle(signal(key, timer))
        except EffectFailed as exc:  # committed; its outbox is tried again later
            log.warning(
                "owed deadline acted on, effects pending",
                extra={"workload": key, "error": exc.error},
            )
    return [key for key, _ in owed]
