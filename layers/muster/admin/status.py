"""`muster status`'s view: every workload by queue and phase, and who may be admitted next."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from muster.admin.deployment import Deployment
from muster.core import ACTIVE_PHASES, Phase, Settings, Workload
from muster.core.admission import Usage
from muster.runtime.planning import HoldingsReader, admission_inputs, still_holding


def status_view(deployment: Deployment) -> dict[str, Any]:
    """The workloads by phase with their ready pods, the admission settings and the outlook."""
    from muster.runtime.views import current_workloads, status

    store = deployment.store()
    workloads = current_workloads(store)  # one view for the phases and the outlook
    doc = status(store, workloads)
    _fill_ready_counts(store, doc)
    doc["cluster"] = deployment.config.cluster_name
    settings = deployment.settings(store).effective()
    doc["blockAdmission"] = settings.block_admission
    doc["capacityCheck"] = settings.capacity_check
    doc["admission"] = admission_outlook(store, settings, workloads)
    return doc


def admission_outlook(
    store: Any, settings: Settings, workloads: Sequence[Workload] | None = None
) -> dict[str, Any]:
    """What the core's admission planner would do now: who is admissible, who waits and why.

    On `workloads` when given (the view the rest of the status shows), else as read now.
    """
    if workloads is None:
        inputs = admission_inputs(store, settings)
    else:
        queued = [w for w in workloads if w.phase is Phase.PENDING]
        active = [w for w in workloads if w.phase in ACTIVE_PHASES]
        # Out of the admitted phases, holding quota all the same (the ledger still names them).
        left = [w for w in workloads if w.phase not in ACTIVE_PHASES]
        held = still_holding(store, store.ledger().recent, left)
        inputs = HoldingsReader(store).inputs(settings, queued, [*active, *held])
    plan = inputs.plan(settings, time.time())
    return {
        "admissible": list(plan.admit),
        "blockedBy": plan.blocked_by,
        "waiting": plan.skipped,
        # Workloads the capacity check cannot judge (admitted on quota alone), and why.
        "unchecked": dict(plan.unchecked),
        # The admitted workload not yet PodsReady that blockAdmission waits for, whether
        # or not anyone is queued behind it (the planner names it only when someone is).
        "notReady": Usage.of(inputs.active).blocker,
    }


def _fill_ready_counts(store: Any, doc: dict[str, Any]) -> None:
    """The phase index holds workload items without their pods: read each active gang's count."""
    for phase in (Phase.ADMITTED, Phase.RUNNING, Phase.RECOVERING):
        for w in doc["phases"].get(phase.value, []):
            light = store.load_pod(w["workload"], None)
            if light is not None:
                w["readyPods"] = light.ready_count
