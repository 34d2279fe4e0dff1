"""What it costs to run Muster: AWS requests per gang lifecycle, priced (`make bench-cost`).

The local mode plays two 64-pod gangs through the deployed stack (moto) and the
real handlers: `good` is admitted, all its pods become Ready, it runs and
finishes; `stuck` never becomes Ready and is evicted, requeued, admitted again,
evicted and deactivated (`backoffLimitCount: 1`). Every AWS request the control
plane and the agent make is counted by service and operation (a hook on
botocore's client, told apart from the local mode's own machinery by the calling
module), Lambda invocations are timed, and Step Functions state transitions are
read from the timer executions. The counts are multiplied by published us-east-1
list prices (below, as of 2025) and printed per gang lifecycle and per 1,000 pod
events.

Modelled rather than measured, and said so in the output:
- Lambda's SQS event source mapping: one ReceiveMessage and one
  DeleteMessageBatch per batch handed to a function (the local runner polls far
  more often than Lambda's long polling does); the idle polling of the mappings is
  a fixed cost per deployment, not per gang, and is left out.
- EventBridge's delivery of each matched event to its SQS target is one SQS
  request (SendMessage) on the queue.
- DynamoDB request units from item sizes (1 KB per write unit, 4 KB per read unit,
  half for eventually consistent reads, twice for transactions); moto does not
  report consumed capacity faithfully.
- Lambda duration is the in-process handler time against the local endpoint
  (its API latency is lower than AWS's: real durations are likely longer).
- CloudWatch (logs, embedded metrics, alarms, dashboard) and X-Ray are left out.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# us-east-1 list prices (USD).
PRICE = {
    # DynamoDB on-demand: per write request unit and per read request unit
    # ($0.625 and $0.125 per million since the November 2024 price cut).
    "dynamodb.write": 0.625 / 1e6,
    "dynamodb.read": 0.125 / 1e6,
    # Step Functions Standard: $0.025 per 1,000 state transitions.
    "stepfunctions.transition": 0.025 / 1e3,
    # Lambda x86: $0.20 per million requests, $0.0000166667 per GB-second.
    "lambda.request": 0.20 / 1e6,
    "lambda.gb_second": 0.0000166667,
    # SQS standard queues: $0.40 per million requests (each 64 KB chunk).
    "sqs.request": 0.40 / 1e6,
    # EventBridge custom events: $1.00 per million (each 64 KB chunk).
    "events.event": 1.00 / 1e6,
}
GOAL_PER_LIFECYCLE = 0.001

SCENARIO = """
description: one 64-pod gang admitted, Ready and finished; then one never Ready
cluster: {nodes: 8, gpusPerNode: 8}
settings:
  timeout: 30s
  requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 10}
  # A 64-pod gang's events take the local mode a few real seconds to carry: give the
  # good gang room, so that its only timer is stopped when it becomes Ready.
  queues: {roomy: {timeout: 5m}}
until: 10m
workloads:
  - {name: good, queue: roomy, submitAt: 0s, pods: 64, gpusPerPod: 1, startupSeconds: 10, runSeconds: 60}
  - {name: stuck, queue: q, submitAt: 150s, pods: 64, gpusPerPod: 1, neverReady: true}
"""
SCALE = 5.0

# Modules whose AWS calls are the deployed system's (the functions and the agent);
# everything else (deploying the stack, the local runner's polling, the live board,
# the lifecycle tap) is the local mode's own machinery.
CONTROL_PLANE = ("muster.aws.", "muster.lambdas.", "muster.runtime.", "muster_local_")
AGENT = ("muster.agent.sender",)


class Meter:
    """Counts botocore calls by (who, service, operation), with DynamoDB units and sizes."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str, str]] = Counter()
        self.units: defaultdict[tuple[str, str], float] = defaultdict(float)  # (phase, read|write)
        self.by_phase: Counter[tuple[str, str, str]] = Counter()
        self.pod_events: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.phase = "good"
        self.lock = threading.Lock()

    def install(self) -> None:
        import botocore.client

        original = botocore.client.BaseClient._make_api_call
        meter = self

        def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
            response = original(client, operation, params)
            who = _caller()
            if who is not None:
                service = client.meta.service_model.service_name
                meter.record(who, service, operation, params, response)
            return response

        botocore.client.BaseClient._make_api_call = counted  # type: ignore[method-assign]

    def record(
        self, who: str, service: str, operation: str, params: dict[str, Any], response: Any
    ) -> None:
        with self.lock:
            self.calls[(who, service, operation)] += 1
            self.by_phase[(self.phase, service, operation)] += 1
            if service == "dynamodb":
                kind, units = dynamodb_units(operation, params, response)
                self.units[(self.phase, kind)] += units
            if service == "events" and operation == "PutEvents":
                for entry in params.get("Entries", []):
                    self.events[self.phase] += 1
                    if entry.get("DetailType") == "Pod Observed":
                        self.pod_events[self.phase] += 1


