"""A time slice of a longer job trace, for a scenario to replay (`muster trace cut`).

The Philly trace covers months; the results in docs/simulator.md replay one week of
it. This keeps the rows submitted in [from, from + days) (or up to `--to`), sorted
by submission time, with the header and columns unchanged, so the slice is a trace
of the same format. Muster traces (`muster history export`) are cut the same way
on their `submitted` column.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from typing import Any, TextIO

from muster.sim.history_trace import TRACE_COLUMNS, parse_time

PHILLY_TIME = "%Y-%m-%d %H:%M:%S"


class CutError(Exception):
    """The cut cannot be made; the message names the argument or the row."""


def cut(source: TextIO, out: TextIO, start: datetime, end: datetime, *, name: str = "trace") -> int:
    """Write the rows of `source` submitted in [start, end) to `out`; return their count."""
    reader = csv.DictReader(source)
    fields = list(reader.fieldnames or ())
    if "timestamp" in fields:
        column = "timestamp"

        def when(text: str) -> datetime:
            return datetime.strptime(text, PHILLY_TIME).replace(tzinfo=UTC)

    elif "submitted" in fields:
        column = "submitted"

        def when(text: str) -> datetime:
            return datetime.fromtimestamp(parse_time(text), UTC)

    else:
        raise CutError(
            f"{name}: neither a Philly trace (column timestamp) nor a Muster trace "
            f"({', '.join(TRACE_COLUMNS)}); its columns are {', '.join(fields) or 'none'}"
        )
    kept: list[tuple[datetime, int, dict[str, Any]]] = []
    for line, row in enumerate(reader, start=2):
        text = row.get(column) or ""
        try:
            stamp = when(text.strip())
        except (ValueError, OverflowError):
            raise CutError(f"{name} line {line}: {column}: not a time: {text!r}") from None
        if start <= stamp < end:
            kept.append((stamp, line, row))
    kept.sort(key=lambda item: (item[0], item[1]))
    writer = csv.DictWriter(out, fieldnames=fields)  # RFC 4180 line ends, as Philly's
    writer.writeheader()
    for _, _, row in kept:
        writer.writerow(row)
    return len(kept)
