"""Kubernetes-style durations (`90s`, `5m`, `1h30m`) or plain seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class DurationError(ValueError):
    """A duration that is malformed or negative."""


def parse_duration(value: object) -> float:
    """Seconds from `"1h30m"`, `"90s"`, `"0s"`, `90` or `"90"`; never negative."""
    if isinstance(value, bool):
        raise DurationError(f"expected a duration like '90s' or '5m', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value.strip())
    else:
        raise DurationError(f"expected a duration like '90s' or '5m', got {value!r}")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise DurationError(f"duration {value!r} is not a finite number")
    if seconds < 0:
        raise DurationError(f"duration {value!r} is negative")
    return seconds


def _parse_text(text: str) -> float:
    if not text:
        raise DurationError("empty duration")
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    pos = 0
    total = 0.0
    for match in _PART.finditer(body):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(body) or pos == 0:
        raise DurationError(
            f"malformed duration {text!r}: use units ms, s, m, h, d (e.g. '90s', '1h30m')"
        )
    return sign * total


def format_duration(seconds: float) -> str:
    """The shortest Kubernetes-style text for a number of seconds (`3600` -> `1h`)."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    if rest == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)
