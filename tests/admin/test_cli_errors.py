"""Every command fails with a message and a documented exit code, never a traceback."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from muster import cli
from muster.agent.kubeconfig import KubeConfigMissing, kube_configuration
from muster.cli import main
from muster.cli import settings as settings_command
from muster.cli.local import hold_message, scaled_time_note
from muster.sim.scenario import load_builtin

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://k8s.example:6443"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
"""


def test_an_unexpected_error_is_a_message_and_exit_1_and_its_traceback_needs_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # GIVEN a command that fails in a way nobody planned for
    def broken(args: argparse.Namespace, out: object) -> int:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(settings_command, "validate_command", broken)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    # WHEN it runs
    assert main(["settings", "validate", str(tmp_path / "x.yaml")]) == cli.EXIT_FAILED
    # THEN one message names the command and the error, and there is no traceback
    err = capsys.readouterr().err
    assert "muster settings: unexpected error: RuntimeError: the disk is on fire" in err
    assert "Traceback" not in err and "--debug" in err
    # AND --debug (or MUSTER_DEBUG=1) shows the traceback
    assert main(["--debug", "settings", "validate", "x"]) == cli.EXIT_FAILED
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert main(["settings", "validate", "x"]) == cli.EXIT_FAILED
    assert "Traceback" in capsys.readouterr().err


def test_the_exit_codes_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out and "130  interrupted" in out and "2    bad input" in out


@pytest.mark.parametrize("port", ["80000", "0", "http"])
def test_local_with_an_impossible_port_is_a_usage_error(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["local", "--port", port])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--port" in err and "is not a port number" in err and "Traceback" not in err


def test_the_agent_finds_the_kubeconfig_as_kubectl_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.write_text(KUBECONFIG)
    # KUBECONFIG first
    assert kube_configuration(None, {"KUBECONFIG": str(config)}).host == "https://k8s.example:6443"
    # else ~/.kube/config
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(KUBECONFIG)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kube_configuration(None, {}).host == "https://k8s.example:6443"
    # and nothing found is a message naming where it looked
    with pytest.raises(KubeConfigMissing, match=r"nowhere\.yaml"):
        kube_configuration(None, {"KUBECONFIG": str(tmp_path / "nowhere.yaml")})


def test_agent_print_without_a_kubeconfig_exits_2_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["agent", "--cluster", "c", "--print", "--no-leader-election"]) == 2
    err = capsys.readouterr().err
    assert "muster agent: cannot reach a Kubernetes API server" in err
    assert "--kubeconfig" in err and "Traceback" not in err


def test_local_mode_says_its_settings_are_in_scaled_time_and_hold_names_the_commands() -> None:
    scenario = load_builtin("local-story")
    timeout = scenario.settings.defaults.timeout
    note = scaled_time_note(scenario, 10)
    assert "scaled time" in note and "divided by 10" in note
    text = hold_message("http://127.0.0.1:4566", scenario, 10)
    assert "muster settings get" in text and "muster reactivate" in text
    assert "scaled time" in text
    from muster.core.durations import format_duration

    assert f"{format_duration(timeout)} reads {format_duration(timeout / 10)}" in text
