"""The EKS token and endpoint discovery, checked against aws-iam-authenticator's format.

aws-iam-authenticator documents the token as `k8s-aws-v1.` + base64url (no padding)
of a presigned `sts:GetCallerIdentity` URL (`Action=GetCallerIdentity`,
`Version=2011-06-15`, SigV4 query signing) whose signed headers include
`x-k8s-aws-id` (the cluster name), with `X-Amz-Expires=60`; the server accepts it
for 15 minutes from `X-Amz-Date`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from moto import mock_aws
from muster.kube import adapter
from muster.kube.auth import TOKEN_PREFIX, TokenCache, describe_cluster, eks_token

REGION = "eu-west-1"


@pytest.fixture()
def aws() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(
            aws_access_key_id="AKIAEXAMPLE",
            aws_secret_access_key="secret",
            aws_session_token="session-token",
            region_name=REGION,
        )


def decode(token: str) -> Any:
    assert token.startswith(TOKEN_PREFIX)
    body = token[len(TOKEN_PREFIX) :]
    assert "=" not in body and "+" not in body and "/" not in body  # base64url, unpadded
    return urlsplit(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode())


def test_token_is_a_presigned_get_caller_identity_url_for_the_cluster(aws: boto3.Session) -> None:
    url = decode(eks_token(aws, "training", REGION))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert (url.scheme, url.netloc, url.path) == ("https", f"sts.{REGION}.amazonaws.com", "/")
    assert query["Action"] == "GetCallerIdentity"
    assert query["Version"] == "2011-06-15"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "60"
    assert set(query["X-Amz-SignedHeaders"].split(";")) == {"host", "x-k8s-aws-id"}
    assert re.fullmatch(
        rf"AKIAEXAMPLE/\d{{8}}/{REGION}/sts/aws4_request", query["X-Amz-Credential"]
    )
    assert re.fullmatch(r"\d{8}T\d{6}Z", query["X-Amz-Date"])
    assert re.fullmatch(r"[0-9a-f]{64}", query["X-Amz-Signature"])
    assert query["X-Amz-Security-Token"] == "session-token"


def test_the_signature_covers_the_cluster_name(aws: boto3.Session) -> None:
    one = parse_qs(decode(eks_token(aws, "one", REGION)).query)["X-Amz-Signature"]
    two = parse_qs(decode(eks_token(aws, "two", REGION)).query)["X-Amz-Signature"]
    assert one != two


def test_token_is_reused_for_its_life_then_renewed() -> None:
    now = [1000.0]
    minted: list[str] = []

    def mint() -> str:
        minted.append(f"t{len(minted)}")
        return minted[-1]

    cache = TokenCache(mint, clock=lambda: now[0])
    assert cache.token() == "t0"
    now[0] += 13 * 60
    assert cache.token() == "t0"
    now[0] += 61
    assert cache.token() == "t1"


def test_endpoint_and_ca_come_from_describe_cluster(aws: boto3.Session) -> None:
    eks = aws.client("eks")
    iam = aws.client("iam")
    role = iam.create_role(RoleName="eks", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_cluster(name="training", roleArn=role, resourcesVpcConfig={})
    described = eks.describe_cluster(name="training")["cluster"]
    found = describe_cluster(eks, "training")
    assert found.endpoint == described["endpoint"]
    assert found.ca_file is not None
    with open(found.ca_file, "rb") as f:
        assert f.read() == base64.b64decode(described["certificateAuthority"]["data"])


def no_record(key: str) -> None:
    return None


def test_for_cluster_authenticates_with_a_fresh_bearer_token(aws: boto3.Session) -> None:
    eks = aws.client("eks")
    role = aws.client("iam").create_role(RoleName="eks", AssumeRolePolicyDocument="{}")["Role"][
        "Arn"
    ]
    eks.create_cluster(name="auth-test", roleArn=role, resourcesVpcConfig={})
    actions = adapter.for_cluster("auth-test", records=no_record, region=REGION, session=aws)
    header = actions.api.authorization()
    assert header is not None and header.startswith("Bearer " + TOKEN_PREFIX)
    described = eks.describe_cluster(name="auth-test")["cluster"]
    assert actions.api.host == described["endpoint"].rstrip("/")
    # TLS is verified against the cluster's own CA, from DescribeCluster
    assert actions.api.ca_file is not None
    with open(actions.api.ca_file, "rb") as f:
        assert f.read() == base64.b64decode(described["certificateAuthority"]["data"])
    assert actions.api.pool.connection_pool_kw["cert_reqs"] == "CERT_REQUIRED"
    assert actions.api.pool.connection_pool_kw["ca_certs"] == actions.api.ca_file
    # cached per cluster for the process (a warm Lambda reuses it)
    assert (
        adapter.for_cluster("auth-test", records=no_record, region=REGION, session=aws) is actions
    )


def test_from_environment_names_the_missing_setting() -> None:
    with pytest.raises(ValueError, match="MUSTER_CLUSTER_NAME"):
        adapter.from_environment({}, records=no_record)


def test_from_environment_can_point_at_an_api_server_directly() -> None:
    actions = adapter.from_environment(
        {"MUSTER_KUBE_HOST": "http://127.0.0.1:8001/"}, records=no_record
    )
    assert actions.api.host == "http://127.0.0.1:8001"
