"""The event bus: agent events in (to the ingest queue), lifecycle events out."""

from __future__ import annotations

import jsii
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from aws_cdk.interfaces.aws_events import IRuleRef
from constructs import Construct

from infra import constants as c

# Delivery retries of an agent event to the ingest queue (EventBridge's maximum).
INGEST_RETRY_ATTEMPTS = 185


@jsii.implements(events.IRuleTarget)
class SendOnlyQueueTarget:
    """A queue as a rule's target, with EventBridge granted `sqs:SendMessage` alone.

    CDK's own SQS target grants `GetQueueAttributes` and `GetQueueUrl` too, which
    EventBridge does not use. The grant is for this rule only (`aws:SourceArn`), on
    the queue and on the dead-letter queue that keeps what cannot be delivered.
    """

    def __init__(self, queue: sqs.IQueue, dead_letter_queue: sqs.IQueue, retry_attempts: int):
        self.queue = queue
        self.dead_letter_queue = dead_letter_queue
        self.retry_attempts = retry_attempts

    def bind(self, rule: IRuleRef, id: str | None = None) -> events.RuleTargetConfig:
        for sid, queue in (
            ("EventsSendToIngest", self.queue),
            ("EventsSendUndeliverable", self.dead_letter_queue),
        ):
            queue.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    principals=[iam.ServicePrincipal("events.amazonaws.com")],
                    actions=["sqs:SendMessage"],
                    resources=[queue.queue_arn],
                    conditions={"ArnEquals": {"aws:SourceArn": rule.rule_ref.rule_arn}},
                )
            )
        return events.RuleTargetConfig(
            arn=self.queue.queue_arn,
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(
                arn=self.dead_letter_queue.queue_arn
            ),
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_retry_attempts=self.retry_attempts
            ),
        )


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
            # Undeliverable events are kept in the DLQ, not dropped.
            targets=[SendOnlyQueueTarget(ingest_queue, ingest_dlq, INGEST_RETRY_ATTEMPTS)],
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
