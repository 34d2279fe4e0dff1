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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from muster import contract
from muster.core.durations import DurationError, parse_duration

if TYPE_CHECKING:
    from muster.kube.http import KubeApi


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


class KubeConfigMissing(Exception):
    """No way to reach a Kubernetes API server was found; the message says where it looked."""


def kube_configuration(kubeconfig: str | None, environ: Any = None) -> Any:
    """Where to reach the API server, found as kubectl finds it.

    An explicit kubeconfig first; inside a pod, the service account; otherwise
    the default kubeconfig (the KUBECONFIG list, else ~/.kube/config).
    """
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    environ = os.environ if environ is None else environ
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config"),
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = kubeconfig or environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeConfigMissing(
            f"cannot reach a Kubernetes API server: {where}: {exc}; give --kubeconfig FILE "
            "(or set KUBECONFIG), or run inside the cluster"
        ) from None
    return configuration


class PrintSender:
    """Writes events to stdout: for trying the agent out without a bus."""

    def send(self, entries: Sequence[Any]) -> None:
        for e in entries:
            print(json.dumps({"detail-type": e.detail_type, "detail": e.detail}), flush=True)


def agent_api(kubeconfig: str | None) -> KubeApi:
    """The agent's API client: its credentials as the kubernetes client loads them.

    The official client (the `agent` extra) reads the in-cluster service account
    or a kubeconfig, with its refreshing tokens and exec plugins; requests then go
    through Muster's own `KubeApi`, like the control plane's.
    """
    from muster.kube.http import KubeApi

    configuration = kube_configuration(kubeconfig)  # KubeConfigMissing when none is found
    return KubeApi(
        configuration.host,
        # The loaders store the whole header value ("Bearer ..."), refreshed by their hook.
        authorization=lambda: configuration.get_api_key_with_prefix("BearerToken"),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=configuration.verify_ssl,
    )


def run_agent(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not args.cluster:
        print("muster agent: --cluster (or MUSTER_CLUSTER_NAME) is required", file=sys.stderr)
        return 2
    try:
        window = parse_duration(args.coalesce)
        resync = parse_duration(args.resync)
    except DurationError as exc:
        print(f"muster agent: {exc}", file=sys.stderr)
        return 2

    from muster.agent.agent import Agent
    from muster.agent.leader import LeaseElector
    from muster.agent.mapping import TOLERATED_TAINTS
    from muster.agent.runner import AgentRunner
    from muster.agent.sender import EventBridgeSender, Outbox
    from muster.agent.watch import KubeWatchSource

    try:
        api = agent_api(args.kubeconfig)
    except KubeConfigMissing as exc:
        print(f"muster agent: {exc}", file=sys.stderr)
        return 2

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
    return 0
