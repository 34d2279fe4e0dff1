"""Time-scaling a scenario, so that a 5-minute timeout can take 5 seconds locally.

Every duration of the scenario (submissions, startup and run times, faults,
the horizon) and of its settings (timeouts, backoff, limits) is divided by the
same factor; nothing else changes, so the local run and the simulator make the
same decisions in proportionally shorter time.
"""

from __future__ import annotations

from dataclasses import replace

from muster.core import QueueSettings, Settings
from muster.core.settings import queue_document
from muster.sim.scenario import Scenario


def scale_queue(q: QueueSettings, factor: float) -> QueueSettings:
    def s(value: float | None) -> float | None:
        return None if value is None else value / factor

    return replace(
        q,
        timeout=q.timeout / factor,
        recovery_timeout=s(q.recovery_timeout),
        backoff_limit_timeout=s(q.backoff_limit_timeout),
        backoff_base_seconds=q.backoff_base_seconds / factor,
        backoff_max_seconds=q.backoff_max_seconds / factor,
        max_timeout=s(q.max_timeout),
        fault_evict_after=s(q.fault_evict_after),
    )


def scale_settings(settings: Settings, factor: float) -> Settings:
    queues = {name: scale_queue(q, factor) for name, q in settings.queues.items()}
    return replace(
        settings,
        defaults=scale_queue(settings.defaults, factor),
        queues=queues,
        raw_queues={name: queue_document(q) for name, q in queues.items()},
    )


def scale_scenario(scenario: Scenario, factor: float) -> Scenario:
    """The same scenario running `factor` times faster."""
    if factor <= 0:
        raise ValueError(f"the time scale must be above 0, got {factor}")
    if factor == 1:
        return scenario
    return replace(
        scenario,
        settings=scale_settings(scenario.settings, factor),
        until=scenario.until / factor,
        workloads=tuple(
            replace(
                w,
                submit_at=w.submit_at / factor,
                startup_seconds=w.startup_seconds / factor,
                run_seconds=w.run_seconds / factor,
            )
            for w in scenario.workloads
        ),
        faults=tuple(
            replace(f, at=f.at / factor, repair_after=f.repair_after / factor)
            for f in scenario.faults
        ),
    )
