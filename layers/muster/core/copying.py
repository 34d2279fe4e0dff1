"""Cheap construction and `replace` for the core's frozen records.

`decide` makes new records for every event it applies (a `Workload`, a `Pod`, the
effects, the `Decision`). A frozen dataclass's own `__init__` sets each field with
`object.__setattr__` by name, and `dataclasses.replace` walks the fields' metadata
and goes through that `__init__` again; together they were the largest cost of a
simulated week. For frozen dataclasses whose fields are all `__init__` fields and
that have no `__post_init__`:

- `fast_init` gives the class an `__init__` with the same signature, defaults and
  default factories that stores each field directly (through the slot's own
  descriptor, or into the instance's dictionary);
- `replace` copies the record and overrides the changed fields, giving the same
  value as `dataclasses.replace` (same fields, same class, a TypeError for an
  unknown field). A record kept in an instance dictionary is copied in one step,
  which is why the widest record, `Workload`, has no slots.

Any other class is left as it is (and goes to `dataclasses.replace`). The records
stay frozen: assigning to a field still raises `FrozenInstanceError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Factory:
    """The default of a field with a default factory (shown as dataclass shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()
_copiers: dict[type, Callable[[Any, dict[str, Any]], Any] | None] = {}
# The `__init__` each class had from `dataclass`, by class (tests compare the two).
dataclass_inits: dict[type, Callable[..., None]] = {}


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


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen dataclass a faster `__init__` (see the module)."""
    layout = _layout(cls)
    if layout is None or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return cls  # a mutable dataclass's own `__init__` is as fast
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not fields:
        return cls
    params: list[str] = []
    values: list[str] = []
    scope: dict[str, Any] = {"FACTORY": _FACTORY}
    for i, f in enumerate(fields):
        if f.default is not dataclasses.MISSING:
            scope[f"default_{i}"] = f.default
            params.append(f"{f.name}=default_{i}")
            values.append(f.name)
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"factory_{i}"] = f.default_factory
            params.append(f"{f.name}=FACTORY")
            values.append(f"factory_{i}() if {f.name} is FACTORY else {f.name}")
        else:
            params.append(f.name)
            values.append(f.name)
    lines = [f"def __init__(self, {', '.join(params)}):"]
    if layout == "slots":
        # Each slot's own descriptor sets it: faster than object.__setattr__ by name.
        for i, (f, value) in enumerate(zip(fields, values, strict=True)):
            scope[f"set_{i}"] = cls.__dict__[f.name].__set__
            lines.append(f"    set_{i}(self, {value})")
    else:
        # One new dictionary for the instance (object.__setattr__: the class is frozen).
        scope["set_dict"] = object.__setattr__
        items = ", ".join(f"{f.name!r}: {v}" for f, v in zip(fields, values, strict=True))
        lines.append(f"    set_dict(self, '__dict__', {{{items}}})")
    exec("\n".join(lines), scope)  # generated from the class's own fields
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    dataclass_inits[cls] = cls.__init__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _layout(cls: type) -> str | None:
    """ "slots" or "dict" for a dataclass whose fields only `__init__` sets, else None."""
    if not dataclasses.is_dataclass(cls):
        return None
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or any(not f.init or f.kw_only for f in fields):
        return None
    if "__slots__" not in cls.__dict__:
        return "dict" if hasattr(cls, "__dictoffset__") and cls.__dictoffset__ else None
    if any(not hasattr(cls.__dict__.get(f.name), "__set__") for f in fields):
        return None
    return "slots"


def _build(cls: type) -> Callable[[Any, dict[str, Any]], Any] | None:
    layout = _layout(cls)
    if layout is None:
        return None
    names = tuple(f.name for f in dataclasses.fields(cls))

    def unknown(changes: dict[str, Any]) -> None:
        extra = sorted(set(changes) - set(names))
        if not extra:
            return  # the instance holds more than its fields; the changes are all fields
        raise TypeError(
            f"{cls.__name__}.__init__() got an unexpected keyword argument {extra[0]!r}"
        )

    scope: dict[str, Any] = {
        "NAMES": frozenset(names),
        "COUNT": len(names),
        "unknown": unknown,
        "new_": object.__new__,
        "set_dict": object.__setattr__,
        "cls": cls,
    }
    lines = ["def copier(obj, changes):", "    new = new_(cls)"]
    if layout == "dict":
        # One copy of the instance's dictionary, the changes over it: a name that is
        # not a field shows as one entry too many.
        lines += [
            "    d = obj.__dict__.copy()",
            "    if changes:",
            "        d.update(changes)",
            "        if len(d) != COUNT:",
            "            unknown(changes)",
            "    set_dict(new, '__dict__', d)",
        ]
    else:
        lines += [
            "    if changes and not changes.keys() <= NAMES:",
            "        unknown(changes)",
        ]
        setters = {name: cls.__dict__[name].__set__ for name in names}
        scope["SETTERS"] = setters
        scope.update({f"set_{i}": setters[name] for i, name in enumerate(names)})
        lines += [f"    set_{i}(new, obj.{name})" for i, name in enumerate(names)]
        lines += [
            "    for name, value in changes.items():",
            "        SETTERS[name](new, value)",
        ]
    lines.append("    return new")
    exec("\n".join(lines), scope)  # generated from the class's own field names
    copier: Callable[[Any, dict[str, Any]], Any] = scope["copier"]
    return copier
