"""Builds the control plane from the functions' environment (once per Lambda container)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from muster.aws.config import RuntimeConfig
from muster.aws.dynamo import DynamoStore
from muster.aws.eventbridge import EventBridgeBus
from muster.aws.metrics import EmfMetrics
from muster.aws.sqs import SqsMessages, SqsSlices
from muster.aws.stepfunctions import StepFunctionsTimers
from muster.botocore_config import BOTOCORE_RETRIES
from muster.core.model import Workload
from muster.runtime.ports import ClusterActions, WorkloadStore
from muster.runtime.service import ControlPlane
from muster.runtime.settings import RuntimeSettings, settings_from_json
from muster.runtime.sweeper import Sweeper

ClusterFactory = Callable[[RuntimeConfig], ClusterActions]
T = TypeVar("T")


_cluster_override: ClusterFactory | None = None


def use_cluster(factory: ClusterFactory | None) -> None:
    """Point the functions of this process at another cluster (None: EKS again).

    The local mode runs the handlers in-process against its simulated cluster.
    """
    global _cluster_override
    _cluster_override = factory


def default_cluster(config: RuntimeConfig) -> ClusterActions:
    return (_cluster_override or kubernetes_cluster)(config)


def kubernetes_cluster(config: RuntimeConfig) -> ClusterActions:
    """The one place where the Lambdas' real cluster adapter is built.

    `muster.kube.adapter.from_environment` reads `MUSTER_CLUSTER_NAME`, asks EKS
    for the endpoint (`eks:DescribeCluster`) and authenticates with the function's
    role, which an EKS access entry maps to the `muster-controlplane` group. Its
    fencing authority is the workload's record in the table (a consistent read).
    """
    from muster.kube.adapter import from_environment

    return from_environment(records=record_reader(dynamo_store(config)))


def record_reader(store: WorkloadStore) -> Callable[[str], Workload | None]:
    """The committed record of a workload, without its pods (what fencing needs)."""

    def read(key: str) -> Workload | None:
        light = store.load_pod(key, None)
        return light.workload if light is not None else None

    return read


def dynamo_store(config: RuntimeConfig, session: Any = None) -> DynamoStore:
    """The state table, through a client with botocore's standard retries."""
    import boto3

    client = (session or boto3.session.Session()).client("dynamodb", config=BOTOCORE_RETRIES)
    return DynamoStore(client, config.table_name, config.cluster_name, config.history_ttl_days)


def sqs_messages(config: RuntimeConfig, session: Any = None) -> SqsMessages:
    """The requeue and timer queues, through a client with botocore's standard retries."""
    import boto3

    client = (session or boto3.session.Session()).client("sqs", config=BOTOCORE_RETRIES)
    return SqsMessages(client, config.admission_queue_url, config.timer_queue_url)


def build_control_plane(
    config: RuntimeConfig,
    *,
    cluster: ClusterFactory = default_cluster,
    session: Any = None,
    inline_admission: bool = False,
) -> ControlPlane:
    import boto3

    session = session or boto3.session.Session()
    store = dynamo_store(config, session)
    return ControlPlane(
        store=store,
        timers=StepFunctionsTimers(
            session.client("stepfunctions", config=BOTOCORE_RETRIES), config.timer_state_machine_arn
        ),
        messages=sqs_messages(config, session),
        bus=EventBridgeBus(
            session.client("events", config=BOTOCORE_RETRIES),
            config.event_bus_name,
            config.cluster_name,
        ),
        metrics=EmfMetrics(),
        cluster=cluster(config),
        settings=RuntimeSettings(settings_from_json(config.settings_json), store),
        inline_admission=inline_admission,
        slices=(
            SqsSlices(session.client("sqs", config=BOTOCORE_RETRIES), config.ingest_queue_url)
            if config.ingest_queue_url
            else None
        ),
    )


def build_sweeper(config: RuntimeConfig, *, session: Any = None) -> Sweeper:
    """The sweeper needs no cluster access: it reads the table, finishes leftover pod
    expiries and sends messages."""
    store = dynamo_store(config, session)
    return Sweeper(
        store=store,
        messages=sqs_messages(config, session),
        settings=RuntimeSettings(settings_from_json(config.settings_json), store),
        metrics=EmfMetrics(),
    )


class PerContainer(Generic[T]):
    """What a handler builds from its function's environment, once per Lambda container.

    Each handler module holds one (`PerContainer(build_control_plane)`); it is
    built at the first invocation and kept for the container's next ones. Not at
    import: building reaches the EKS API (the cluster adapter asks for the
    endpoint), which an import must not do, and the local mode sets each
    function's environment per call. Tests hand the handler their own control plane.
    """

    def __init__(self, build: Callable[[RuntimeConfig], T]) -> None:
        self.build = build
        self._built: tuple[T, RuntimeConfig] | None = None

    def get(self) -> tuple[T, RuntimeConfig]:
        if self._built is None:
            config = RuntimeConfig.from_env()
            self._built = (self.build(config), config)
        return self._built
