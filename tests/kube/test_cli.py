"""`muster agent`: bad input refused with a message naming the setting; its credentials."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from muster.agent.kubeconfig import agent_api
from muster.cli import main


def test_agent_requires_the_cluster_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MUSTER_CLUSTER_NAME", raising=False)
    assert main(["agent"]) == 2
    assert "--cluster (or MUSTER_CLUSTER_NAME) is required" in capsys.readouterr().err


def test_agent_rejects_a_malformed_window(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--cluster", "prod", "--coalesce", "soon"]) == 2
    assert "soon" in capsys.readouterr().err


def test_agent_is_a_registered_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agent", "--help"])
    assert "--event-bus" in capsys.readouterr().out


def _kubeconfig(path: Path, server: str, ca: bytes) -> str:
    cluster = {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "agent-t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_the_agent_loads_its_credentials_with_the_official_client(
    apiserver: Any, tmp_path: Path
) -> None:
    # GIVEN a kubeconfig naming an API server and a bearer token
    pytest.importorskip("kubernetes")
    apiserver.handler.resources["v1/pods"] = {"kind": "Pod", "namespaced": True}
    # WHEN the agent builds its client from it
    api = agent_api(_kubeconfig(tmp_path / "config", apiserver.url, CA))
    # THEN its requests go to that server with that token
    assert api.host == apiserver.url
    assert api.authorization() == "Bearer agent-t0ken"
    assert api.list("/api/v1/namespaces/ml/pods").get("items") == []


def test_the_agent_trusts_the_ca_its_kubeconfig_names(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    api = agent_api(_kubeconfig(tmp_path / "config", "https://127.0.0.1:6443", CA))
    assert api.ca_file is not None and Path(api.ca_file).read_bytes() == CA
    assert api.pool.connection_pool_kw["ca_certs"] == api.ca_file
    assert api.pool.connection_pool_kw["cert_reqs"] == "CERT_REQUIRED"
