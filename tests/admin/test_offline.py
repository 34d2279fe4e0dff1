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
    assert "nothing written: 3 errors:" in err
    lines = [line.strip() for line in err.splitlines()[1:]]
    assert [line.split(": ")[1] for line in lines] == [
        "timeot",
        "requeuingStrategy.backoffJitter",
        "queues.a.dryRun",
    ]
