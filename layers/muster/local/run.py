"""`muster local`: the deployed control plane on this machine, a scenario in, a story out.

1. A moto server on localhost serves the AWS APIs (timers really wait and fire).
2. The CDK app is synthesised and its template deployed into it: the bus, rules,
   queues, table and state machine are the ones `cdk deploy` creates.
3. `LambdaRunner` plays Lambda's event source mappings and calls the real handlers.
4. `LocalCluster` (a simulated EKS cluster, the simulator's model) sits behind the
   handlers' `ClusterActions` port and sends what an agent would see to the bus.
5. A rule of our own taps the control plane's lifecycle events: they are the live
   view and the event log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from muster import contract
from muster.local.cluster import LocalCluster, job_name
from muster.local.moto_server import Endpoint, moto_server
from muster.local.runner import LambdaRunner, discover, resolver_for
from muster.local.scaling import scale_scenario
from muster.sim.kube import node_line
from muster.sim.runlog import eviction_class
from muster.sim.scenario import Scenario

STACK = contract.LOCAL_STACK_NAME
CLUSTER = "local"
TAP_QUEUE = "muster-local-lifecycle-tap"
LOG_FIELDS = (
    "attempt",
    "reason",
    "cause",
    "count",
    "requeueAt",
    "readyPods",
    "gangSize",
    "node",
    "dryRun",
)
DONE_EVENTS = ("Finished", "Deactivated")


class LocalModeError(RuntimeError):
    """The local control plane could not be set up; the message says which step."""


def repo_root() -> Path:
    """The checkout `muster` is installed from (the local mode runs the repo's own stack)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "app.py").is_file() or not (root / "functions").is_dir():
        raise LocalModeError(
            f"the local mode runs from a checkout of the repository; {root} has no app.py"
        )
    return root


@dataclass
class LocalResult:
    scenario: str
    scale: float
    events: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    wall_seconds: float = 0.0
    end: float = 0.0  # local seconds (scaled) at which the scenario was over
    cluster: LocalCluster | None = None
    runner_errors: list[str] = field(default_factory=list)


def synthesize(root: Path, out: Path, settings_doc: dict[str, Any]) -> None:
    """`python app.py` with the local context; the same app `cdk deploy` runs."""
    context = {
        "muster:clusterName": CLUSTER,
        "muster:stackName": STACK,
        "muster:settings": settings_doc,
        "muster:removalPolicy": "destroy",
        "muster:createEksAccessEntries": False,
    }
    env = dict(os.environ, CDK_OUTDIR=str(out), CDK_CONTEXT_JSON=json.dumps(context))
    env.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LocalModeError(f"cdk synth failed:\n{done.stderr[-4000:]}")


def deploy(root: Path, assembly: Path, endpoint: Endpoint) -> dict[str, str]:
    """Deploy the synthesised stack into the local endpoint; returns the stack's outputs."""
    env = dict(os.environ, **endpoint.environment())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "infra.deploy_local",
            "--assembly",
            str(assembly),
            "--stack",
            STACK,
            "--endpoint-url",
            endpoint.url,
            "--region",
            endpoint.region,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise LocalModeError(
            f"deploying the stack into the local endpoint failed:\n{done.stderr[-4000:]}"
        )
    outputs: dict[str, str] = json.loads(done.stdout)["outputs"]
    return outputs


def tap_lifecycle(endpoint: Endpoint, bus_name: str) -> str:
    """A queue that receives every lifecycle event of the bus (a user's own rule would do the same)."""
    sqs, events = endpoint.client("sqs"), endpoint.client("events")
    url: str = sqs.create_queue(QueueName=TAP_QUEUE)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(
        Name="muster-local-tap",
        EventBusName=bus_name,
        EventPattern=json.dumps({"source": ["muster.controlplane"]}),
    )
    events.put_targets(
        Rule="muster-local-tap", EventBusName=bus_name, Targets=[{"Id": "tap", "Arn": arn}]
    )
    return url


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# How often a held control plane (the scenario over) looks for work: admin commands
# such as `muster reactivate` get an answer within about this long.
HOLD_POLL = 0.5


def run_local(
    scenario: Scenario,
    *,
    scale: float = 10.0,
    port: int | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    tick: float = 0.02,
    verbose: bool = False,
    hold: Callable[[Endpoint, LocalResult], None] | None = None,
    on_board: Callable[[float, dict[str, list[str]]], None] | None = None,
) -> LocalResult:
    """Run `scenario` (in scenario time) through the local control plane, `scale` times faster."""
    from muster.agent.sender import EventBridgeSender
    from muster.lambdas import wiring

    root = repo_root()
    scaled = scale_scenario(scenario, scale)
    result = LocalResult(scenario.name, scale)
    started = time.perf_counter()
    quiet = (
        {}
        if verbose
        else {
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "LOG_LEVEL": "WARNING",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
    )
    with (
        tempfile.TemporaryDirectory(prefix="muster-local-") as tmp,
        moto_server(port=port) as endpoint,
        _environment({**endpoint.environment(), **quiet}),
    ):
        synthesize(root, Path(tmp) / "cdk.out", scaled.settings.to_dict())
        result.outputs = deploy(root, Path(tmp) / "cdk.out", endpoint)
        bus = _output(result.outputs, "EventBusName")
        tap = tap_lifecycle(endpoint, bus)
        sqs = endpoint.client("sqs")
        cluster = LocalCluster(
            scaled, EventBridgeSender(endpoint.client("events"), bus), cluster_name=CLUSTER
        )
        result.cluster = cluster
        wiring.use_cluster(lambda _config: cluster)
        runner = LambdaRunner(
            sqs,
            discover(endpoint.client("lambda"), sqs, resolver_for(root / "functions")),
            base_environment=quiet,
            retry_visibility=1,
        )
        open_workloads = {w.name for w in scaled.workloads}
        failures = scenario.models_failures
        board = Board(endpoint, _output(result.outputs, "TableName"), on_board, scale)

        def advance() -> None:
            # The events first, then the phases they moved the workloads to.
            for entry in _read_tap(sqs, tap, cluster.started_at, scale, failures):
                # The diagnosis is shown live; the files keep the simulator's fields.
                diagnosis = entry.pop("diagnosis", None)
                result.events.append(entry)
                board.saw(entry)
                if entry["event"] in DONE_EVENTS:
                    open_workloads.discard(entry["workload"])
                if on_event is not None:
                    on_event({**entry, "diagnosis": diagnosis} if diagnosis else entry)
            for t, node, failed in cluster.take_node_changes():
                line = node_line(round(t * scale, 3), node, failed=failed)
                result.events.append(line)
                if on_event is not None:
                    on_event(line)
            board.poll(cluster.now())
            time.sleep(tick)

        clock: threading.Thread | None = None
        runner.warm()
        runner.start(interval=tick)
        try:
            cluster.start()
            clock = cluster.keep_time(idle=HOLD_POLL)
            while open_workloads and cluster.now() <= scaled.until:
                advance()
            board.poll(cluster.now(), final=True)  # where the last events left everyone
            result.wall_seconds = time.perf_counter() - started
            result.end = min(cluster.now(), scaled.until)
            if hold is not None:
                hold(endpoint, result)
                # Until Ctrl-C the admin commands work against the endpoint. Nothing is
                # scheduled any more, so poll slowly: an idle hold sleeps.
                runner.idle_interval = HOLD_POLL
                while True:
                    advance()
                    time.sleep(HOLD_POLL)
        except KeyboardInterrupt:
            if hold is None:
                raise
        finally:
            cluster.halt()
            runner.stop()
            if clock is not None:
                clock.join(timeout=10)
            wiring.use_cluster(None)
        result.runner_errors = list(runner.stats.errors)
    result.events.sort(key=lambda e: e["t"])
    return result


# The phase a lifecycle event leaves its workload in. An eviction names none: the
# Requeued or Deactivated event that follows it does (a dry-run one changes nothing).
PHASE_AFTER = {
    "Submitted": "Pending",
    "Admitted": "Admitted",
    "PodsReady": "Running",
    "WaitForRecovery": "Recovering",
    "Requeued": "Requeued",
    "BackoffFinished": "Pending",
    "Deactivated": "Deactivated",
    "Reactivated": "Pending",
    "Finished": "Finished",
}


class Board:
    """The live view of the workloads' states, read from the control plane's table.

    The table changes before the bus delivers the event that says so, so a view is
    shown only once every workload in it is where the events printed so far left
    it: each event line comes before the phases it moved workloads to. A view that
    no event explains is shown anyway after `patience` (seconds on the run's clock).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        table: str,
        show: Callable[[float, dict[str, list[str]]], None] | None,
        scale: float,
        every: float = 1.0,
        patience: float = 3.0,
    ) -> None:
        from muster.aws.dynamo import DynamoStore

        self._store = DynamoStore(endpoint.client("dynamodb"), table, CLUSTER)
        self._show = show
        self._scale = scale
        self._every = every
        self._patience = patience
        self._last: dict[str, list[str]] = {}
        self._next = 0.0
        self._unexplained_since: float | None = None
        self._told: dict[str, str | None] = {}  # workload -> the phase its events say
        self._told_at: dict[str, float] = {}  # workload -> the time of that event

    def saw(self, entry: Mapping[str, Any]) -> None:
        """An event line was printed: the phase it leaves its workload in is explained."""
        workload = entry.get("workload")
        if workload is None or entry.get("dryRun"):
            return
        if entry["t"] < self._told_at.get(workload, entry["t"]):
            return  # delivered after a later one of its workload (SQS does not keep order)
        self._told[workload] = PHASE_AFTER.get(entry["event"])
        self._told_at[workload] = entry["t"]

    def poll(self, now: float, *, final: bool = False) -> None:
        """Show the table's view if it changed, once explained (`final`: now, at the end)."""
        if self._show is None or (now < self._next and not final):
            return
        from muster.runtime.views import status

        phases = status(self._store)["phases"]
        current = {
            phase: sorted(job_name(w["workload"]) for w in items)
            for phase, items in phases.items()
            if items
        }
        if current == self._last:
            self._next, self._unexplained_since = now + self._every, None
            return
        if not final and not self.explained(current):
            if self._unexplained_since is None:
                self._unexplained_since = now
            if now - self._unexplained_since < self._patience:
                self._next = now + min(self._every, 0.2)  # the event is on its way
                return
        self._next, self._unexplained_since = now + self._every, None
        self._last = current
        self._show(now * self._scale, current)

    def explained(self, view: Mapping[str, Sequence[str]]) -> bool:
        """Whether every workload of `view` is in the phase its last printed event says."""
        return all(self._told.get(name) == phase for phase, names in view.items() for name in names)


def print_board(stream: TextIO) -> Callable[[float, dict[str, list[str]]], None]:
    def show(t: float, phases: dict[str, list[str]]) -> None:
        cells = "  |  ".join(f"{phase}: {', '.join(names)}" for phase, names in phases.items())
        stream.write(f"{'':12}{cells}\n")
        stream.flush()

    return show


def _output(outputs: dict[str, str], suffix: str) -> str:
    for key, value in outputs.items():
        if key.endswith(suffix):
            return value
    raise LocalModeError(
        f"the deployed stack has no output ending in {suffix!r}: {sorted(outputs)}"
    )


def _read_tap(
    sqs: Any, url: str, epoch0: float, scale: float, failures: bool = False
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return out
        for m in messages:
            event = json.loads(m["Body"])
            out.append(lifecycle_entry(event["detail"], epoch0, scale, failures))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def lifecycle_entry(
    detail: dict[str, Any], epoch0: float, scale: float, failures: bool = False
) -> dict[str, Any]:
    """A bus lifecycle event as an event-log line in scenario time (the simulator's format).

    With `failures` (the scenario models failure modes) an eviction also carries the
    class of its not-ready pods, as in the simulator's log, and, for the live view
    only, its diagnosis in a sentence.
    """
    from muster.schema import parse_time

    at = parse_time(detail["at"], "at")
    entry: dict[str, Any] = {
        "t": round((at - epoch0) * scale, 3),
        "workload": job_name(detail["workload"]),
        "event": detail["event"],
    }
    for key in LOG_FIELDS:
        value = detail.get(key)
        if value is None:
            continue
        if key == "requeueAt" and isinstance(value, int | float):
            value = round((value - epoch0) * scale, 3)
        entry[key] = value
    found = detail.get("diagnosis")
    if failures and detail["event"] == "Evicted":
        entry["class"] = eviction_class(detail)
        if isinstance(found, dict):
            entry["diagnosis"] = found.get("summary")
    return entry


def print_event(stream: TextIO) -> Callable[[dict[str, Any]], None]:
    """The live view: one line per lifecycle event, as it happens."""

    def show(e: dict[str, Any]) -> None:
        extra = " ".join(f"{k}={e[k]}" for k in ("attempt", "reason", "cause", "count") if k in e)
        if "workload" not in e:  # a node failed or came back
            extra = "(node)"
        who = e.get("workload") or e.get("node", "")
        stream.write(f"[{e['t']:>8.1f}s] {who:<16} {e['event']:<16} {extra}\n")
        if e.get("diagnosis"):
            stream.write(f"{'':12}why: {e['diagnosis']}\n")
        stream.flush()

    return show
