"""Node packing in the simulated cluster: small pods on the fullest node leave whole nodes."""

from __future__ import annotations

from muster.sim.engine import simulate

from tests.sim.conftest import scenario

# Two nodes of 4 GPUs. `wide` (4 GPUs, short) takes one node and `long` (3 GPUs) the
# other; once `wide` is done its node is free and `long`'s has 1 GPU left. Then
# `small` (1 GPU) and `whole` (4 GPUs) arrive: on the free node, `small` leaves no
# node for `whole` until `long` ends; beside `long` it leaves the other node whole.
DOC = """
cluster: {nodes: 2, gpusPerNode: 4}
settings: {timeout: 5m%s}
until: 1d
workloads:
  - {name: wide, pods: 1, gpusPerPod: 4, runSeconds: 100}
  - {name: long, submitAt: 1, pods: 1, gpusPerPod: 3, runSeconds: 20000}
  - {name: small, submitAt: 600, pods: 1, gpusPerPod: 1, runSeconds: 20000}
  - {name: whole, submitAt: 700, pods: 1, gpusPerPod: 4, runSeconds: 100}
"""


def first_ready(events: list[dict[str, object]], workload: str) -> float:
    return next(
        float(e["t"]) for e in events if e["event"] == "PodsReady" and e["workload"] == workload
    )  # type: ignore[arg-type]


def test_packing_puts_the_small_pod_on_the_fullest_node_and_the_whole_node_gang_starts_at_once() -> (
    None
):
    # WHEN the same cluster runs under the capacity check, with and without packing
    packed = simulate(scenario(DOC % ", nodePacking: true"), "gang+fit")
    plain = simulate(scenario(DOC % ""), "gang+fit")
    # THEN with packing `small` is admitted onto `long`'s node (the fullest that holds it)
    node = {e["workload"]: e.get("node") for e in packed.events if e["event"] == "Admitted"}
    assert node["small"] == node["long"] != node["whole"]
    assert {node["long"], node["whole"]} == {"node-0", "node-1"}
    # AND `whole` starts within minutes, where without it waits for `long` to end
    assert first_ready(packed.events, "whole") < 1000
    assert first_ready(plain.events, "whole") > 20000
    # AND neither evicts anything: the check admits only where the pods can land
    assert packed.summary["evictions"] == plain.summary["evictions"] == 0
