"""A moto server on localhost that really runs Step Functions executions.

moto cannot run Lambda code without Docker; everything else the control plane
uses (SQS, DynamoDB, EventBridge rules to SQS, Step Functions waits and SQS tasks,
CloudFormation) it serves over real HTTP, so the handlers make real API calls.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3

REGION = "us-east-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class PortInUse(RuntimeError):
    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"port {port} on {host} is already in use; stop whatever listens there "
            f"or choose another port with --port"
        )


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Endpoint:
    """Where the local AWS APIs answer, and how to reach them with boto3."""

    url: str
    region: str = REGION

    def client(self, service: str) -> Any:
        session = boto3.session.Session(
            aws_access_key_id=CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=CREDENTIALS["aws_secret_access_key"],
            region_name=self.region,
        )
        return session.client(service, endpoint_url=self.url)  # type: ignore[call-overload]

    def environment(self) -> dict[str, str]:
        """Variables that point boto3 (in handlers, the agent, the CLI) at this endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        }


def _enable_state_machine_execution() -> None:
    """Execute state machines, including those created by CloudFormation."""
    from moto.core.config import default_user_config
    from moto.stepfunctions import models
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    default_user_config["stepfunctions"] = {"execute_state_machine": True}
    models.stepfunctions_backends = stepfunctions_parser_backends  # type: ignore[assignment]


@contextmanager
def moto_server(host: str = "127.0.0.1", port: int | None = None) -> Iterator[Endpoint]:
    """Serve moto on `host:port` (a free port if None) for the duration of the block."""
    from moto.server import ThreadedMotoServer

    port = port if port is not None else free_port(host)
    if not port_is_free(host, port):
        raise PortInUse(host, port)
    previous = os.environ.get("MOTO_PORT")
    os.environ["MOTO_PORT"] = str(port)  # Step Functions tasks call back here
    _enable_state_machine_execution()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    # moto says, once per resource, that it skips policies and alarms (docs/local.md says so once).
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    endpoint = Endpoint(f"http://{host}:{port}")
    try:
        _wait_until_serving(host, port)
        _reset(endpoint)  # moto's state is per process: start from nothing
        yield endpoint
    finally:
        _reset(endpoint)
        server.stop()
        if previous is None:
            os.environ.pop("MOTO_PORT", None)
        else:
            os.environ["MOTO_PORT"] = previous


def _reset(endpoint: Endpoint) -> None:
    request = urllib.request.Request(f"{endpoint.url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def _wait_until_serving(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the local AWS endpoint on {host}:{port} did not start")
