"""The optional tuner (`muster:tuner`): absent by default; with it, a private
encrypted bucket, a function sized for a week's simulation, and a distributed map
that reads the run's items file, writes its results under `map/`, runs at most
`muster:tunerConcurrency` items at once; every grant exactly what the code calls,
on the tuner's own resources."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from muster.aws.tune_map import RunFiles

from infra import constants as c
from infra.app import build_app
from infra.config import ConfigError, load_config
from infra.layer import (
    RUNTIME_PROVIDED,
    default_builder,
    find_runtime_python,
    handler_files,
    layer_package_files,
    tuner_handler_files,
)
from infra.stack import MusterStack
from tests.infra.conftest import REPO_ROOT, Synthesized, deployment_context, resources
from tests.infra.test_layer_imports import _PROBE
from tests.infra.test_least_privilege import PLATFORM, _list, _ref, _statements_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The stack with the tuner, 7 items at once."""
    out = tmp_path_factory.mktemp("tuned")
    context = deployment_context() | {c.CTX_TUNER: True, c.CTX_TUNER_CONCURRENCY: 7}
    app = build_app(cdk.App(context=context, outdir=str(out)))
    stack = app.node.find_child("Muster")
    assert isinstance(stack, MusterStack)
    return Template.from_stack(stack).to_json()  # type: ignore[no-any-return]


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(_render(p) for p in parts)
    if "Ref" in value:
        return f"<{value['Ref']}>"
    if "Fn::GetAtt" in value:
        return f"<{value['Fn::GetAtt'][0]}.{value['Fn::GetAtt'][1]}>"
    return json.dumps(value)


def _one(doc: dict[str, Any], kind: str, contains: str = "Tuner") -> tuple[str, dict[str, Any]]:
    [(key, found)] = [(k, v) for k, v in resources(doc, kind).items() if contains in k]
    return key, found


def _map_state(doc: dict[str, Any]) -> dict[str, Any]:
    _, machine = _one(doc, "AWS::StepFunctions::StateMachine")
    definition = json.loads(_render(machine["Properties"]["DefinitionString"]))
    [state] = [s for s in definition["States"].values() if s["Type"] == "Map"]
    return state  # type: ignore[no-any-return]


def test_the_default_stack_has_no_tuner(synthesized: Synthesized) -> None:
    doc = synthesized.template
    assert not resources(doc, "AWS::S3::Bucket")
    assert not [k for k in doc["Resources"] if k.startswith(c.ID_TUNER)]
    assert not {c.OUT_TUNER_BUCKET_NAME, c.OUT_TUNER_STATE_MACHINE_ARN} & set(doc["Outputs"])
    [machine] = resources(doc, "AWS::StepFunctions::StateMachine").values()
    assert "Map" not in _render(machine["Properties"]["DefinitionString"])


def test_the_bucket_is_private_encrypted_and_tls_only(tuned: dict[str, Any]) -> None:
    bucket_id, bucket = _one(tuned, "AWS::S3::Bucket")
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    [rule] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    _, policy = _one(tuned, "AWS::S3::BucketPolicy")
    [deny] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert {r["Prefix"] for r in props["LifecycleConfiguration"]["Rules"] if "Prefix" in r} == {
        "runs/",
        "map/",
    }
    assert tuned["Outputs"][c.OUT_TUNER_BUCKET_NAME]["Value"] == {"Ref": bucket_id}


def test_the_function_is_sized_for_a_weeks_simulation(tuned: dict[str, Any]) -> None:
    _, function = _one(tuned, "AWS::Lambda::Function", "TunerFunction")
    props = function["Properties"]
    assert props["MemorySize"] == 3008
    assert props["Timeout"] == 15 * 60
    assert props["Handler"] == c.HANDLER
    bucket_id, _ = _one(tuned, "AWS::S3::Bucket")
    assert props["Environment"]["Variables"][c.ENV_TUNER_BUCKET] == {"Ref": bucket_id}
    # its own layer: the control plane's functions keep theirs
    layers = resources(tuned, "AWS::Lambda::LayerVersion")
    assert len(layers) == 2 and [_ref(layer) for layer in props["Layers"]] != [
        k for k in layers if "Tuner" not in k
    ]


