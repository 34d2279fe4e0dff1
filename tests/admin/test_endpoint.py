"""The commands against a local deployment, through its endpoint (as with `muster local`)."""

from __future__ import annotations

import json

import boto3
import pytest
from muster import contract
from muster.cli import main

from infra.deploy_local import deploy_assembly
from tests.infra.conftest import STACK, Synthesized

pytestmark = pytest.mark.slow


def test_the_commands_reach_a_local_stack_through_its_endpoint(
    synthesized: Synthesized,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("moto")
    from muster.local.moto_server import moto_server

    # The command points boto3 at the endpoint for the rest of the process: undo it after.
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "placeholder")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    with moto_server() as endpoint:
        # GIVEN the stack deployed into a local endpoint under the local mode's name
        session = boto3.Session(region_name=endpoint.region)
        deploy_assembly(
            synthesized.assembly_dir,
            STACK,
            session=session,
            endpoint_url=endpoint.url,
            deployed_name=contract.LOCAL_STACK_NAME,
        )

        # WHEN a setting is changed and the status read through the endpoint (default stack name)
        assert main(["settings", "set", "--endpoint", endpoint.url, "timeout=90s"]) == 0
        capsys.readouterr()
        assert main(["settings", "get", "--endpoint", endpoint.url, "--json"]) == 0
        settings = json.loads(capsys.readouterr().out)
        assert main(["status", "--endpoint", endpoint.url]) == 0
        status = capsys.readouterr().out

        # THEN the record was written in the local table, and the status is that cluster's
        assert settings["record"] == {"timeout": "90s"}
        assert settings["effective"]["timeout"] == "1m30s"
        assert "Cluster training" in status
        assert "No workloads" in status

        # AND a stack that is not there names the endpoint
        assert main(["status", "--endpoint", endpoint.url, "--stack", "Other"]) == 1
        assert f"no stack named Other at {endpoint.url}" in capsys.readouterr().err
