"""What needs no deployment: `settings validate`, KEY=VALUE parsing, the output formats."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from muster.admin import deployment
from muster.admin.errors import AdminError
from muster.admin.render import annotated_yaml, format_status
from muster.admin.settings import settings_changes
from muster.cli import EXIT_BAD_INPUT, main
from muster.cli.command import exit_code

REPO = Path(__file__).resolve().parents[2]


def test_validate_accepts_a_good_document_and_prints_it_resolved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "settings.yaml"
    doc.write_text(
        "timeout: 10m\nqueues:\n  spot:\n    requeuingStrategy:\n      backoffLimitCount: 2\n"
    )
    assert main(["settings", "validate", str(doc)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{doc}: valid")
    resolved = yaml.safe_load(out.split("\n", 1)[1])
    assert resolved["timeout"] == "10m"
    assert resolved["queues"]["spot"]["requeuingStrategy"]["backoffLimitCount"] == 2


def test_validate_names_the_file_and_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "bad.yaml"
    doc.write_text("queues:\n  spot:\n    timout: 10m\n")
    assert main(["settings", "validate", str(doc)]) == 2
    err = capsys.readouterr().err
    assert f"{doc}: queues.spot.timout: unknown setting; did you mean 'timeout'?" in err

    assert main(["settings", "validate", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: No such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        (
            "requeuingStrategy:\n  backoffJitter: .nan\n",
            "requeuingStrategy.backoffJitter",
            "finite",
        ),
        ("timeout: 100000000d\n", "timeout", "longer than 365d"),
        ("queues:\n  spot:\n    recoveryTimeout: 400d\n", "queues.spot.recoveryTimeout", "365d"),
    ],
)
def test_validate_refuses_what_the_runtime_cannot_carry_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, why: str
) -> None:
    doc = tmp_path / "bad.yaml"
    doc.write_text(text)
    assert main(["settings", "validate", str(doc)]) == 2
    err = capsys.readouterr().err
    assert f"{doc}: {field}:" in err and why in err


def test_assignments_become_a_nested_document_of_yaml_scalars() -> None:
    changes = settings_changes(
        None,
        [
            "requeuingStrategy.backoffLimitCount=3",
            "queues.spot.timeout=10m",
            "queues.spot.dryRun=true",
            "blockAdmission=false",
            "recoveryTimeout=null",
        ],
    )
    assert changes == {
        "requeuingStrategy": {"backoffLimitCount": 3},
        "queues": {"spot": {"timeout": "10m", "dryRun": True}},
        "blockAdmission": False,
        "recoveryTimeout": None,
    }


def test_assignments_override_a_file(tmp_path: Path) -> None:
    doc = tmp_path / "change.json"
    doc.write_text('{"timeout": "5m", "requeuingStrategy": {"backoffBaseSeconds": 30}}')
    changes = settings_changes(str(doc), ["timeout=7m"])
    assert changes == {"timeout": "7m", "requeuingStrategy": {"backoffBaseSeconds": 30}}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["timeout"], "'timeout': expected KEY=VALUE"),
        (["queues..timeout=1m"], "expected KEY=VALUE with a dotted key"),
        (["timeout=5m", "timeout.x=1"], "timeout: is a value, cannot set timeout.x"),
        ([], "nothing to set"),
    ],
)
def test_malformed_assignments_are_refused_with_exit_2(pairs: list[str], message: str) -> None:
    with pytest.raises(AdminError) as caught:
        settings_changes(None, pairs)
    assert message in str(caught.value)
    assert exit_code(caught.value) == EXIT_BAD_INPUT


def test_settings_set_without_changes_exits_2_before_any_aws_call(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_aws(*args: object) -> None:
        raise AssertionError("connected to AWS")

    monkeypatch.setattr(deployment, "connect", no_aws)
    assert main(["settings", "set"]) == 2
    assert "nothing to set" in capsys.readouterr().err


def test_annotated_yaml_marks_each_value_with_its_source() -> None:
    text = annotated_yaml(
        {"timeout": "10m", "blockAdmission": True, "queues": {"spot": {"timeout": "1m"}}},
        deployment={"blockAdmission": True},
        record={"timeout": "10m", "queues": {"spot": {"timeout": "1m"}}},
    )
    assert yaml.safe_load(text) == {
        "timeout": "10m",
        "blockAdmission": True,
        "queues": {"spot": {"timeout": "1m"}},
    }
    assert "blockAdmission: true  # deployment" in text
    assert "timeout: 10m  # runtime record" in text
    assert "    timeout: 1m  # runtime record" in text


def test_status_hides_finished_workloads_unless_asked() -> None:
    def w(key: str, phase: str) -> dict[str, object]:
        return {
            "workload": key,
            "queue": "q",
            "phase": phase,
            "attempt": 1,
            "requeueCount": 0,
            "readyPods": 0,
            "gangSize": 1,
            "reason": "Succeeded" if phase == "Finished" else None,
            "requeueAt": None,
            "deadline": None,
        }

    doc = {
        "phases": {"Finished": [w("ns/done", "Finished")], "Pending": [w("ns/new", "Pending")]},
        "counts": {"Finished": 1, "Pending": 1},
        "admitted": [],
    }
    assert "ns/done" not in format_status(doc)
    assert "ns/new" in format_status(doc)
    assert "ns/done" in format_status(doc, include_finished=True)
    assert "Admission held by: nobody" in format_status(doc)


def test_an_aws_error_names_the_call_and_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import ClientError

    class Denied:
        def store(self) -> None:
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "Query"
            )

    monkeypatch.setattr(deployment, "connect", lambda *args: Denied())
    assert main(["status"]) == 1
    assert capsys.readouterr().err == (
        "muster status: Query failed: AccessDeniedException not allowed\n"
    )


def test_validate_lists_every_wrong_field_one_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "bad.yaml"
    doc.write_text("timeot: 5m\nrequeuingStrategy: {backoffJitter: 2}\nqueues: {a: {dryRun: 1}}\n")
    assert main(["settings", "validate", str(doc)]) == 2
    err = capsys.readouterr().err
    assert "invalid settings: 3 errors:" in err
    assert "nothing written" not in err  # validate never writes
    lines = [line.strip() for line in err.splitlines()[1:]]
    assert [line.split(": ")[1] for line in lines] == [
        "timeot",
        "requeuingStrategy.backoffJitter",
        "queues.a.dryRun",
    ]


def test_a_yaml_mistake_says_where_in_the_file_not_unicode_string(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a settings file and a scenario whose YAML does not parse
    doc = tmp_path / "broken.yaml"
    doc.write_text("timeout: 5m\nqueues:\n  a: {timeout: [\n")
    # WHEN they are validated and simulated
    assert main(["settings", "validate", str(doc)]) == 2
    assert main(["simulate", str(doc)]) == 2
    # THEN each message names the file, the line and the column, once
    for line in capsys.readouterr().err.splitlines():
        assert f"{doc}: not valid YAML" in line and "line 4, column 1: " in line, line
        assert "<unicode string>" not in line


def test_a_max_timeout_below_the_timeout_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a cap on a workload's own timeout below the timeout it would lengthen
    doc = tmp_path / "cap.yaml"
    doc.write_text("timeout: 10m\nmaxTimeout: 5m\n")
    # WHEN it is validated THEN it is refused, naming the field and why
    assert main(["settings", "validate", str(doc)]) == 2
    assert f"{doc}: maxTimeout: 5m is below timeout 10m" in capsys.readouterr().err


def test_an_unknown_argument_shows_the_commands_own_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv, usage in (
        (["status", "--frob"], "muster status"),
        (["settings", "get", "-x"], "muster settings get"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert (
            err.startswith(f"usage: {usage} ") and f"{usage}: error: unrecognized arguments" in err
        )


@pytest.mark.parametrize("endpoint", ["localhost:4566", "127.0.0.1:4566", "ftp://x", "http://"])
def test_an_endpoint_without_its_scheme_is_bad_input(
    endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--endpoint", endpoint]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"muster status: --endpoint {endpoint!r} is not an http(s) URL")
    assert "e.g. --endpoint http://" in err and "unexpected error" not in err


def test_output_that_cannot_be_written_is_bad_input_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a file where a folder or a file's folder would have to be
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    trace = tmp_path / "trace.csv"
    trace.write_text("jobid,submitted_time,num_gpus,duration\n")
    deadlock = str(REPO / "layers" / "muster" / "scenarios" / "deadlock.yaml")
    folder = tmp_path / "a-folder"  # where a file would have to be
    folder.mkdir()
    export = ["history", "export", "--since", "1d", "--endpoint", "http://127.0.0.1:9"]
    for argv in (
        ["simulate", "--builtin", "deadlock", "--out", str(blocker / "out")],
        [
            "settings",
            "import",
            str(REPO / "examples" / "kueue-config.yaml"),
            "-o",
            str(blocker / "x.yaml"),
        ],
        ["trace", "cut", str(trace), "--from", "2017-10-02", "-o", str(blocker / "cut.csv")],
        ["local", "--out", str(blocker / "out")],
        ["tune", deadlock, "--grid", "timeout=5m", "--jobs", "1", "--out", str(blocker / "out")],
        ["tune", deadlock, "--grid", "timeout=5m", "--jobs", "1", "--out", str(blocker)],
        # before the history is read (no endpoint answers here)
        [*export, "--out", str(blocker / "trace.csv")],
        [*export, "--out", str(folder)],
    ):
        # WHEN a command is told to write there THEN one message, exit 2
        assert main(argv) == EXIT_BAD_INPUT, argv
        err = capsys.readouterr().err
        assert "cannot write" in err, (argv, err)
        assert str(blocker) in err or str(folder) in err, (argv, err)
        assert "unexpected error" not in err and "Traceback" not in err


def test_settings_get_against_the_local_mode_says_where_its_settings_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from muster.cli import settings as settings_command
    from muster.contract import DEFAULT_STACK_NAME, LOCAL_STACK_NAME
    from muster.core import parse_settings

    class Local:
        function_name = "MusterLocal-Ingest"

        def __init__(self, stack: str) -> None:
            self.stack = stack
            self.config = type("Config", (), {"cluster_name": "local"})()

        def settings(self) -> deployment.SettingsSources:
            return deployment.SettingsSources(parse_settings({}), {}, {}, None, None)

    for stack, said in (
        (LOCAL_STACK_NAME, "as `muster local` deployed them"),
        (DEFAULT_STACK_NAME, "cdk.json"),
    ):
        monkeypatch.setattr(settings_command, "connect_to", lambda args, s=stack: Local(s))
        assert main(["settings", "get"]) == 0
        header = capsys.readouterr().out.splitlines()[1]
        assert header.startswith("# deployment: MUSTER_SETTINGS of function MusterLocal-Ingest")
        assert said in header
        if stack == LOCAL_STACK_NAME:
            assert "cdk.json" not in header
