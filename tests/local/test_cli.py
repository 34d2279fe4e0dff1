"""`muster local` refuses bad input before it starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from muster.cli import EXIT_INTERRUPTED, main
from muster.local.moto_server import moto_server


def test_a_bad_scenario_names_the_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("cluster: {nodes: 2, gpusPerNode: 8}\nworkloads:\n  - {name: a, pods: zero}\n")
    assert main(["local", str(path)]) == 2
    err = capsys.readouterr().err
    assert "muster local:" in err and "pods" in err


def test_a_scenario_with_network_blocks_is_refused_not_played_without_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "blocks.yaml"
    path.write_text(
        "cluster: {nodes: 8, gpusPerNode: 8, topology: {network-node-layer-3: 4}}\n"
        "workloads:\n  - {name: a, pods: 2, gpusPerPod: 8}\n"
    )
    assert main(["local", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("muster local: cluster.topology: the local mode does not model")
    assert "muster simulate" in err and "Traceback" not in err


def test_an_unknown_builtin_and_a_bad_scale_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["local", "--builtin", "no-such-story"]) == 2
    assert "no-such-story" in capsys.readouterr().err
    assert main(["local", "--scale", "0"]) == 2
    assert "--scale must be above 0" in capsys.readouterr().err


@pytest.mark.parametrize("scale", ["inf", "1e9", "nan", "-inf"])
def test_a_scale_that_is_not_a_finite_factor_of_at_most_1000_exits_2(
    scale: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["local", f"--scale={scale}", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("muster local: --scale must be above 0 and at most 1000")
    assert "Traceback" not in err and err.count("\n") == 1


def test_a_port_in_use_exits_2_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    with moto_server() as endpoint:
        port = endpoint.url.rsplit(":", 1)[1]
        assert main(["local", "--port", port, "--quiet"]) == 2
    assert f"port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err


def test_ctrl_c_stops_it_even_when_started_with_sigint_ignored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import signal

    import muster.cli.local as local_command

    # GIVEN a process that inherited SIGINT ignored (a shell's background job)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupted: list[bool] = []

    def run_local(*_args: object, **_kwargs: object) -> None:
        # WHEN Ctrl-C comes while the control plane plays (here: at once)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            interrupted.append(True)
            raise

    monkeypatch.setattr(local_command, "run_local", run_local)
    try:
        code = main(["local", "--builtin", "never-ready", "--quiet"])
    finally:
        signal.signal(signal.SIGINT, previous)
    # THEN it stops, as it does on SIGTERM, and says everything it started is stopped
    assert interrupted == [True]
    assert code == EXIT_INTERRUPTED
    assert "interrupted; everything it started is stopped" in capsys.readouterr().err
