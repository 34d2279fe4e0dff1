"""The administrator's errors: why a command cannot go on, and whether its input was wrong."""

from __future__ import annotations

from collections.abc import Sequence


class AdminError(Exception):
    """A command cannot go on; the message says why."""


class BadInput(AdminError):
    """The command's input is wrong: an argument, a settings document, a file it reads."""


def listed(errors: Sequence[str]) -> str:
    """One error inline; several, one per line, so that each names its field."""
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} errors:" + "".join(f"\n  {e}" for e in errors)
