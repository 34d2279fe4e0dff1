"""The optional VPC placement of the functions, and the agent's image repository."""

from __future__ import annotations

from typing import Any

import pytest

from infra import constants as c
from infra.config import ConfigError, load_config
from infra.images import repository_name
from tests.infra.test_variants import synth

VPC = "vpc-0123456789abcdef0"
# botocore's setting for each service's endpoint (AWS_ENDPOINT_URL_ + its service id).
ENDPOINT_VARIABLES = {
    "sqs": "AWS_ENDPOINT_URL_SQS",
    "events": "AWS_ENDPOINT_URL_EVENTBRIDGE",
    "states": "AWS_ENDPOINT_URL_SFN",
    "eks": "AWS_ENDPOINT_URL_EKS",
}
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0fedcba987654321f"]


def test_without_a_vpc_no_function_is_in_one_and_no_endpoint_is_made(template: Any) -> None:
    for function in template.find_resources("AWS::Lambda::Function").values():
        assert "VpcConfig" not in function["Properties"]
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        assert not [v for v in variables if v.startswith("AWS_ENDPOINT_URL")]
    template.resource_count_is("AWS::EC2::VPCEndpoint", 0)
    template.resource_count_is("AWS::EC2::SecurityGroup", 0)


@pytest.mark.slow
def test_with_a_vpc_every_function_runs_in_its_subnets_with_private_endpoints(
    tmp_path: Any,
) -> None:
    # GIVEN the cluster's VPC, private subnets and route table
    template = synth(
        tmp_path,
        **{
            c.CTX_VPC_ID: VPC,
            c.CTX_SUBNET_IDS: ",".join(SUBNETS),  # as `-c` passes it
            c.CTX_ROUTE_TABLE_IDS: ["rtb-0123456789abcdef0"],
        },
    )
    # THEN every function (the sweeper too) runs in those subnets with the new group
    functions = template.find_resources("AWS::Lambda::Function")
    ours = [f for f in functions.values() if f["Properties"].get("Handler") == c.HANDLER]
    assert len(ours) == 4
    groups = template.find_resources("AWS::EC2::SecurityGroup")
    (functions_group,) = [k for k in groups if "FunctionsSecurityGroup" in k]
    for function in ours:
        config = function["Properties"]["VpcConfig"]
        assert config["SubnetIds"] == SUBNETS
        assert config["SecurityGroupIds"] == [{"Fn::GetAtt": [functions_group, "GroupId"]}]
    # AND it may only speak HTTPS out
    egress = groups[functions_group]["Properties"]["SecurityGroupEgress"]
    assert [(e["IpProtocol"], e["FromPort"], e["ToPort"]) for e in egress] == [("tcp", 443, 443)]
    # AND each service the functions call has a private endpoint in those subnets
    endpoints = template.find_resources("AWS::EC2::VPCEndpoint")
    interface = [
        e["Properties"]
        for e in endpoints.values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    ]
    services = sorted(
        next(n for n in ("sqs", "events", "states", "eks") if f".{n}" in str(e["ServiceName"]))
        for e in interface
    )
    assert services == ["eks", "events", "sqs", "states"]
    for e in interface:
        assert e["SubnetIds"] == SUBNETS
    # AND none answers for its service's public name in the whole VPC, so the agent
    # (PutEvents) and the cluster's other clients keep reaching AWS as before ...
    assert all(e["PrivateDnsEnabled"] is False for e in interface)
    # ... and each admits HTTPS from the functions' group alone
    (endpoint_group,) = [k for k in groups if "EndpointsSecurityGroup" in k]
    ingress = [
        r["Properties"]
        for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [endpoint_group, "GroupId"]}
    ] + groups[endpoint_group]["Properties"].get("SecurityGroupIngress", [])
    assert [(i["FromPort"], i["SourceSecurityGroupId"]) for i in ingress] == [
        (443, {"Fn::GetAtt": [functions_group, "GroupId"]})
    ]
    # AND every function calls each service by its endpoint's own DNS name
    endpoint_of = {
        next(
            n
            for n in ("sqs", "events", "states", "eks")
            if f".{n}" in str(e["Properties"]["ServiceName"])
        ): k
        for k, e in endpoints.items()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    }
    for function in ours:
        variables = function["Properties"]["Environment"]["Variables"]
        for service, variable in ENDPOINT_VARIABLES.items():
            assert variables[variable] == {
                "Fn::Join": [
                    "",
                    [
                        "https://",
                        {
                            "Fn::Select": [
                                1,
                                {
                                    "Fn::Split": [
                                        ":",
                                        {
                                            "Fn::Select": [
                                                0,
                                                {
                                                    "Fn::GetAtt": [
                                                        endpoint_of[service],
                                                        "DnsEntries",
                                                    ]
                                                },
                                            ]
                                        },
                                    ]
                                },
                            ]
                        },
                    ],
                ]
            }, (service, variables[variable])
        # (the EKS token stays a presigned URL of STS's public name)
        assert not {v for v in variables if v.startswith("AWS_ENDPOINT_URL")} - set(
            ENDPOINT_VARIABLES.values()
        )
    (gateway,) = [
        e["Properties"]
        for e in endpoints.values()
        if e["Properties"].get("VpcEndpointType") == "Gateway"
    ]
    assert "dynamodb" in str(gateway["ServiceName"])
    assert gateway["RouteTableIds"] == ["rtb-0123456789abcdef0"]
    # AND the group is an output, to allow on the cluster's API endpoint
    assert c.OUT_FUNCTIONS_SECURITY_GROUP_ID in template.find_outputs("*")


