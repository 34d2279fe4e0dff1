"""`replace` for the core's frozen records, without `dataclasses.replace`'s overhead.

`decide` makes a new `Workload` for every event it applies; the standard
`dataclasses.replace` walks the fields' metadata and goes through the frozen
`__init__` each time, which made it the single largest cost of a simulated week.
This one builds, once per class, a function that copies every slot and overrides
the changed ones. It gives the same value as `dataclasses.replace` (same fields,
same class, a TypeError for an unknown field) for slotted dataclasses whose fields
are all `__init__` fields and that have no `__post_init__`; any other class goes
to `dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_copiers: dict[type, Callable[[Any, dict[str, Any]], Any] | None] = {}


def replace(obj: T, /, **changes: Any) -> T:
    cls = type(obj)
    try:
        copier = _copiers[cls]
    except KeyError:
        copier = _copiers[cls] = _build(cls)
    if copier is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new: T = copier(obj, changes)
    return new


def _build(cls: type) -> Callable[[Any, dict[str, Any]], Any] | None:
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        return None
    if any(not hasattr(cls.__dict__.get(f.name), "__set__") for f in dataclasses.fields(cls)):
        return None
    if hasattr(cls, "__post_init__"):
        return None
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields):
        return None
    names = tuple(f.name for f in fields)
    # Each slot's own descriptor sets it: faster than object.__setattr__ by name.
    setters = {name: cls.__dict__[name].__set__ for name in names}
    lines = [
        "def copier(obj, changes):",
        "    if changes and not changes.keys() <= SETTERS.keys():",
        "        unknown(changes)",
        "    new = new_(cls)",
    ]
    lines += [f"    set_{i}(new, obj.{name})" for i, name in enumerate(names)]
    lines += [
        "    for name, value in changes.items():",
        "        SETTERS[name](new, value)",
        "    return new",
    ]

    def unknown(changes: dict[str, Any]) -> None:
        extra = sorted(set(changes) - set(names))
        raise TypeError(
            f"{cls.__name__}.__init__() got an unexpected keyword argument {extra[0]!r}"
        )

    scope: dict[str, Any] = {
        "SETTERS": setters,
        "unknown": unknown,
        "new_": object.__new__,
        "cls": cls,
    }
    scope.update({f"set_{i}": setters[name] for i, name in enumerate(names)})
    exec("\n".join(lines), scope)  # generated from the class's own field names
    copier: Callable[[Any, dict[str, Any]], Any] = scope["copier"]
    return copier
