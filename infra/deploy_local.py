"""Deploy a synthesized Muster stack into an AWS API emulator (moto).

The same template that `cdk deploy` sends to AWS, with the two steps
`cdk bootstrap` and the CDK CLI's asset publishing would otherwise do: the
bootstrap version parameter, and the asset zips in the bootstrap bucket.
Everything goes through a boto3 session (and an optional endpoint URL), so the
caller chooses in-process `mock_aws` or a moto server.

moto is a stand-in for AWS here: it does not run the Lambda code (that needs
Docker), and it skips queue policies, the bus policy and alarms. Its Step
Functions executes state machines only when configured to, and only those
created in its executing backend; `start_local_aws` arranges both, which is why
it runs the server in this process.

    python -m infra.deploy_local --serve 5000      # moto server + the stack, until Ctrl-C or SIGTERM
    python -m infra.deploy_local --endpoint-url http://127.0.0.1:5000
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_VERSION_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
BOOTSTRAP_VERSION = "30"
# How long a stopping server may take to shut its moto server down before the
# process exits without it (its threads are daemons: they do not hold the exit).
SHUTDOWN_SECONDS = 5.0


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
    # Whole-body uploads: no streamed checksum encoding of a 100 MB layer zip.
    s3 = session.client(
        "s3",
        endpoint_url=endpoint_url,
        config=Config(request_checksum_calculation="when_required"),
    )
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


def use_executing_step_functions() -> None:
    """Make state machines that moto's CloudFormation creates executable (this process only)."""
    import moto.stepfunctions.models as sfn_models
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    sfn_models.stepfunctions_backends = stepfunctions_parser_backends  # type: ignore[assignment]


def quiet_moto() -> None:
    """No line per request, and not once per resource that moto skips policies and
    alarms (the module's docstring and `--serve` say so once)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)


def start_local_aws(port: int, host: str = "127.0.0.1", *, verbose: bool = False) -> Any:
    """A moto server in this process whose timers really run; returns it (call `.stop()`)."""
    from moto.server import ThreadedMotoServer

    if not verbose:
        quiet_moto()
    use_executing_step_functions()
    # Step Functions tasks call the server back on this port.
    os.environ["MOTO_PORT"] = str(port)
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    request = urllib.request.Request(
        f"http://{host}:{port}/moto-api/config",
        data=json.dumps({"stepfunctions": {"execute_state_machine": True}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
    return server


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM both stop this process, whatever it inherited: a process
    started by one that ignores SIGINT (a shell script's background job, a test
    runner started as one) ignores it too, and Python then installs no handler of
    its own, so Ctrl-C would never reach the serving loop."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)


def stop_server(server: Any, timeout: float = SHUTDOWN_SECONDS) -> bool:
    """Stop the moto server, waiting at most `timeout` seconds for it; False when it
    did not stop in time (a shutdown that waits on a request that never ends)."""
    stopper = threading.Thread(target=server.stop, name="moto-server-stop", daemon=True)
    stopper.start()
    stopper.join(timeout)
    return not stopper.is_alive()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.deploy_local",
        description="Deploy the synthesized Muster stack into moto.",
    )
    parser.add_argument(
        "--assembly", default="cdk.out", help="cloud assembly folder (cdk synth -o)"
    )
    parser.add_argument("--stack", default="Muster", help="stack name in the assembly")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint-url", help="a running moto server")
    target.add_argument("--serve", type=int, metavar="PORT", help="start a moto server here")
    parser.add_argument("--region", default=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    parser.add_argument(
        "--verbose", action="store_true", help="with --serve, also moto's log (a line per request)"
    )
    args = parser.parse_args(argv)

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    if args.serve:
        stop_on_signals()
    server = None
    endpoint = args.endpoint_url or f"http://127.0.0.1:{args.serve}"
    try:
        if args.serve:
            server = start_local_aws(args.serve, verbose=args.verbose)
        deployed = deploy_assembly(
            Path(args.assembly),
            args.stack,
            session=boto3.Session(region_name=args.region),
            endpoint_url=endpoint,
        )
        json.dump({"endpoint": endpoint, "outputs": dict(deployed.outputs)}, sys.stdout, indent=2)
        print(flush=True)  # a pipe's reader sees the outputs now, not when the server stops
        if server is not None:
            print(
                f"serving on {endpoint}; Ctrl-C stops (moto skips the queue and bus policies "
                "and the alarms; --verbose shows its log)",
                file=sys.stderr,
                flush=True,
            )
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None and not stop_server(server):
            print(
                f"the moto server did not stop within {SHUTDOWN_SECONDS:g} s; exiting without it",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    code = main()
    # The moto server's state lives in this process's memory alone; tearing it down
    # object by object at exit takes seconds (the assets' zips among it), after the
    # server has stopped. Nothing else is left to finish: flush and exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
