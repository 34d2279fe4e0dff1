"""`muster release`'s work: lift a quarantine once its cause is fixed."""

from __future__ import annotations

from muster.admin.deployment import Deployment, workload_key
from muster.admin.errors import AdminError


def release(deployment: Deployment, workload: str) -> tuple[str, list[str]]:
    """Lift the quarantine and ask for an admission pass, which tries the waiting effects again.

    Returns the workload's key and the names of its waiting effects."""
    store = deployment.store()
    key = workload_key(store, workload)
    snap = store.load(key)
    if snap is None:
        raise AdminError(f"no workload {key} in cluster {deployment.config.cluster_name}")
    if not store.release(key):
        raise AdminError(f"{key} is not quarantined (phase {snap.workload.phase.value})")
    deployment.messages().request_admission("released", key)
    return key, [type(e).__name__ for e in snap.outbox]
