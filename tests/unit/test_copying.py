"""The core's cheap record building gives exactly what `dataclass` would have."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from muster.core import model
from muster.core.copying import dataclass_inits, fast_init, replace
from muster.core.model import Phase, Pod, Timer, TimerKind, Workload

RECORDS = sorted(dataclass_inits, key=lambda cls: cls.__name__)


def test_every_frozen_record_of_the_model_gets_the_cheap_init() -> None:
    frozen = {
        cls
        for cls in vars(model).values()
        if dataclasses.is_dataclass(cls)
        and isinstance(cls, type)
        and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    }
    assert frozen and frozen <= set(dataclass_inits)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_the_signature_is_the_dataclass_one(cls: type) -> None:
    def shape(init: object) -> list[tuple[str, object, str]]:
        params = inspect.signature(init).parameters.values()  # type: ignore[arg-type]
        return [(p.name, p.kind, repr(p.default)) for p in params]

    assert shape(vars(cls)["__init__"]) == shape(dataclass_inits[cls])


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_every_field_is_stored_as_given_or_defaulted_as_before(cls: type) -> None:
    fields = dataclasses.fields(cls)
    given = [object() for _ in fields]
    fast = cls(*given)
    assert [getattr(fast, f.name) for f in fields] == given

    required = [object() for f in fields if _required(f)]
    fast = cls(*required)
    slow: object = object.__new__(cls)
    dataclass_inits[cls](slow, *required)
    assert fast == slow
    assert [getattr(fast, f.name) for f in fields] == [getattr(slow, f.name) for f in fields]


def _required(f: dataclasses.Field[object]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def test_defaults_from_a_factory_are_fresh_for_each_record() -> None:
    a, b = Workload("a", "q", 1), Workload("b", "q", 1)
    assert a.pods == {} and a.pods is not b.pods
    assert a.evictions is not b.evictions


def test_records_stay_frozen() -> None:
    w = Workload("a", "q", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.phase = Phase.RUNNING  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Pod("p", 1).ready = True  # type: ignore[misc]


def test_missing_and_unknown_arguments_are_refused_as_before() -> None:
    with pytest.raises(TypeError):
        Pod()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Pod("p", 1, colour="red")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("record", "changes"),
    [
        (
            Workload("ns/a", "q", 2, gpus=16, pods={"p": Pod("p", 3, ready=True)}),
            {"phase": Phase.ADMITTED, "attempt": 1, "timer": Timer(TimerKind.STARTUP, 1, 1, 9.0)},
        ),
        (Workload("ns/a", "q", 2), {}),
        (Pod("p", 3, uid="u", node="n1"), {"retired": True, "ready": False}),
        (Timer(TimerKind.RECOVERY, 2, 1, 5.0), {"deadline": 7.5}),
    ],
)
def test_replace_gives_what_dataclasses_replace_gives(
    record: object, changes: dict[str, object]
) -> None:
    fast = replace(record, **changes)
    slow = dataclasses.replace(record, **changes)  # type: ignore[type-var]
    assert fast == slow and type(fast) is type(slow)
    assert fast is not record
    if changes:
        assert fast != record  # the original is untouched


def test_replace_refuses_an_unknown_field_as_dataclasses_does() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        replace(Workload("a", "q", 1), colour="red")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        replace(Pod("p", 1), colour="red")


def test_classes_it_cannot_speed_up_are_left_alone() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    before = Derived.__init__
    assert fast_init(Derived) is Derived and Derived.__init__ is before
    assert replace(Derived(1), a=2) == Derived(2)
