"""The one retry helper: tries, delays, and which errors are tried again."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from muster.retry import Backoff, retry


class Flaky(Exception):
    pass


def failing(times: int, error: type[Exception] = Flaky) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def action() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error("not yet")
        return "done"

    return calls, action


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    b = Backoff(0.5, 3.0)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    b.reset()
    assert b.next() == 0.5


def test_backoff_jitter_scales_every_delay() -> None:
    b = Backoff(1.0, 8.0, jitter=lambda: 0.5)
    assert [b.next() for _ in range(3)] == [0.5, 1.0, 2.0]


def test_a_transient_error_is_tried_again_with_the_backoffs_delays() -> None:
    calls, action = failing(2)
    slept: list[float] = []
    told: list[int] = []
    result = retry(
        action,
        attempts=4,
        retry_on=Flaky,
        backoff=Backoff(0.2, 2.0),
        sleep=slept.append,
        on_retry=lambda n, _e: told.append(n),
    )
    assert result == "done" and len(calls) == 3
    assert slept == [0.2, 0.4] and told == [1, 2]


def test_the_last_tries_error_is_raised_after_all_attempts() -> None:
    calls, action = failing(10)
    slept: list[float] = []
    with pytest.raises(Flaky):
        retry(action, attempts=3, retry_on=Flaky, backoff=Backoff(1, 1), sleep=slept.append)
    assert len(calls) == 3 and slept == [1, 1]  # no sleep after the last try


def test_an_error_retrying_cannot_mend_is_raised_at_once() -> None:
    calls, action = failing(1, ValueError)
    with pytest.raises(ValueError):
        retry(action, attempts=5, retry_on=Flaky, sleep=lambda _s: None)
    assert len(calls) == 1


def test_without_a_backoff_it_tries_again_at_once() -> None:
    calls, action = failing(2)
    assert len(calls) == 0
    assert (
        retry(action, attempts=3, retry_on=Flaky, sleep=lambda _s: pytest.fail("slept")) == "done"
    )
