"""The agent's IAM role and the control plane's access to the EKS cluster."""

from __future__ import annotations

from aws_cdk import aws_eks as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import constants as c


class AgentRole(Construct):
    """The in-cluster agent's role (EKS Pod Identity): it may only put events on the bus."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(c.POD_IDENTITY_PRINCIPAL),
            description="Muster agent (EKS Pod Identity): PutEvents on the Muster bus only",
        )
        # Pod Identity assumes the role with session tags.
        self.role.assume_role_policy.add_statements(  # type: ignore[union-attr]
            iam.PolicyStatement(
                actions=["sts:TagSession"],
                principals=[iam.ServicePrincipal(c.POD_IDENTITY_PRINCIPAL)],
            )
        )

    def allow_put_events(self, bus: events.IEventBus) -> None:
        bus.grant_put_events_to(self.role)


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