def test_the_map_reads_the_items_file_writes_to_map_and_caps_its_concurrency(
    tuned: dict[str, Any],
) -> None:
    state = _map_state(tuned)
    bucket_id, _ = _one(tuned, "AWS::S3::Bucket")
    assert state["ItemReader"] == {
        "Resource": "arn:<AWS::Partition>:states:::s3:getObject",
        "ReaderConfig": {"InputType": "JSON"},
        "Parameters": {"Bucket": f"<{bucket_id}>", "Key.$": "$.items"},
    }
    assert state["ResultWriter"] == {
        "Resource": "arn:<AWS::Partition>:states:::s3:putObject",
        "Parameters": {"Bucket": f"<{bucket_id}>", "Prefix": "map"},
    }
    assert state["MaxConcurrency"] == 7
    assert state["ItemProcessor"]["ProcessorConfig"] == {
        "Mode": "DISTRIBUTED",
        "ExecutionType": "STANDARD",
    }
    # each item goes to the function with the run's files beside it, as the handler reads them
    assert state["ItemSelector"] == {
        "prefix.$": "$.prefix",
        "scenario.$": "$.scenario",
        "files.$": "$.files",
        "item.$": "$$.Map.Item.Value",
    }
    [task] = state["ItemProcessor"]["States"].values()
    function_id, _ = _one(tuned, "AWS::Lambda::Function", "TunerFunction")
    assert task["Resource"] == f"<{function_id}.Arn>"


def test_the_concurrency_defaults_to_100_and_is_checked() -> None:
    base = deployment_context() | {c.CTX_TUNER: "true"}
    assert load_config(base.get).tuner_concurrency == 100
    assert not load_config(deployment_context().get).tuner
    with pytest.raises(ConfigError, match="muster:tunerConcurrency"):
        load_config((base | {c.CTX_TUNER_CONCURRENCY: 0}).get)


def _granted(doc: dict[str, Any], role_id: str) -> dict[str, set[str]]:
    """Each action the role is allowed, and the resources it is allowed on."""
    found: dict[str, set[str]] = {}
    for s in _statements_of(doc, role_id):
        assert s["Effect"] == "Allow"
        for action in _list(s["Action"]):
            found.setdefault(action, set()).update(_render(r) for r in _list(s["Resource"]))
    return found


def _s3_calls(path: Path) -> set[str]:
    text = path.read_text()
    return {
        "s3:" + "".join(p.capitalize() for p in op.split("_"))
        for op in re.findall(r"s3\.(\w+)\(", text)
    }


def test_the_function_may_read_a_runs_scenario_and_write_its_results_only(
    tuned: dict[str, Any],
) -> None:
    _, function = _one(tuned, "AWS::Lambda::Function", "TunerFunction")
    granted = _granted(tuned, _ref(function["Properties"]["Role"]))
    bucket_id, _ = _one(tuned, "AWS::S3::Bucket")
    calls = _s3_calls(REPO_ROOT / "layers" / "muster" / "lambdas" / "tune.py")
    assert calls == {"s3:GetObject", "s3:PutObject"}
    assert set(granted) - PLATFORM == calls
    assert granted["s3:GetObject"] == {f"<{bucket_id}.Arn>/runs/*/scenario/*"}
    assert granted["s3:PutObject"] == {f"<{bucket_id}.Arn>/runs/*/results/*"}


