"""`muster describe`: one workload's state and history, or "why was my job evicted?"."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from muster.admin import deployment as found
from muster.admin.command import AdminError
from muster.admin.render import format_describe, ordered
from muster.cli import EXIT_OK


def command(args: argparse.Namespace, out: TextIO) -> int:
    from muster.runtime.views import describe

    deployment = found.connect_to(args)
    store = deployment.store()
    doc = describe(store, found.workload_key(store, args.workload))
    if doc is None:
        raise AdminError(
            f"no workload {args.workload} in cluster {deployment.config.cluster_name} "
            f"(workloads are named namespace/name; `muster status` lists them)"
        )
    doc["history"] = ordered(doc["history"])
    if args.json:
        out.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    else:
        out.write(format_describe(doc))
    return EXIT_OK
