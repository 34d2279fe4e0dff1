"""Optional: the functions in the cluster's VPC, with private endpoints for what they call.

Off by default (the functions reach AWS and a public EKS endpoint over the
internet). With `muster:vpcId` and `muster:subnetIds`, every function runs in
those subnets, so it can reach a private EKS API endpoint; interface endpoints
for the services the functions call (SQS, EventBridge, Step Functions, EKS's
DescribeCluster) and, given the subnets' route tables, a gateway endpoint for
DynamoDB let them work without a NAT gateway.

The interface endpoints have private DNS off and admit only the functions: private
DNS would answer for `events.<region>.amazonaws.com` (and sqs, states, eks) in the
whole VPC, so the agent's PutEvents and every other client of the cluster would be
sent to endpoints that refuse them. The functions instead call each endpoint by
its own name (`vpce-....<service>.<region>.vpce.amazonaws.com`), given to botocore
as `AWS_ENDPOINT_URL_<SERVICE>` in their environment; nothing else in the VPC
changes. STS is not among them: the EKS token is a presigned STS URL that the EKS
API server checks itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_cdk import Acknowledgment, Fn, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from infra import constants as c

# What the functions call, as interface endpoints (X-Ray segments and the logs of a
# function go through the Lambda service, not the function's network), and the
# environment variable that points botocore's client for it at the endpoint
# (`AWS_ENDPOINT_URL_` and the service's id: SQS, EventBridge, SFN, EKS).
INTERFACE_SERVICES: dict[str, tuple[ec2.InterfaceVpcEndpointAwsService, str]] = {
    "Sqs": (ec2.InterfaceVpcEndpointAwsService.SQS, "AWS_ENDPOINT_URL_SQS"),
    "Events": (ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE, "AWS_ENDPOINT_URL_EVENTBRIDGE"),
    "StepFunctions": (ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS, "AWS_ENDPOINT_URL_SFN"),
    "Eks": (ec2.InterfaceVpcEndpointAwsService.EKS, "AWS_ENDPOINT_URL_EKS"),
}


class NetworkConfigError(ValueError):
    """A bad VPC context value; the message names the key."""


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    vpc_id: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...] = ()
    route_table_ids: tuple[str, ...] = ()
    endpoints: bool = True


def load_network(get: Callable[[str], Any]) -> NetworkConfig | None:
    """The VPC settings from context, or None when the functions stay outside a VPC.

    Every mistake is reported at once, each naming its key."""
    errors: list[str] = []
    vpc_id = get(c.CTX_VPC_ID)
    subnets = _ids(get, c.CTX_SUBNET_IDS, "subnet", errors)
    groups = _ids(get, c.CTX_SECURITY_GROUP_IDS, "sg", errors)
    tables = _ids(get, c.CTX_ROUTE_TABLE_IDS, "rtb", errors)
    endpoints = get(c.CTX_VPC_ENDPOINTS)
    if endpoints is None:
        endpoints = True
    elif isinstance(endpoints, str) and endpoints.strip().lower() in ("true", "false"):
        endpoints = endpoints.strip().lower() == "true"
    elif not isinstance(endpoints, bool):
        errors.append(f"{c.CTX_VPC_ENDPOINTS}: expected true or false, got {endpoints!r}")
    if vpc_id in (None, ""):
        for key, given in (
            (c.CTX_SUBNET_IDS, subnets),
            (c.CTX_SECURITY_GROUP_IDS, groups),
            (c.CTX_ROUTE_TABLE_IDS, tables),
        ):
            if given:
                errors.append(f"{key}: given without {c.CTX_VPC_ID}")
        if errors:
            raise NetworkConfigError("; ".join(errors))
        return None
    if not isinstance(vpc_id, str) or not re.fullmatch(r"vpc-[0-9a-f]{8,17}", vpc_id.strip()):
        errors.append(f"{c.CTX_VPC_ID}: {vpc_id!r} is not a VPC id (vpc-...)")
    if not subnets:
        errors.append(
            f"{c.CTX_SUBNET_IDS}: required with {c.CTX_VPC_ID}: the private subnets the "
            "functions run in (two or more Availability Zones)"
        )
    if errors:
        raise NetworkConfigError("; ".join(errors))
    return NetworkConfig(
        vpc_id=str(vpc_id).strip(),
        subnet_ids=subnets,
        security_group_ids=groups,
        route_table_ids=tables,
        endpoints=bool(endpoints),
    )


def _ids(get: Callable[[str], Any], key: str, prefix: str, errors: list[str]) -> tuple[str, ...]:
    """A list of AWS ids, as a JSON list in cdk.json or a comma-separated `-c` value."""
    value = get(key)
    if value in (None, "", []):
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        errors.append(f"{key}: expected a list of {prefix}-... ids, got {value!r}")
        return ()
    ids: list[str] = []
    for n, item in enumerate(items):
        text = item.strip() if isinstance(item, str) else item
        if not isinstance(text, str) or not re.fullmatch(rf"{prefix}-[0-9a-f]{{8,17}}", text):
            errors.append(f"{key}[{n}]: {item!r} is not a {prefix}-... id")
        else:
            ids.append(text)
    return tuple(ids)


class FunctionNetwork(Construct):
    """The subnets and security groups the functions run with, and the endpoints
    they reach AWS through."""

    def __init__(self, scope: Construct, construct_id: str, *, config: NetworkConfig) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=config.vpc_id,
            availability_zones=[Fn.select(0, Fn.get_azs())],
        )
        self.subnets = ec2.SubnetSelection(
            subnets=[
                ec2.Subnet.from_subnet_id(self, f"Subnet{n}", subnet_id)
                for n, subnet_id in enumerate(config.subnet_ids)
            ]
        )
        self.created_security_group: ec2.SecurityGroup | None = None
        groups: list[ec2.ISecurityGroup] = [
            ec2.SecurityGroup.from_security_group_id(self, f"Given{n}", group_id)
            for n, group_id in enumerate(config.security_group_ids)
        ]
        if not groups:
            group = ec2.SecurityGroup(
                self,
                "FunctionsSecurityGroup",
                vpc=self.vpc,
                description="Muster functions: HTTPS out to AWS APIs and the EKS API server",
                allow_all_outbound=False,
            )
            group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS")
            self.created_security_group = group
            groups = [group]
        self.security_groups = groups
        # botocore's endpoint for each service, where the stack made one.
        self.endpoint_environment: dict[str, str] = {}
        if config.endpoints:
            self._endpoints(config)

    def _endpoints(self, config: NetworkConfig) -> None:
        endpoint_group = ec2.SecurityGroup(
            self,
            "EndpointsSecurityGroup",
            vpc=self.vpc,
            description="Muster's interface endpoints: HTTPS from the functions",
            allow_all_outbound=False,
        )
        for group in self.security_groups:
            endpoint_group.add_ingress_rule(group, ec2.Port.tcp(443), "HTTPS from the functions")
        for name, (service, variable) in INTERFACE_SERVICES.items():
            endpoint = ec2.InterfaceVpcEndpoint(
                self,
                f"{name}Endpoint",
                vpc=self.vpc,
                service=service,
                subnets=self.subnets,
                security_groups=[endpoint_group],
                private_dns_enabled=False,
                open=False,
            )
            # DnsEntries: "<hosted zone>:<name>", the regional name first.
            regional = Fn.select(0, endpoint.vpc_endpoint_dns_entries)
            self.endpoint_environment[variable] = "https://" + Fn.select(1, Fn.split(":", regional))
        if config.route_table_ids:
            ec2.CfnVPCEndpoint(
                self,
                "DynamoDbEndpoint",
                vpc_id=config.vpc_id,
                service_name=f"com.amazonaws.{Stack.of(self).region}.dynamodb",
                vpc_endpoint_type="Gateway",
                route_table_ids=list(config.route_table_ids),
            )


def acknowledge_vpc_findings(functions: Construct) -> None:
    Validations.of(functions).acknowledge(
        Acknowledgment(
            id="AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]",
            reason=(
                "A function in a VPC needs to create and delete its network interfaces; "
                "AWS's managed AWSLambdaVPCAccessExecutionRole is the policy Lambda "
                "documents for that, and is added only when muster:vpcId is set."
            ),
        )
    )
