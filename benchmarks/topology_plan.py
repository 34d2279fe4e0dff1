"""The admission planner with topology-aware admission, beside the plain capacity check.

One plan (`plan_admission`, what the Lambdas and `muster status` run, explaining
every workload passed over) of a queue of gangs of 8-GPU pods on nodes in blocks
(16 nodes per network-node-layer-3 block, 64 per layer-2, 512 per layer-1; some
GPUs held by others), once with no topology, once with every gang asking for
`required=network-node-layer-3` and once `preferred=network-node-layer-3`.

    .venv/bin/python benchmarks/topology_plan.py [--nodes 2000] [--workloads 5000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "layers")]

from muster.core import plan_admission  # noqa: E402
from muster.core.capacity import NodeCapacity  # noqa: E402
from muster.core.model import Workload  # noqa: E402
from muster.core.settings import parse_settings  # noqa: E402

L1, L2, L3 = "network-node-layer-1", "network-node-layer-2", "network-node-layer-3"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--workloads", type=int, default=5000)
    args = parser.parse_args(argv)
    draw = random.Random(1)
    nodes = [
        NodeCapacity(
            f"node-{i}",
            1,
            8,
            foreign_gpus=draw.choice([0, 0, 0, 4, 8]),
            topology=((L1, f"a{i // 512}"), (L2, f"b{i // 64}"), (L3, f"c{i // 16}")),
        )
        for i in range(args.nodes)
    ]
    settings = parse_settings({"capacityCheck": True, "topologyLevels": [L1, L2, L3]})
    for topology in ("", f"required={L3}", f"preferred={L3}"):
        sizes = random.Random(2)
        queued = []
        for i in range(args.workloads):
            pods = sizes.choice([1, 2, 4, 8, 16, 32])
            queued.append(
                Workload(
                    f"t/w{i}", "q", pods, gpus=pods * 8, created_at=i, queued_at=i,
                    shape=((pods, 8),), topology=topology,
                )
            )  # fmt: skip
        start = time.perf_counter()
        plan = plan_admission(queued, [], settings, 0, nodes=nodes)
        took = (time.perf_counter() - start) * 1000
        placed = sum(1 for _, domain in plan.domains if domain)
        print(
            f"{topology or 'no topology':<31} admitted {len(plan.admit):>5} of {len(queued)} "
            f"on {len(nodes)} nodes ({placed} inside a domain); plan {took:.0f} ms"
        )


if __name__ == "__main__":
    main()
