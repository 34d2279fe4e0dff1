"""`muster agent`: the in-cluster agent's command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from muster import contract
from muster.agent.kubeconfig import KubeConfigMissing, agent_api
from muster.cli import EXIT_BAD_INPUT, EXIT_OK
from muster.core.durations import DurationError, parse_duration


def register(subparsers: Any) -> None:
    env = os.environ.get
    p = subparsers.add_parser(
        "agent",
        help="run the in-cluster agent (watches workloads, pods, nodes; sends events)",
        description=(
            "Watch workloads labelled muster.io/queue, their pods and the nodes, and send "
            "their status to the EventBridge bus. Run two replicas: a Lease picks the one "
            "that sends."
        ),
    )
    p.add_argument(
        "--cluster",
        default=env(contract.ENV_CLUSTER_NAME),
        help="EKS cluster name (MUSTER_CLUSTER_NAME)",
    )
    p.add_argument(
        "--event-bus",
        default=env("MUSTER_EVENT_BUS", "muster"),
        help="EventBridge bus name or ARN (MUSTER_EVENT_BUS)",
    )
    p.add_argument(
        "--namespace",
        default=env("POD_NAMESPACE", "muster-system"),
        help="namespace of the leader Lease (POD_NAMESPACE)",
    )
    p.add_argument("--lease", default="muster-agent", help="name of the leader Lease")
    p.add_argument(
        "--identity",
        default=env("POD_NAME") or socket.gethostname(),
        help="this replica's name in the Lease (POD_NAME)",
    )
    p.add_argument(
        "--coalesce",
        default=env("MUSTER_COALESCE", "1s"),
        help="window in which updates of one pod are merged (default 1s)",
    )
    p.add_argument(
        "--resync",
        default=env("MUSTER_RESYNC", "10m"),
        help="relist and re-send everything this often (default 10m)",
    )
    p.add_argument(
        "--tolerated-taints",
        default=env("MUSTER_TOLERATED_TAINTS", ""),
        help=(
            "comma-separated taint keys every Muster workload tolerates, besides "
            "nvidia.com/gpu: nodes with only these still take Muster's pods, for the "
            "capacity check (MUSTER_TOLERATED_TAINTS)"
        ),
    )
    p.add_argument(
        "--kubeconfig",
        default=env("KUBECONFIG"),
        help=(
            "use this kubeconfig (KUBECONFIG); without it, the in-cluster service account "
            "inside a pod, else ~/.kube/config as kubectl does"
        ),
    )
    p.add_argument(
        "--heartbeat-file",
        default=env("MUSTER_HEARTBEAT_FILE", "/tmp/muster-agent-alive"),
        help="touched every few seconds while the agent loop runs (for a liveness probe)",
    )
    p.add_argument(
        "--no-leader-election",
        action="store_true",
        help="send without holding the Lease (one replica only)",
    )
    p.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print events as JSON lines instead of sending them",
    )
    p.set_defaults(handler=run_agent)


def run_agent(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not args.cluster:
        print("muster agent: --cluster (or MUSTER_CLUSTER_NAME) is required", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        window = parse_duration(args.coalesce)
        resync = parse_duration(args.resync)
    except DurationError as exc:
        print(f"muster agent: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    from muster.agent.agent import Agent
    from muster.agent.leader import LeaseElector
    from muster.agent.mapping import TOLERATED_TAINTS
    from muster.agent.runner import AgentRunner
    from muster.agent.sender import EventBridgeSender, Outbox, PrintSender
    from muster.agent.watch import KubeWatchSource

    try:
        api = agent_api(args.kubeconfig)
    except KubeConfigMissing as exc:
        print(f"muster agent: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    sender: Any = PrintSender() if args.print_only else EventBridgeSender.for_bus(args.event_bus)
    tolerated = TOLERATED_TAINTS | {
        key.strip() for key in args.tolerated_taints.split(",") if key.strip()
    }
    agent = Agent(args.cluster, Outbox(window=window), sender, tolerated_taints=tolerated)
    elector = None
    if not args.no_leader_election:
        elector = LeaseElector(
            api, namespace=args.namespace, name=args.lease, identity=args.identity
        )

    def heartbeat() -> None:
        with open(args.heartbeat_file, "a"):
            os.utime(args.heartbeat_file)

    runner = AgentRunner(agent, KubeWatchSource(api), elector, resync=resync, heartbeat=heartbeat)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("muster.agent").info(
        "agent for cluster %s sending to %s as %s", args.cluster, args.event_bus, args.identity
    )
    runner.run(stop)
    logging.getLogger("muster.agent").info(json.dumps({"agentStats": runner.stats()}))
    return EXIT_OK
