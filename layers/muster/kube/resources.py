"""What a pod asks for: Kubernetes quantities, which resources are GPUs, the scheduler's sum.

The API server canonicalises the quantities of a Pod but not those inside a custom
resource (a JobSet's or PyTorchJob's pod templates), so `"8000m"`, `"8.0"`,
`"0.008k"`, `"1e1"` and `8.0` all reach the agent; each is read exactly (no float
rounding), and a GPU count that is not a whole number is refused by name, as the
API server would refuse the pods.

**What counts as a GPU.** One unit of any resource in `GPU_RESOURCES`, or of a name
starting with one of `GPU_RESOURCE_PREFIXES`, is one GPU for quota and for the
capacity check: a whole NVIDIA GPU, a MIG slice (`nvidia.com/mig-1g.10gb`, ...), a
Neuron device (`aws.amazon.com/neuron`, `aws.amazon.com/neurondevice`) or a
NeuronCore (`aws.amazon.com/neuroncore`). A partition is charged as a whole GPU,
so a pod is never charged less than the devices it holds; a node advertises its
Neuron chips under all three Neuron names at once, so its capacity counts the
largest of them, not their sum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from muster.schema import MAX_POD_GPUS

GPU_RESOURCES = frozenset(
    {
        "nvidia.com/gpu",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neurondevice",
        "aws.amazon.com/neuroncore",
    }
)
GPU_RESOURCE_PREFIXES = ("nvidia.com/mig-",)
# One set of chips, advertised by the Neuron device plugin under each of these names.
NEURON_RESOURCES = frozenset(
    {"aws.amazon.com/neuron", "aws.amazon.com/neurondevice", "aws.amazon.com/neuroncore"}
)


def is_gpu_resource(name: str) -> bool:
    return name in GPU_RESOURCES or name.startswith(GPU_RESOURCE_PREFIXES)


class QuantityError(ValueError):
    """A resource quantity that cannot be read, or a GPU count that is not whole."""


_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?"
)
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_EXPONENT = 30  # far beyond any count; keeps "1e999999999" from costing anything


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity (a string such as "8", "8000m", "8Ki", "1e1", or a
    JSON number), exactly."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(value)
    if not isinstance(value, str) or len(value) > 64:
        raise QuantityError(f"{value!r} is not a quantity")
    found = _QUANTITY.fullmatch(value)
    if found is None:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    number = Fraction(found["number"])
    if found["sign"] == "-":
        number = -number
    if found["binary"]:
        return number * 2 ** _BINARY[found["binary"]]
    exponent = int(found["exponent"]) if found["exponent"] else _DECIMAL.get(found["decimal"], 0)
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityError(f"{value!r}: the exponent is out of range")
    return number * Fraction(10) ** exponent


def gpu_count(name: str, value: Any) -> int:
    """A count of GPUs from a quantity: whole, not negative, at most `MAX_POD_GPUS`."""
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        raise QuantityError(f"{name}: {exc}") from None
    if amount.denominator != 1:
        raise QuantityError(f"{name}: {value!r}, not a whole number of devices")
    if amount < 0:
        raise QuantityError(f"{name}: {value!r} is negative")
    if amount > MAX_POD_GPUS:
        raise QuantityError(f"{name}: {value!r} is more than {MAX_POD_GPUS}, more than a node has")
    return int(amount)


_Counts = dict[str, int]


def _container_gpus(container: Any) -> _Counts:
    """GPUs one container asks for, per resource name: the larger of request and limit
    (a limit alone is the request, as for every extended resource)."""
    if not isinstance(container, Mapping):
        return {}
    resources = container.get("resources") or {}
    counts: _Counts = {}
    for part in ("requests", "limits"):
        asked = resources.get(part) if isinstance(resources, Mapping) else None
        if not isinstance(asked, Mapping):
            continue
        for name, value in asked.items():
            if isinstance(name, str) and is_gpu_resource(name) and value is not None:
                counts[name] = max(counts.get(name, 0), gpu_count(name, value))
    return counts


def _add(a: _Counts, b: _Counts) -> _Counts:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _larger(a: _Counts, b: _Counts) -> _Counts:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}


def pod_gpus(pod_or_template: Mapping[str, Any]) -> int:
    """GPUs one pod requests, as the scheduler sums them (KEP-753, Kubernetes 1.29+).

    Regular containers and sidecars (init containers with `restartPolicy: Always`)
    run together and add up; an ordinary init container runs alone beside the
    sidecars started before it. The pod asks for the larger of the two, per
    resource. Raises `QuantityError` for a count that cannot be a pod's.
    """
    spec = pod_or_template.get("spec") or {}
    together: _Counts = {}
    for container in _list(spec.get("containers")):
        together = _add(together, _container_gpus(container))
    sidecars: _Counts = {}
    init_peak: _Counts = {}
    for container in _list(spec.get("initContainers")):
        asked = _container_gpus(container)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            together = _add(together, asked)
            sidecars = _add(sidecars, asked)
            init_peak = _larger(init_peak, sidecars)
        else:
            init_peak = _larger(init_peak, _add(asked, sidecars))
    return sum(_larger(together, init_peak).values())


def _list(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list) else ()


def node_gpus(allocatable: Mapping[str, Any]) -> int:
    """A node's allocatable GPUs: its NVIDIA GPUs and MIG slices, and its Neuron chips
    under the name that counts the most of them. A value that cannot be read is 0."""
    nvidia = 0
    neuron = 0
    for name, value in allocatable.items():
        if not isinstance(name, str) or not is_gpu_resource(name):
            continue
        try:
            count = parse_quantity(value)
        except QuantityError:
            continue
        whole = max(int(count), 0)
        if name in NEURON_RESOURCES:
            neuron = max(neuron, whole)
        else:
            nvidia += whole
    return nvidia + neuron
