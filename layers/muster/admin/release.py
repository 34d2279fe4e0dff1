"""`muster release`: lift a quarantine once its cause is fixed."""

from __future__ import annotations

import argparse
from typing import TextIO

from muster.admin import deployment as found
from muster.admin.command import AdminError
from muster.cli import EXIT_OK


def command(args: argparse.Namespace, out: TextIO) -> int:
    """The admission function tries the workload's waiting effects again on its next pass."""
    deployment = found.connect_to(args)
    store = deployment.store()
    key = found.workload_key(store, args.workload)
    snap = store.load(key)
    if snap is None:
        raise AdminError(f"no workload {key} in cluster {deployment.config.cluster_name}")
    if not store.release(key):
        raise AdminError(f"{key} is not quarantined (phase {snap.workload.phase.value})")
    deployment.messages().request_admission("released", key)
    pending = ", ".join(type(e).__name__ for e in snap.outbox) or "none"
    out.write(
        f"{key} released; the admission function carries out its waiting effects "
        f"({pending}) on its next pass, which was requested\n"
    )
    return EXIT_OK
