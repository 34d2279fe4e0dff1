"""EKS authentication the way EKS expects it, without kubeconfig or the AWS CLI.

The bearer token is `k8s-aws-v1.` followed by the unpadded base64url encoding of a
presigned STS GetCallerIdentity URL whose signature covers the `x-k8s-aws-id`
header (the cluster name), with `X-Amz-Expires=60`; this is the format that
aws-iam-authenticator documents and that `aws eks get-token` produces. EKS accepts
such a token for 15 minutes from its signing time, so it is reused for 14.
The API endpoint and CA come from `eks:DescribeCluster`.
"""

from __future__ import annotations

import base64
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import boto3
from botocore.signers import RequestSigner

from muster.botocore_config import BOTOCORE_RETRIES

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES_SECONDS = 60
TOKEN_LIFETIME_SECONDS = 15 * 60
REFRESH_MARGIN_SECONDS = 60


def eks_token(session: boto3.Session, cluster: str, region: str) -> str:
    """A fresh EKS bearer token for `cluster`, signed with the session's credentials."""
    sts = session.client("sts", region_name=region, config=BOTOCORE_RETRIES)
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError("no AWS credentials found for the EKS token (standard chain)")
    signer = RequestSigner(
        sts.meta.service_model.service_id,
        region,
        "sts",
        "v4",
        credentials,
        sts.meta.events,
    )
    request = {
        "method": "GET",
        # The regional STS endpoint of the session's partition (sts.<region>.amazonaws.com).
        "url": f"{sts.meta.endpoint_url}/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {CLUSTER_ID_HEADER: cluster},
        "context": {},
    }
    url = signer.generate_presigned_url(
        request, region_name=region, expires_in=PRESIGN_EXPIRES_SECONDS, operation_name=""
    )
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


class TokenCache:
    """Reuses one token for its life (less a margin); thread-safe."""

    def __init__(
        self,
        mint: Callable[[], str],
        *,
        clock: Callable[[], float] = time.time,
        lifetime: float = TOKEN_LIFETIME_SECONDS - REFRESH_MARGIN_SECONDS,
    ) -> None:
        self._mint = mint
        self._clock = clock
        self._lifetime = lifetime
        self._token: str | None = None
        self._minted_at = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            now = self._clock()
            if self._token is None or now - self._minted_at >= self._lifetime:
                self._token = self._mint()
                self._minted_at = now
            return self._token


@dataclass(frozen=True, slots=True)
class ClusterEndpoint:
    """Where an EKS cluster's API server is and how to trust it."""

    name: str
    endpoint: str
    ca_file: str | None  # PEM file for TLS verification


def describe_cluster(eks_client: EKSClient, name: str) -> ClusterEndpoint:
    """The API endpoint and CA of an EKS cluster; the CA goes to a temp file for urllib3."""
    cluster = eks_client.describe_cluster(name=name)["cluster"]
    endpoint = cluster.get("endpoint")
    if not endpoint:
        raise RuntimeError(
            f"EKS cluster {name} has no API endpoint yet (status {cluster.get('status')})"
        )
    ca_data = (cluster.get("certificateAuthority") or {}).get("data")
    ca_file = None
    if ca_data:
        with tempfile.NamedTemporaryFile(
            "wb", prefix=f"eks-{name}-", suffix=".pem", delete=False
        ) as f:
            f.write(base64.b64decode(ca_data))
            ca_file = f.name
    return ClusterEndpoint(name=name, endpoint=endpoint, ca_file=ca_file)
