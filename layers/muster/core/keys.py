"""A workload's key: its identity is (kind, namespace, name).

A Job's key is `namespace/name`; every other kind's adds a marker,
`namespace/name@jobset`, `namespace/name@pytorchjob`, `namespace/name@podgroup`,
so that a Job and a JobSet (or PyTorchJob, or pod group) of the same name in one
namespace are two workloads. `@` cannot occur in a Kubernetes name (DNS-1123:
a-z, 0-9, '-', '.') nor namespace, so the marker is never part of a name; it is
not a separator anywhere else either (`#` is the table's, `:` the outbox's and
ARNs'), needs no quoting in a shell, and keeps the namespace the key's prefix.

Jobs, by far the common kind, keep the key they always had, so their records,
the CLI's arguments and the simulator's logs stay as they were. A key without a
marker is read as a Job's: the core itself treats keys as opaque strings.
"""

from __future__ import annotations

from muster.core.model import Kind

KIND_MARKER = "@"

# The marker of each kind that has one (a Job's key has none).
MARKERS: dict[Kind, str] = {
    Kind.JOBSET: "jobset",
    Kind.PYTORCHJOB: "pytorchjob",
    Kind.POD_GROUP: "podgroup",
}
_KINDS: dict[str, Kind] = {marker: kind for kind, marker in MARKERS.items()}


def workload_key(kind: Kind, namespace: str, name: str) -> str:
    """The key of the `kind` object `namespace/name`."""
    marker = MARKERS.get(kind)
    return f"{namespace}/{name}{KIND_MARKER}{marker}" if marker else f"{namespace}/{name}"


def parse_workload_key(key: str) -> tuple[str, str, Kind]:
    """(namespace, name, kind) of a key; ValueError for anything but `namespace/name[@kind]`.

    The marker is read without regard to case (`@PyTorchJob` is `@pytorchjob`).
    """
    namespace, _, rest = key.partition("/")
    name, marked, marker = rest.partition(KIND_MARKER)
    kind = _KINDS.get(marker.lower()) if marked else Kind.JOB
    if not namespace or not name or "/" in rest or kind is None:
        known = ", ".join(f"{KIND_MARKER}{m}" for m in MARKERS.values())
        raise ValueError(f"expected 'namespace/name' (a Job) or 'namespace/name' + one of {known}")
    return namespace, name, kind


def canonical_key(key: str) -> str:
    """The key as the store holds it (the marker in lower case)."""
    namespace, name, kind = parse_workload_key(key)
    return workload_key(kind, namespace, name)


def kind_keys(namespace: str, name: str) -> tuple[str, ...]:
    """The keys an object `namespace/name` may have, one per kind (the Job's first)."""
    others = (workload_key(kind, namespace, name) for kind in MARKERS)
    return (workload_key(Kind.JOB, namespace, name), *others)


__all__ = [
    "KIND_MARKER",
    "MARKERS",
    "canonical_key",
    "kind_keys",
    "parse_workload_key",
    "workload_key",
]
