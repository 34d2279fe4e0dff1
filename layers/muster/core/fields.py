"""Reading documents at the edges: every mistake names its field, all found in one pass.

Settings, the agent's events, scenarios and the CDK context are read with these
helpers, so a mistake reads the same wherever it is made (`queues.spot.timeout:
expected a duration ..., got 'soon'`). Inside `collecting(SomeError)` a helper
that finds a mistake records it and returns the field's fallback, so reading
goes on and the one error raised at the end lists every mistake with its path
(as Kueue's validation returns a `field.ErrorList`); outside, a mistake raises
`FieldErrors` at once. Pure: no I/O, so `infra/` uses it at synth.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Self, TypeVar

from muster.core.durations import DurationError, parse_duration

T = TypeVar("T")


class FieldErrors(ValueError):
    """A document that cannot be used; each of its `errors` names the field."""

    default = "invalid document"

    def __init__(self, *errors: str) -> None:
        self.errors: tuple[str, ...] = errors or (self.default,)
        super().__init__("\n".join(self.errors))

    def prefixed(self, source: str, sep: str = ": ") -> Self:
        """The same errors, each saying which document (or field) they are in."""
        return type(self)(*(f"{source}{sep}{e}" for e in self.errors))


def yaml_problem(exc: Exception) -> str:
    """A YAML parser's error as one line that says where: `line 3, column 5: ...`.

    PyYAML names the text it read `"<unicode string>"`; the caller names the file.
    """
    mark = getattr(exc, "problem_mark", None)
    said = [str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None))]
    what = ": ".join(part for part in said if part and part != "None") or str(exc)
    if mark is None:
        return what
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}"


# While a whole document is read, a mistake is recorded here and reading goes on
# with the field's fallback value; outside a read, a mistake raises at once.
_FOUND: ContextVar[list[str] | None] = ContextVar("muster_field_errors", default=None)


def problem(message: str) -> None:
    """Record a mistake (or raise it, outside `collecting`)."""
    found = _FOUND.get()
    if found is None:
        raise FieldErrors(message)
    found.append(message)


@contextmanager
def collecting(error: type[FieldErrors]) -> Iterator[None]:
    """Gather every mistake of one document; raise them together as `error` at the end."""
    found: list[str] = []
    token = _FOUND.set(found)
    try:
        yield
    except FieldErrors as exc:  # a check that stops the rest of the document
        found.extend(exc.errors)
    finally:
        _FOUND.reset(token)
    if found:
        raise error(*found)


@contextmanager
def part() -> Iterator[None]:
    """One part of a document (a queue, a workload): a mistake that stops it is recorded."""
    try:
        yield
    except FieldErrors as exc:
        found = _FOUND.get()
        if found is None:
            raise
        found.extend(exc.errors)


def checked(fallback: T, read: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`read(*args, **kwargs)`; if it made a mistake (recorded), `fallback` instead."""
    found = _FOUND.get()
    if found is None:
        return read(*args, **kwargs)
    before = len(found)
    with part():
        value = read(*args, **kwargs)
        if len(found) == before:
            return value
    return fallback


def check_keys(
    doc: Mapping[str, Any], allowed: Collection[str], path: str, what: str = "setting"
) -> None:
    """Every key that is not `allowed` is a mistake, with the nearest known key suggested."""
    known = sorted(allowed)
    for key in doc:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), known, n=1)
            suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
            problem(f"{path}{key}: unknown {what}{suggestion} (known: {', '.join(known)})")


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    """`value` if it is a mapping; otherwise a mistake that stops this part."""
    if not isinstance(value, Mapping):
        raise FieldErrors(f"{path}: expected a mapping, got {value!r}")
    return value


def boolean(doc: Mapping[str, Any], key: str, default: bool | None, path: str = "") -> bool:
    """true or false; a missing one is `default` (None: it must be there)."""
    value = doc.get(key, default)
    if not isinstance(value, bool):
        problem(f"{path}{key}: expected true or false, got {value!r}")
        return bool(default)
    return value


def number(
    doc: Mapping[str, Any], key: str, default: float, path: str = "", *, minimum: float = 0
) -> float:
    """A finite number, at least `minimum` (0: "must not be negative")."""
    if key not in doc:
        return default
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        problem(f"{path}{key}: expected a number, got {value!r}")
        return default
    if not math.isfinite(value):
        problem(f"{path}{key}: expected a finite number, got {value!r}")
        return default
    if value < minimum:
        problem(
            f"{path}{key}: must not be negative, got {value!r}"
            if minimum == 0
            else f"{path}{key}: must be at least {minimum:g}, got {value!r}"
        )
        return default
    return float(value)


def whole_number(
    doc: Mapping[str, Any],
    key: str,
    default: int | None,
    path: str = "",
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    required: bool = False,
) -> Any:
    """A whole number within bounds; a missing one is `default` (or a mistake if `required`)."""
    value = doc.get(key)
    if value is None:
        if required:
            problem(f"{path}{key}: missing (a whole number)")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        problem(f"{path}{key}: expected a whole number, got {value!r}")
        return default
    if minimum is not None and value < minimum:
        problem(f"{path}{key}: must be at least {minimum}, got {value}")
        return default
    if maximum is not None and value > maximum:
        problem(f"{path}{key}: must be at most {maximum}, got {value}")
        return default
    return value


def text(doc: Mapping[str, Any], key: str, path: str = "", *, required: bool = True) -> Any:
    """A non-empty string, or None when it is optional and absent; a mistake stops this part."""
    value = doc.get(key)
    if value is None:
        if required:
            raise FieldErrors(f"{path}{key}: required")
        return None
    if not isinstance(value, str) or (required and not value):
        raise FieldErrors(f"{path}{key}: expected a non-empty string, got {value!r}")
    return value


def one_of(value: Any, choices: Collection[str], field: str) -> Any:
    """`value` if it is one of `choices`; otherwise a mistake that stops this part."""
    if value not in choices:
        raise FieldErrors(f"{field}: expected one of {', '.join(choices)}, got {value!r}")
    return value


def duration(
    doc: Mapping[str, Any],
    key: str,
    default: float,
    path: str = "",
    *,
    maximum: Callable[[float, Any, str], bool] | None = None,
    null_is_default: bool = False,
) -> float:
    """A Kubernetes-style duration (`90s`, `5m`, `1h30m`) or plain seconds, in seconds.

    `maximum(seconds, value, field)` may refuse a value (recording why) by returning False.
    """
    if key not in doc or (null_is_default and doc[key] is None):
        return default
    try:
        seconds = parse_duration(doc[key])
    except DurationError as exc:
        problem(f"{path}{key}: {exc}")
        return default
    if maximum is not None and not maximum(seconds, doc[key], f"{path}{key}"):
        return default
    return seconds