def test_the_state_machine_may_do_what_its_map_does_and_no_more(tuned: dict[str, Any]) -> None:
    _, machine = _one(tuned, "AWS::StepFunctions::StateMachine")
    role_id = _ref(machine["Properties"]["RoleArn"])
    granted = _granted(tuned, role_id)
    bucket_id, _ = _one(tuned, "AWS::S3::Bucket")
    function_id, _ = _one(tuned, "AWS::Lambda::Function", "TunerFunction")
    executions = (
        "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:Muster-Tuner/*"
    )
    own = "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:stateMachine:Muster-Tuner"
    expected = {
        "s3:GetObject": {f"<{bucket_id}.Arn>/runs/*/items.json"},
        "s3:PutObject": {f"<{bucket_id}.Arn>/map/*"},
        "s3:ListMultipartUploadParts": {f"<{bucket_id}.Arn>/map/*"},
        "s3:AbortMultipartUpload": {f"<{bucket_id}.Arn>/map/*"},
        "lambda:InvokeFunction": {f"<{function_id}.Arn>"},
        "states:StartExecution": {own},
        "states:DescribeExecution": {executions},
        "states:StopExecution": {executions},
    }
    # besides the log delivery and traces that Step Functions' logging needs on '*'
    delivery = {a for a, r in granted.items() if r == {"*"}}
    assert delivery and all(a.startswith(("logs:", "xray:")) for a in delivery)
    assert {a: r for a, r in granted.items() if a not in delivery} == expected
    # and it may read the items file of each of a run's executions (a pruned run has
    # two): an ARN's * matches across '/', as fnmatch's does
    [items] = expected["s3:GetObject"]
    for phase in (1, 2):
        run = RunFiles("runs/r1", "scenario/a.yaml", ("scenario/a.yaml",), 3, phase=phase)
        assert fnmatch.fnmatchcase(f"<{bucket_id}.Arn>/{run.execution_input()['items']}", items)
    # and only this state machine may take the role
    _, role = _one(tuned, "AWS::IAM::Role", "TunerStateMachineRole")
    [trust] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert _render(trust["Condition"]["ArnEquals"]["aws:SourceArn"]) == own


def test_the_tuners_layer_carries_the_simulator_and_the_control_planes_does_not() -> None:
    assert not [p for p in handler_files() if p.parent.name == c.TUNER]
    tuner = {str(p) for p in layer_package_files(entry_points=tuner_handler_files())}
    assert {"lambdas/tune.py", "sim/tune_item.py", "sim/engine.py", "aws/tune_map.py"} <= tuner
    assert not [p for p in tuner if p.startswith(("cli/", "local/", "agent/", "admin/"))]
    assert "sim/tune_item.py" not in {str(p) for p in layer_package_files()}


@pytest.fixture
def lambda_runtime(tmp_path: Path) -> Path:
    """The runtime's boto3, botocore and s3transfer (this environment's), alone in a folder."""
    site = tmp_path / "lambda-runtime"
    site.mkdir()
    for name in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        (site / name).symlink_to(Path(spec.origin).parent)
    return site


def test_the_tuner_handler_imports_with_only_its_layer(
    tmp_path: Path, lambda_runtime: Path
) -> None:
    # GIVEN the tuner's layer as the stack builds it (offline, from the wheel cache)
    builder = default_builder()
    builder.build(tmp_path / "layer", tuner_handler_files())
    layer = tmp_path / "layer" / "python"
    [handler] = tuner_handler_files()
    python = find_runtime_python() or sys.executable
    code = (
        f"import sys; sys.path[:0] = [{str(handler.parent)!r}, {str(layer)!r}, "
        f"{str(lambda_runtime)!r}]\n" + _PROBE
    )
    env = {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"}
    # WHEN the handler, then each muster module shipped, is imported in isolation
    done = subprocess.run(
        [python, "-I", "-S", "-B", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    # THEN it imports, with the simulator and without the command line or local mode
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"muster.lambdas.tune", "muster.sim.tune_item", "muster.sim.engine"} <= set(
        found["muster"]
    )
    assert not [m for m in found["modules"] if m.startswith(("muster.cli", "muster.local"))]
