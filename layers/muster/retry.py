"""Trying a call again: one helper for every place that retries.

`Backoff` gives capped exponential delays (optionally scaled by a random draw, so
that concurrent writers spread out), and `retry` calls an action until it
returns, fails with an error that retrying cannot mend, or runs out of tries.
The EKS adapter, the agent's sender and watches, the control plane's conflict
loop and the settings command all retry through these. AWS clients are built
with botocore's retry mode set explicitly (`muster.botocore_config`): its retries
where they are wanted, none under a loop of ours. `is_transient` tells a failure
that waiting cures from one that needs a person.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Transient(Exception):
    """A failure that waiting cures (the cluster unreachable, throttled, a server error).

    Adapters raise a subclass of it so that the runtime retries with backoff and never
    counts the failure towards quarantine.
    """


class Refused(Exception):
    """A request the other side refused for a reason a retry cannot mend (forbidden,
    invalid). Adapters raise a subclass of it, so that the runtime can tell a
    refusal apart from a failure it knows nothing about."""


class Backoff:
    """Delays of base, 2*base, 4*base, ... capped at `maximum`; `reset` starts again."""

    def __init__(
        self, base: float, maximum: float, *, jitter: Callable[[], float] | None = None
    ) -> None:
        self.base = base
        self.maximum = maximum
        self.jitter = jitter  # a factor drawn for every delay, e.g. random.random
        self.current = base

    def next(self) -> float:
        delay = self.current
        self.current = min(delay * 2, self.maximum)
        return delay * self.jitter() if self.jitter is not None else delay

    def reset(self) -> None:
        self.current = self.base


def retry(
    action: Callable[[], T],
    *,
    attempts: int,
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """`action()`, tried up to `attempts` times while it raises `retry_on`.

    Between tries `on_retry(try, error)` is told and the backoff's delay is slept
    (none without a backoff). The last try's error is raised as it is; any other
    error at once.
    """
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except retry_on as exc:
            if attempt >= attempts:
                raise
            if on_retry is not None:
                on_retry(attempt, exc)
            if backoff is not None:
                sleep(backoff.next())
    raise ValueError(f"attempts must be at least 1, got {attempts}")


_TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestThrottled",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "LimitExceededException",
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)


def is_transient(exc: BaseException) -> bool:
    """A failure that waiting cures (throttling, 5xx, an unreachable cluster): not counted
    towards quarantine, only retried with backoff."""
    if getattr(exc, "transient", False) or isinstance(
        exc, Transient | ConnectionError | TimeoutError
    ):
        return True
    if type(exc).__name__ in ("EndpointConnectionError", "ReadTimeoutError"):
        return True  # botocore's, which the runtime does not import
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code", "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in _TRANSIENT_CODES or int(status) >= 500
    return False