@pytest.mark.slow
def test_given_security_groups_and_no_endpoints(tmp_path: Any) -> None:
    template = synth(
        tmp_path,
        **{
            c.CTX_VPC_ID: VPC,
            c.CTX_SUBNET_IDS: SUBNETS,
            c.CTX_SECURITY_GROUP_IDS: ["sg-0123456789abcdef0"],
            c.CTX_VPC_ENDPOINTS: "false",
        },
    )
    template.resource_count_is("AWS::EC2::VPCEndpoint", 0)
    template.resource_count_is("AWS::EC2::SecurityGroup", 0)
    for function in template.find_resources("AWS::Lambda::Function").values():
        if function["Properties"].get("Handler") == c.HANDLER:
            assert function["Properties"]["VpcConfig"]["SecurityGroupIds"] == [
                "sg-0123456789abcdef0"
            ]
    assert c.OUT_FUNCTIONS_SECURITY_GROUP_ID not in template.find_outputs("*")


def context(**values: Any) -> Any:
    base = {c.CTX_CLUSTER_NAME: "training"}
    return (base | values).get


def test_every_vpc_mistake_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            context(
                **{
                    c.CTX_VPC_ID: "vpc-nope",
                    c.CTX_SECURITY_GROUP_IDS: ["sg-0123456789abcdef0", "default"],
                    c.CTX_VPC_ENDPOINTS: "maybe",
                }
            )
        )
    message = str(caught.value)
    assert f"{c.CTX_VPC_ID}: 'vpc-nope' is not a VPC id" in message
    assert f"{c.CTX_SECURITY_GROUP_IDS}[1]: 'default' is not a sg-... id" in message
    assert f"{c.CTX_VPC_ENDPOINTS}: expected true or false" in message
    assert f"{c.CTX_SUBNET_IDS}: required with {c.CTX_VPC_ID}" in message


def test_subnets_without_a_vpc_are_refused() -> None:
    with pytest.raises(ConfigError, match=f"{c.CTX_SUBNET_IDS}: given without {c.CTX_VPC_ID}"):
        load_config(context(**{c.CTX_SUBNET_IDS: SUBNETS}))


def test_no_vpc_by_default() -> None:
    assert load_config(context()).network is None


def test_the_agent_image_repository_is_the_stacks_and_scanned(template: Any) -> None:
    (repository,) = template.find_resources("AWS::ECR::Repository").values()
    assert repository["Properties"]["RepositoryName"] == "muster-agent"
    assert repository["Properties"]["ImageScanningConfiguration"] == {"ScanOnPush": True}
    # the Deployment pins the agent by its version's tag: a tag never moves
    assert repository["Properties"]["ImageTagMutability"] == "IMMUTABLE"
    assert repository["DeletionPolicy"] == "Retain"
    assert "LifecyclePolicy" in repository["Properties"]
    outputs = template.find_outputs("*")
    for key in (
        c.OUT_AGENT_IMAGE_REPOSITORY_URI,
        c.OUT_CLUSTER_NAME,
        c.OUT_AGENT_NAMESPACE,
        c.OUT_AGENT_SERVICE_ACCOUNT,
    ):
        assert key in outputs


@pytest.mark.parametrize(
    ("stack", "name"), [("Muster", "muster-agent"), ("Muster--Gpu-", "muster-gpu-agent")]
)
def test_repository_names_are_valid_for_ecr(stack: str, name: str) -> None:
    assert repository_name(stack) == name
