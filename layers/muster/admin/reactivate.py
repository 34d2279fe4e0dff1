"""`muster reactivate`'s work: a Deactivated workload back to its queue, by the control plane."""

from __future__ import annotations

from collections.abc import Mapping

from muster.admin.deployment import Deployment, workload_key
from muster.admin.errors import AdminError
from muster.core import Admit, Evict, Kind, Outcome, Reactivate


class ClusterCallRefused(RuntimeError):
    """The command line never acts on the cluster; the admission function does."""


class NoClusterAccess:
    """The cluster port for the command line: it refuses to admit or evict.

    A reactivation only returns the workload to the queue; the admission pass it
    requests runs in the admission function, which admits with the real cluster
    adapter. Muster's view on the workload object (`record`) is not written from
    here: the next function that acts on the workload writes it.
    """

    def __init__(self) -> None:
        self.skipped_views: list[str] = []

    def admit(self, effect: Admit) -> None:
        raise ClusterCallRefused(
            f"{effect.workload}: the command line does not admit workloads; "
            "the admission function does"
        )

    def evict(self, effect: Evict) -> None:
        raise ClusterCallRefused(
            f"{effect.workload}: the command line does not evict workloads; "
            "the control plane's functions do"
        )

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        self.skipped_views.append(workload)


class QuietMetrics:
    """No metrics from the command line (its outcomes are printed instead)."""

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        return None

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        return None


def reactivate(deployment: Deployment, workload: str) -> tuple[str, bool]:
    """Pending again with its requeue count reset, and an admission pass requested.

    Returns the workload's key and whether its muster.io status on the cluster
    object still says Deactivated (until the admission function admits it)."""
    from muster.lambdas.wiring import build_control_plane

    cluster = NoClusterAccess()
    plane = build_control_plane(
        deployment.config, cluster=lambda _config: cluster, session=deployment.session
    )
    plane.metrics = QuietMetrics()
    settings = deployment.settings(plane.store).effective()
    plane.settings = lambda: settings
    key = workload_key(plane.store, workload)
    current = plane.store.load(key)
    if current is not None and current.quarantine is not None:
        raise AdminError(
            f"{key} is quarantined ({current.quarantine.error}); fix the cause and "
            f"`muster release {key}` first"
        )
    outcomes = plane.handle(Reactivate(key))
    outcome = outcomes[0] if outcomes else Outcome.IGNORED
    if outcome is Outcome.APPLIED:
        return key, bool(cluster.skipped_views)
    if outcome is Outcome.UNKNOWN_WORKLOAD:
        raise AdminError(f"no workload {key} in cluster {deployment.config.cluster_name}")
    snap = plane.store.load(key)
    phase = snap.workload.phase.value if snap else "unknown"
    raise AdminError(
        f"{key} is {phase}, not Deactivated; only a Deactivated workload can be reactivated"
    )
