"""The Muster stack: one per EKS cluster. It only wires the constructs."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra import constants as c
from infra.config import LOG_RETENTION_DAYS, MusterConfig
from infra.events import EventBus
from infra.functions import ControlPlaneFunctions, FunctionWiring
from infra.images import AgentImageRepository
from infra.layer import LayerBuilder, MusterLayer
from infra.monitoring import Monitoring
from infra.nag import acknowledge_findings, acknowledge_tuner_findings
from infra.network import FunctionNetwork, acknowledge_vpc_findings
from infra.queues import Queues
from infra.security import AgentRole, EksAccess
from infra.table import StateTable
from infra.timers import TimerStateMachine
from infra.tuner import Tuner

R = logs.RetentionDays
RETENTION = dict(
    zip(
        LOG_RETENTION_DAYS,
        (
            R.ONE_DAY,
            R.THREE_DAYS,
            R.FIVE_DAYS,
            R.ONE_WEEK,
            R.TWO_WEEKS,
            R.ONE_MONTH,
            R.TWO_MONTHS,
            R.THREE_MONTHS,
            R.FOUR_MONTHS,
            R.FIVE_MONTHS,
            R.SIX_MONTHS,
            R.ONE_YEAR,
            R.THIRTEEN_MONTHS,
            R.EIGHTEEN_MONTHS,
            R.TWO_YEARS,
            R.THREE_YEARS,
            R.FIVE_YEARS,
            R.SIX_YEARS,
            R.SEVEN_YEARS,
            R.EIGHT_YEARS,
            R.NINE_YEARS,
            R.TEN_YEARS,
        ),
        strict=True,
    )
)


class MusterStack(Stack):
    """Bus, queues, table, timers, functions, monitoring and access for one cluster."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: MusterConfig,
        layer_builder: LayerBuilder | None = None,
        **kwargs: Any,
    ) -> None:
        # Stack tags: the CLI applies them to every resource at deploy time.
        kwargs.setdefault("tags", {"muster:cluster": config.cluster_name})
        super().__init__(scope, construct_id, **kwargs)
        removal = (
            RemovalPolicy.RETAIN if config.removal_policy == "retain" else RemovalPolicy.DESTROY
        )
        retention = RETENTION[config.log_retention_days]

        queues = Queues(self, c.ID_QUEUES)
        table = StateTable(self, c.ID_TABLE, removal_policy=removal)
        agent = AgentRole(
            self,
            c.ID_AGENT_ROLE,
            cluster_arn=self.format_arn(
                service="eks", resource="cluster", resource_name=config.cluster_name
            ),
            namespace=config.agent_namespace,
            service_account=config.agent_service_account,
        )
        bus = EventBus(
            self,
            c.ID_EVENTS,
            ingest_queue=queues.ingest,
            ingest_dlq=queues.by_name[c.INGEST].dlq,
            agent_role=agent.role,
        )
        agent.allow_put_events(bus.bus)
        timers = TimerStateMachine(
            self,
            c.ID_TIMERS,
            timer_queue=queues.timer,
            log_retention=retention,
            removal_policy=removal,
        )
        layer = MusterLayer(self, c.ID_LAYER, builder=layer_builder)
        network = (
            FunctionNetwork(self, c.ID_NETWORK, config=config.network) if config.network else None
        )
        images = AgentImageRepository(
            self, c.ID_AGENT_IMAGES, stack_name=config.stack_name, removal_policy=removal
        )
        functions = ControlPlaneFunctions(
            self,
            c.ID_FUNCTIONS,
            config=config,
            wiring=FunctionWiring(
                table=table.table,
                bus=bus.bus,
                bus_name=bus.bus_name,
                queues={name: pair.queue for name, pair in queues.by_name.items()},
                state_machine=timers.state_machine,
                state_machine_name=timers.state_machine_name,
                layer=layer.layer,
                log_retention=retention,
                removal_policy=removal,
                network=network,
            ),
        )
        if network is not None:
            acknowledge_vpc_findings(functions)
        bus.restrict_put_events(list(functions.roles.values()))
        if config.create_eks_access_entries:
            EksAccess(
                self,
                c.ID_EKS_ACCESS,
                cluster_name=config.cluster_name,
                function_roles=dict(functions.roles),
                agent_role=agent.role,
                agent_namespace=config.agent_namespace,
                agent_service_account=config.agent_service_account,
            )
        monitoring = Monitoring(
            self,
            c.ID_MONITORING,
            config=config,
            queues=queues.by_name,
            functions={**functions.functions, c.SWEEPER: functions.sweeper},
            state_machine=timers.state_machine,
            removal_policy=removal,
        )
        acknowledge_findings(
            self,
            table=table.table.node.default_child,  # type: ignore[arg-type]
            timer_state_machine_name=timers.state_machine_name,
        )

        self._output(c.OUT_EVENT_BUS_NAME, bus.bus_name, "Bus the agent puts events on")
        self._output(c.OUT_EVENT_BUS_ARN, bus.bus.event_bus_arn, "ARN of the bus")
        self._output(c.OUT_TABLE_NAME, table.table.table_name, "State table")
        for name, key in c.OUT_QUEUE_URLS.items():
            self._output(key, queues.by_name[name].queue.queue_url, f"The {name} queue")
        self._output(
            c.OUT_TIMER_STATE_MACHINE_ARN,
            timers.state_machine.state_machine_arn,
            "Readiness timers",
        )
        self._output(
            c.OUT_AGENT_ROLE_ARN, agent.role.role_arn, "The agent's IAM role (Pod Identity)"
        )
        for name, key in c.OUT_FUNCTION_ROLE_ARNS.items():
            self._output(key, functions.roles[name].role_arn, f"Role of the {name} function")
        for name, key in c.OUT_FUNCTION_NAMES.items():
            self._output(key, functions.functions[name].function_name, f"The {name} function")
        self._output(
            c.OUT_SWEEPER_FUNCTION_NAME, functions.sweeper.function_name, "The sweeper function"
        )
        self._output(c.OUT_CLUSTER_NAME, config.cluster_name, "The EKS cluster Muster manages")
        self._output(c.OUT_AGENT_NAMESPACE, config.agent_namespace, "The agent's namespace")
        self._output(
            c.OUT_AGENT_SERVICE_ACCOUNT, config.agent_service_account, "The agent's service account"
        )
        self._output(
            c.OUT_AGENT_IMAGE_REPOSITORY_URI,
            images.repository.repository_uri,
            "ECR repository of the agent image (muster agent-image pushes there)",
        )
        if network is not None and network.created_security_group is not None:
            self._output(
                c.OUT_FUNCTIONS_SECURITY_GROUP_ID,
                network.created_security_group.security_group_id,
                "The functions' security group (allow it on the cluster's API endpoint)",
            )
        if config.tuner:
            self._tuner(config, retention, removal, layer_builder)
        self._output(c.OUT_ALARM_TOPIC_ARN, monitoring.topic.topic_arn, "Topic the alarms notify")
        self._output(
            c.OUT_DASHBOARD_NAME, monitoring.dashboard.dashboard_name, "CloudWatch dashboard"
        )

    def _tuner(
        self,
        config: MusterConfig,
        retention: logs.RetentionDays,
        removal: RemovalPolicy,
        layer_builder: LayerBuilder | None,
    ) -> None:
        """`muster tune --on aws`'s map, only with `muster:tuner` (infra/tuner.py)."""
        tuner = Tuner(
            self,
            c.ID_TUNER,
            concurrency=config.tuner_concurrency,
            log_retention=retention,
            removal_policy=removal,
            layer_builder=layer_builder,
        )
        acknowledge_tuner_findings(self, tuner)
        self._output(
            c.OUT_TUNER_BUCKET_NAME, tuner.bucket.bucket_name, "Runs of muster tune --on aws"
        )
        self._output(
            c.OUT_TUNER_STATE_MACHINE_ARN,
            tuner.state_machine.state_machine_arn,
            "The map of muster tune --on aws",
        )

    def _output(self, key: str, value: str, description: str) -> None:
        CfnOutput(self, key, value=value, description=description)