def _caller() -> str | None:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(AGENT):
            return "agent"
        if name.startswith(CONTROL_PLANE):
            return "control plane"
        if name.startswith(("muster.local.", "infra.")):
            return None
        frame = frame.f_back  # type: ignore[assignment]
    return None


def item_size(value: Any) -> int:
    """DynamoDB's size of an attribute value in wire form (names counted by the caller)."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        if kind == "S":
            return len(inner.encode())
        if kind == "N":
            return len(inner.strip("-").lstrip("0")) // 2 + 2
        if kind == "B":
            return len(inner)
        if kind in ("BOOL", "NULL"):
            return 1
        if kind == "M":
            return 3 + sum(len(k) + item_size(v) + 1 for k, v in inner.items())
        if kind == "L":
            return 3 + sum(item_size(v) + 1 for v in inner)
        if kind in ("SS", "NS", "BS"):
            return sum(len(str(v)) for v in inner)
    return len(json.dumps(value))


def size_of(item: dict[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(k) + item_size(v) for k, v in item.items())


def dynamodb_units(operation: str, params: dict[str, Any], response: Any) -> tuple[str, float]:
    """(read|write, request units) of one DynamoDB call, from item sizes."""
    kb = 1024

    def wru(size: int) -> float:
        return max(1.0, math.ceil(size / kb))

    def rru(size: int, consistent: bool) -> float:
        units = max(1.0, math.ceil(size / (4 * kb)))
        return units if consistent else units / 2

    consistent = bool(params.get("ConsistentRead"))
    if operation == "PutItem":
        return "write", wru(size_of(params.get("Item")))
    if operation in ("UpdateItem", "DeleteItem"):
        # The item's size after the write is not in the request: count the values
        # written plus the key, at least one unit.
        values = params.get("ExpressionAttributeValues") or {}
        return "write", wru(size_of(params.get("Key")) + size_of(values))
    if operation == "TransactWriteItems":
        total = 0.0
        for action in params.get("TransactItems", []):
            ((_kind, body),) = action.items()
            size = size_of(body.get("Item")) or (
                size_of(body.get("Key")) + size_of(body.get("ExpressionAttributeValues"))
            )
            total += 2 * wru(size)
        return "write", total
    if operation == "BatchWriteItem":
        total = sum(
            wru(
                size_of(
                    r.get("PutRequest", {}).get("Item") or r.get("DeleteRequest", {}).get("Key")
                )
            )
            for requests in params.get("RequestItems", {}).values()
            for r in requests
        )
        return "write", total
    if operation == "GetItem":
        return "read", rru(size_of(response.get("Item")), consistent)
    if operation in ("Query", "Scan"):
        return "read", rru(sum(size_of(i) for i in response.get("Items", [])), consistent)
    if operation == "BatchGetItem":
        total = 0.0
        for table, items in response.get("Responses", {}).items():
            strong = bool(params["RequestItems"].get(table, {}).get("ConsistentRead"))
            total += sum(rru(size_of(i), strong) for i in items)
        return "read", total
    if operation == "TransactGetItems":
        return "read", sum(
            2 * rru(size_of(r.get("Item")), True) for r in response.get("Responses", [])
        )
    return "read", 0.0


def main() -> int:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    sys.path.insert(0, str(ROOT))  # the CDK app's `infra` package, as `python app.py` finds it
    from muster.local import runner as runner_module
    from muster.local.run import Endpoint, LocalResult, run_local
    from muster.sim.scenario import parse_scenario_text

    from infra import constants as c

    meter = Meter()
    meter.install()
    durations: dict[str, list[float]] = defaultdict(list)
    batches: Counter[tuple[str, str]] = Counter()  # (phase, function)
    original_invoke = runner_module.LambdaRunner._invoke

    def timed(self: Any, m: Any, event: dict[str, Any]) -> set[str]:
        started = time.perf_counter()
        try:
            return original_invoke(self, m, event)
        finally:
            durations[f"{meter.phase}/{m.function_name}"].append(time.perf_counter() - started)
            batches[(meter.phase, m.function_name)] += 1

    runner_module.LambdaRunner._invoke = timed  # type: ignore[method-assign]
    transitions: Counter[str] = Counter()
    memory: dict[str, int] = {}
    phase_switch = threading.Event()

    story: dict[str, list[str]] = defaultdict(list)

    def on_event(entry: dict[str, Any]) -> None:
        story[entry["workload"]].append(entry["event"])
        if entry["workload"] == "stuck" and entry["event"] == "Submitted":
            meter.phase = "stuck"
            phase_switch.set()

    def finish(endpoint: Endpoint, result: LocalResult) -> None:
        sfn = endpoint.client("stepfunctions")
        lam = endpoint.client("lambda")
        for name in (result.outputs.get(k) for k in c.OUT_FUNCTION_NAMES.values()):
            if name:
                memory[name] = lam.get_function_configuration(FunctionName=name)["MemorySize"]
        machine = next(v for k, v in result.outputs.items() if k.endswith("StateMachineArn"))
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine):
            for ex in page["executions"]:
                who = "good" if "good" in ex["name"] else "stuck"
                # Wait, then SignalDeadlineReached when the deadline came; a stopped
                # execution only entered Wait.
                transitions[who] += 2 if ex["status"] == "SUCCEEDED" else 1
        raise KeyboardInterrupt

    scenario = parse_scenario_text(SCENARIO, name="cost")
    started = time.perf_counter()
    run_local(scenario, scale=SCALE, on_event=on_event, hold=finish)
    print(f"local run: {time.perf_counter() - started:.0f} s wall, scale {SCALE:g}x")
    for workload, events in story.items():
        print(f"  {workload}: {' '.join(events)}")
    print(f"  timer executions' state transitions: {dict(transitions)}\n")

    report(meter, durations, batches, transitions, memory)
    return 0


def report(
    meter: Meter,
    durations: dict[str, list[float]],
    batches: Counter[tuple[str, str]],
    transitions: Counter[str],
    memory: dict[str, int],
) -> None:
    print("AWS requests made by the control plane and the agent, by service and operation:")
    for (who, service, operation), n in sorted(meter.calls.items()):
        print(f"  {who:13s} {service:14s} {operation:26s} {n:6d}")
    total_cost = 0.0
    for phase, label in (
        ("good", "admitted, Ready, finished"),
        ("stuck", "evicted, requeued, deactivated"),
    ):
        lines: list[tuple[str, float]] = []
        reads = meter.units[(phase, "read")]
        writes = meter.units[(phase, "write")]
        lines.append(
            (
                f"DynamoDB {writes:.0f} WRU + {reads:.1f} RRU",
                writes * PRICE["dynamodb.write"] + reads * PRICE["dynamodb.read"],
            )
        )
        lines.append(
            (
                f"Step Functions {transitions[phase]} state transitions",
                transitions[phase] * PRICE["stepfunctions.transition"],
            )
        )
        invocations = sum(n for (p, _), n in batches.items() if p == phase)
        gb_seconds = 0.0
        for key, values in durations.items():
            p, function = key.split("/", 1)
            if p == phase:
                mb = memory.get(function, 512)
                gb_seconds += sum(math.ceil(v * 1000) / 1000 for v in values) * mb / 1024
        lines.append(
            (
                f"Lambda {invocations} invocations, {gb_seconds:.2f} GB-s",
                invocations * PRICE["lambda.request"] + gb_seconds * PRICE["lambda.gb_second"],
            )
        )
        sqs_calls = sum(n for (p, s, _), n in meter.by_phase.items() if p == phase and s == "sqs")
        # Event source mapping (receive + delete per batch) and EventBridge's deliveries.
        sqs_modelled = 2 * invocations + meter.events[phase]
        sqs_total = sqs_calls + sqs_modelled
        lines.append(
            (
                f"SQS {sqs_calls} sent by the functions + {sqs_modelled} modelled",
                sqs_total * PRICE["sqs.request"],
            )
        )
        lines.append(
            (
                f"EventBridge {meter.events[phase]} events",
                meter.events[phase] * PRICE["events.event"],
            )
        )
        cost = sum(v for _, v in lines)
        total_cost += cost
        pods = meter.pod_events[phase]
        print(f"\n64-pod gang {label} ({pods} pod events sent by the agent):")
        for text, value in sorted(lines, key=lambda x: -x[1]):
            print(f"  {text:55s} ${value:.6f}")
        verdict = "under" if cost < GOAL_PER_LIFECYCLE else "OVER"
        print(
            f"  {'total per gang lifecycle':55s} ${cost:.6f}  ({verdict} the ${GOAL_PER_LIFECYCLE} goal)"
        )
        if pods:
            print(f"  {'per 1,000 pod events':55s} ${cost / pods * 1000:.6f}")
        top = max(lines, key=lambda x: x[1])
        print(f"  largest share: {top[0]} ({top[1] / cost:.0%})")
    print(
        "\nNot counted: CloudWatch logs and metrics, X-Ray, the event source mappings' idle "
        "polling (a fixed cost per deployment), free tiers."
    )


if __name__ == "__main__":
    sys.exit(main())
