"""Deploy a synthesized Muster stack into an AWS API emulator (moto).

The same template that `cdk deploy` sends to AWS, with the two steps
`cdk bootstrap` and the CDK CLI's asset publishing would otherwise do: the
bootstrap version parameter, and the asset zips in the bootstrap bucket.
Everything goes through a boto3 session (and an optional endpoint URL), so the
caller chooses in-process `mock_aws` or a moto server.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_VERSION_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
BOOTSTRAP_VERSION = "30"


class LocalDeployError(RuntimeError):
    """The stack did not reach CREATE_COMPLETE (the message carries the failed events)."""


@dataclass(frozen=True)
class DeployedStack:
    name: str
    outputs: Mapping[str, str]
    resources: Mapping[str, str]  # logical id -> physical id


def deploy_assembly(
    assembly_dir: Path,
    stack_name: str,
    *,
    session: boto3.Session,
    endpoint_url: str | None = None,
    deployed_name: str | None = None,
) -> DeployedStack:
    """Bootstrap, publish the assets of `<stack_name>` and create the stack."""
    region = session.region_name or "us-east-1"
    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    ssm = session.client("ssm", endpoint_url=endpoint_url)
    s3 = session.client("s3", endpoint_url=endpoint_url)
    account = session.client("sts", endpoint_url=endpoint_url).get_caller_identity()["Account"]

    ssm.put_parameter(
        Name=BOOTSTRAP_VERSION_PARAMETER, Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True
    )
    publish_assets(assembly_dir / f"{stack_name}.assets.json", s3, account=account, region=region)

    template = (assembly_dir / f"{stack_name}.template.json").read_text()
    name = deployed_name or stack_name
    cfn.create_stack(
        StackName=name,
        TemplateBody=template,
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        cfn.get_waiter("stack_create_complete").wait(
            StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        )
        stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        events = cfn.describe_stack_events(StackName=name)["StackEvents"]
        failed = [
            f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason', '')}"
            for e in events
            if e["ResourceStatus"].endswith("FAILED")
        ]
        raise LocalDeployError(f"{name}: {stack['StackStatus']}; " + "; ".join(failed))
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    resources = {
        r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
        for r in cfn.describe_stack_resources(StackName=name)["StackResources"]
        if "LogicalResourceId" in r
    }
    return DeployedStack(name=name, outputs=outputs, resources=resources)


def publish_assets(assets_file: Path, s3: Any, *, account: str, region: str) -> list[str]:
    """Upload every file asset (zipping folders) to the bootstrap bucket; returns the keys."""
    manifest = json.loads(assets_file.read_text())
    base = assets_file.parent
    keys: list[str] = []
    for asset in manifest.get("files", {}).values():
        source = base / asset["source"]["path"]
        body = (
            _zip_dir(source) if asset["source"].get("packaging") == "zip" else source.read_bytes()
        )
        for destination in asset["destinations"].values():
            bucket = _substitute(destination["bucketName"], account, region)
            _ensure_bucket(s3, bucket, region)
            s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=body)
            keys.append(destination["objectKey"])
    return keys


def _substitute(text: str, account: str, region: str) -> str:
    return (
        text.replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
        .replace("${AWS::Partition}", "aws")
    )


def _ensure_bucket(s3: Any, bucket: str, region: str) -> None:
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket in existing:
        return
    if region == "us-east-1":
        s3.create_bucket(Bucket=bucket)
    else:
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})


def _zip_dir(folder: Path) -> bytes:
    """A deterministic zip of a folder (stored, not deflated: the emulator never unpacks it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                path = Path(root) / name
                archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()
