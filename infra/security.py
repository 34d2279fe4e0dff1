"""The agent's IAM role and the control plane's access to the EKS cluster."""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_eks as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import constants as c


class AgentRole(Construct):
    """The in-cluster agent's role (EKS Pod Identity): it may only put its own events.

    The trust policy admits EKS Pod Identity only for this cluster, the agent's
    namespace and its service account (the session tags Pod Identity sets), so no
    other pod, namespace or cluster that shares the account can assume it; and the
    role may put events on the Muster bus only with the agent's `source`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_arn: str,
        namespace: str,
        service_account: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.PrincipalWithConditions(
                iam.ServicePrincipal(c.POD_IDENTITY_PRINCIPAL),
                pod_identity_conditions(cluster_arn, namespace, service_account),
            ),
            description="Muster agent (EKS Pod Identity): PutEvents of its own source only",
        )
        # Pod Identity assumes the role with session tags, under the same conditions.
        self.role.assume_role_policy.add_statements(  # type: ignore[union-attr]
            iam.PolicyStatement(
                actions=["sts:TagSession"],
                principals=[iam.ServicePrincipal(c.POD_IDENTITY_PRINCIPAL)],
                conditions=pod_identity_conditions(cluster_arn, namespace, service_account),
            )
        )

    def allow_put_events(self, bus: events.IEventBus) -> None:
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="PutAgentObservations",
                actions=["events:PutEvents"],
                resources=[bus.event_bus_arn],
                conditions={"StringEquals": {"events:source": c.AGENT_SOURCE}},
            )
        )


def pod_identity_conditions(
    cluster_arn: str, namespace: str, service_account: str
) -> dict[str, Any]:
    """The session tags EKS Pod Identity sets, pinned to one cluster, namespace and account."""
    return {
        "StringEquals": {
            "aws:RequestTag/eks-cluster-arn": cluster_arn,
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        }
    }


class EksAccess(Construct):
    """Access entries binding the functions' roles to the `muster-controlplane` group,
    and the Pod Identity association that hands the agent its role.

    The group's RBAC (what it may do to workloads and pods) ships with the
    Kubernetes manifests; the cluster must use the `API` or
    `API_AND_CONFIG_MAP` authentication mode for access entries.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        function_roles: dict[str, iam.IRole],
        agent_role: iam.IRole,
        agent_namespace: str,
        agent_service_account: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_entries = {
            name: eks.CfnAccessEntry(
                self,
                f"{name.capitalize()}AccessEntry",
                cluster_name=cluster_name,
                principal_arn=role.role_arn,
                kubernetes_groups=[c.KUBERNETES_GROUP],
                type="STANDARD",
            )
            for name, role in function_roles.items()
        }
        self.agent_association = eks.CfnPodIdentityAssociation(
            self,
            "AgentPodIdentity",
            cluster_name=cluster_name,
            namespace=agent_namespace,
            service_account=agent_service_account,
            role_arn=agent_role.role_arn,
        )


def state_machine_role(
    scope: Construct, construct_id: str, state_machine_name: str, description: str
) -> tuple[iam.Role, str]:
    """A role Step Functions may assume for the state machine named so, and no other
    of the account (CDK's default trusts `stateMachine:*`); with that machine's ARN."""
    stack = Stack.of(scope)
    own_arn = stack.format_arn(
        service="states",
        resource="stateMachine",
        resource_name=state_machine_name,
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    role = iam.Role(
        scope,
        construct_id,
        assumed_by=iam.PrincipalWithConditions(
            iam.ServicePrincipal("states.amazonaws.com"),
            {
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnEquals": {"aws:SourceArn": own_arn},
            },
        ),
        description=description,
    )
    return role, own_arn
