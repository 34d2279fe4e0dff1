"""`muster agent` refuses bad input with a message naming the setting."""

from __future__ import annotations

import pytest
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
