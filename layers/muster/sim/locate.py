"""Where job traces are found: the one rule the scenarios, tests and benchmarks share.

Muster does not ship traces (their licences and sizes are their own). A scenario
names its trace by a path: an absolute one, or one relative to the scenario file.
When a relative path is not there, it is looked up in the traces folder:
`MUSTER_TRACES` when set, else the first `shared/traces` folder beside or above
the scenario's folder, the working directory or this checkout. So
`examples/philly-week.yaml` names its trace by file name and runs wherever the
trace has been put, and says where it looked when it is nowhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

TRACES_ENV = "MUSTER_TRACES"
SHARED = Path("shared") / "traces"


class TraceNotFound(FileNotFoundError):
    """A scenario's trace is in none of the places looked in; the message lists them."""


def _candidates(start: Path) -> Iterator[Path]:
    start = start.resolve()
    for folder in (start, *start.parents):
        yield folder / SHARED


def traces_dir(*starts: Path) -> Path | None:
    """`MUSTER_TRACES`, or the first `shared/traces` folder beside or above `starts`,
    the working directory and this checkout; None when there is none."""
    explicit = os.environ.get(TRACES_ENV)
    if explicit:
        return Path(explicit).expanduser()
    here = Path(__file__).resolve().parents[3]  # the checkout this package runs from
    for start in (*starts, Path.cwd(), here):
        for candidate in _candidates(start):
            if candidate.is_dir():
                return candidate
    return None


def resolve_trace(path: Path, base_dir: Path) -> Path:
    """The file a scenario's `trace.path` names (see the module's docstring)."""
    path = path.expanduser()
    if path.is_absolute():
        return path
    beside = base_dir / path
    if beside.exists():
        return beside
    folder = traces_dir(base_dir)
    if folder is not None and (folder / path).exists():
        return folder / path
    if folder is not None and (folder / path.name).exists():
        return folder / path.name
    looked = [str(beside)]
    if folder is not None:
        looked.append(str(folder / path))
    where = (
        f"{TRACES_ENV}={os.environ[TRACES_ENV]}"
        if os.environ.get(TRACES_ENV)
        else f"{TRACES_ENV} is not set"
        + ("" if folder else " and no shared/traces folder was found")
    )
    raise TraceNotFound(
        f"trace.path: {path} not found (looked in {', '.join(looked)}; {where}). Muster "
        f"does not ship traces: put the file in a folder named by {TRACES_ENV}, or cut one "
        "from a longer trace with `muster trace cut` (docs/simulator.md, Traces)"
    )
