"""Kubernetes calls per pod event do not grow with a pod group (the control plane over
the real adapter and HTTP client, against kmock's emulator).

Muster's view is written only when a decision changes it, and a pod group's view
and Events go on a bounded number of its pods: a 64-pod and a 256-pod group cost
the same calls per pod event.
"""

from __future__ import annotations

from typing import Any

import pytest
from muster.core import Kind, PodObserved, WorkloadObserved, parse_settings
from muster.kube.adapter import MAX_RECORDED_PODS, KubernetesCluster
from muster.kube.http import KubeApi
from muster.lambdas.wiring import record_reader
from muster.runtime.memory import (
    MemoryBus,
    MemoryMessages,
    MemoryMetrics,
    MemoryStore,
    MemoryTimers,
)
from muster.runtime.service import ControlPlane

kmock = pytest.importorskip("kmock")

PODS = "v1/pods"
KEY = "ml/grp"


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"muster.io/pod-group": "grp"}},
        "spec": {"schedulingGates": [{"name": "muster.io/admission"}], "containers": []},
    }


class CountingApi(KubeApi):
    """The real client, counting the requests it sends."""

    sent = 0

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.sent += 1
        return super().request(method, path, **kwargs)


def _calls_per_phase(apiserver: Any, size: int) -> dict[str, list[int]]:
    """Kubernetes requests made by each pod event, by stage of the group's life."""
    h = apiserver.handler
    h.resources[PODS] = {"kind": "Pod", "namespaced": True}
    h.resources["v1/events"] = {"kind": "Event", "namespaced": True}
    names = [f"grp-{i:03d}" for i in range(size)]
    for name in names:
        h.objects[PODS, "ml", name] = _pod(name)
    store = MemoryStore()
    api = CountingApi(apiserver.url)
    plane = ControlPlane(
        store=store,
        timers=MemoryTimers(),
        messages=MemoryMessages(),
        bus=MemoryBus(),
        metrics=MemoryMetrics(),
        cluster=KubernetesCluster(api, records=record_reader(store)),
        settings=lambda: parse_settings({"timeout": "10m"}),
        clock=lambda: 1_000.0,
        sleep=lambda s: None,
        inline_admission=True,
    )
    seq = iter(range(10, 10_000))

    def requests_during(action: Any) -> int:
        before = api.sent
        action()
        return api.sent - before

    calls: dict[str, list[int]] = {"submitted": [], "gated": [], "admitted": [], "ready": []}
    observed = WorkloadObserved(KEY, "default", size, kind=Kind.POD_GROUP, seq=1, uid="u")
    calls["submitted"].append(requests_during(lambda: plane.handle(observed)))
    for name in names:
        gated = PodObserved(KEY, name, next(seq), uid=f"{name}-u")
        calls["gated"].append(requests_during(lambda e=gated: plane.handle(e)))
    calls["admitted"].append(requests_during(plane.admission_pass))
    for name in names:
        ready = PodObserved(KEY, name, next(seq), uid=f"{name}-u", phase="Running", ready=True)
        calls["ready"].append(requests_during(lambda e=ready: plane.handle(e)))
    assert store.load(KEY).workload.phase.value == "Running"  # type: ignore[union-attr]
    return calls


def test_pod_events_that_change_no_view_make_no_kubernetes_call(apiserver: Any) -> None:
    size = 64
    calls = _calls_per_phase(apiserver, size)
    # Every gated pod's event and every pod becoming ready but the last: nothing visible moved.
    assert calls["gated"] == [0] * size
    assert calls["ready"][:-1] == [0] * (size - 1)
    # The last one makes the gang whole: its view and its Event on a bounded set of pods.
    assert 0 < calls["ready"][-1] <= 2 * (1 + MAX_RECORDED_PODS)


@pytest.mark.slow  # about 20 s: the emulator answers in about 20 ms a request
def test_calls_per_pod_event_are_the_same_for_64_and_256_pods(apiserver: Any) -> None:
    small = _calls_per_phase(apiserver, 64)
    apiserver.handler.objects.clear()
    large = _calls_per_phase(apiserver, 256)
    assert small["submitted"] == large["submitted"]
    assert sum(small["gated"]) == sum(large["gated"]) == 0
    assert sum(small["ready"]) == sum(large["ready"])
    # Releasing the gates is one patch per pod, once per admission (not per pod event).
    assert large["admitted"][0] - small["admitted"][0] == 256 - 64
