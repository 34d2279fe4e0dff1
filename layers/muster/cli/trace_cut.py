"""`muster trace cut`: a time slice of a longer job trace, for a scenario to replay."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from muster.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from muster.sim.trace_cut import PHILLY_TIME, CutError, cut


def _day(text: str, flag: str) -> datetime:
    for form in ("%Y-%m-%d", PHILLY_TIME, "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(text, form).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise CutError(
        f"{flag}: expected a date such as 2017-10-02 (or 2017-10-02 06:00:00), got {text!r}"
    )


def cut_command(args: argparse.Namespace) -> int:
    try:
        start = _day(args.start, "--from")
        if args.to is not None and args.days is not None:
            raise CutError("give --to or --days, not both")
        if args.to is not None:
            end = _day(args.to, "--to")
        else:
            days = 7.0 if args.days is None else args.days
            if days <= 0:
                raise CutError(f"--days: expected a positive number of days, got {days:g}")
            end = start + timedelta(days=days)
        if end <= start:
            raise CutError(f"--to: {args.to} is not after --from {args.start}")
        if not args.trace.is_file():
            raise CutError(f"{args.trace}: no such file")
        with args.trace.open(newline="", encoding="utf-8") as source:
            if args.output:
                try:
                    out = open(args.output, "w", newline="", encoding="utf-8")  # noqa: SIM115
                except OSError as exc:
                    raise CutError(
                        f"cannot write --output {args.output}: {exc.strerror or exc}"
                    ) from None
                with out:
                    kept = cut(source, out, start, end, name=str(args.trace))
            else:
                kept = cut(source, sys.stdout, start, end, name=str(args.trace))
    except CutError as exc:
        print(f"muster trace cut: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    where = f" to {args.output}" if args.output else ""
    print(
        f"{kept} jobs submitted from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M}{where}",
        file=sys.stderr,
    )
    if kept == 0:
        print("muster trace cut: no job was submitted in that window", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("trace", help="work with job traces (cut a window out of one)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = actions.add_parser(
        "cut",
        help="keep the jobs submitted in a time window (default: one week)",
        description=(
            "Write the rows of a Philly CSV or a Muster trace submitted from --from for "
            "--days days (default 7) or up to --to, sorted by submission time, in the same "
            "format, for a scenario's trace.path."
        ),
    )
    c.add_argument("trace", type=Path, help="a Philly CSV or a Muster trace (CSV)")
    c.add_argument("--from", dest="start", required=True, metavar="DATE", help="e.g. 2017-10-02")
    c.add_argument("--days", type=float, help="length of the window in days (default 7)")
    c.add_argument("--to", metavar="DATE", help="end of the window (exclusive) instead of --days")
    c.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    c.set_defaults(handler=cut_command)
