"""The event bus: agent events in (to the ingest queue), lifecycle events out."""

from __future__ import annotations

from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants as c


class EventBus(Construct):
    """A custom bus that accepts PutEvents only from Muster's roles, each with its own source.

    The rule sends every `muster.agent` event to the ingest queue; the control
    plane's own `muster.controlplane` events stay on the bus for users to route
    (SNS, chat, dashboards) with rules of their own.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        ingest_queue: sqs.IQueue,
        ingest_dlq: sqs.IQueue,
        agent_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        self._agent_role = agent_role
        self.bus = events.EventBus(self, c.ID_BUS, description="Muster: agent and lifecycle events")
        # The bus name as `Fn::GetAtt Name` rather than `Ref`: the same value on AWS,
        # and one that AWS emulators (the local mode) resolve too.
        cfn_bus: events.CfnEventBus = self.bus.node.default_child  # type: ignore[assignment]
        self.bus_name: str = cfn_bus.attr_name
        # The agent's role may put events (also from another account, if it lives
        # there), and only with the agent's source.
        self.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="MusterAgentPutEvents",
                principals=[iam.ArnPrincipal(agent_role.role_arn)],
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={"StringEquals": {"events:source": c.AGENT_SOURCE}},
            )
        )
        self.agent_rule = events.Rule(
            self,
            c.ID_AGENT_RULE,
            event_bus=self.bus,
            description="Agent observations (workloads, pods, nodes) to the ingest queue",
            event_pattern=events.EventPattern(source=[c.AGENT_SOURCE]),
            targets=[
                targets.SqsQueue(
                    ingest_queue,
                    # Undeliverable events are kept, not dropped.
                    dead_letter_queue=ingest_dlq,
                    retry_attempts=185,
                )
            ],
        )
        cfn_rule: events.CfnRule = self.agent_rule.node.default_child  # type: ignore[assignment]
        cfn_rule.add_property_override("EventBusName", self.bus_name)

    def restrict_put_events(self, publishers: list[iam.IRole]) -> None:
        """Each source only from the principal that owns it; nobody else at all.

        Without the first Deny, any principal of the account with an IAM allow on
        `events:PutEvents` could inject workload, pod or node events. Without the
        other two, the agent could forge the control plane's lifecycle events, or a
        control-plane role the agent's observations.
        """
        agent = [self._agent_role.role_arn]
        controlplane = [role.role_arn for role in publishers]
        self.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyMusterPutEvents",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": agent + controlplane}},
            )
        )
        self.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AgentPutsOnlyAgentSource",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={
                    "ArnEquals": {"aws:PrincipalArn": agent},
                    "StringNotEquals": {"events:source": c.AGENT_SOURCE},
                },
            )
        )
        self.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="ControlPlanePutsOnlyItsSource",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={
                    "ArnEquals": {"aws:PrincipalArn": controlplane},
                    "StringNotEquals": {"events:source": c.CONTROLPLANE_SOURCE},
                },
            )
        )
