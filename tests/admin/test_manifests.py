"""`muster manifests` and `muster agent-image` against the synthesized stack deployed
into moto: the cluster side is rendered from the stack's real outputs, and the image
goes to the repository the stack created."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from muster import __version__
from muster.cli import main
from muster.manifests import MANIFESTS, REQUIRED_OUTPUTS, load_documents, render

from infra import constants as c
from tests.admin.conftest import REGION, Deployed

ROOT = Path(__file__).resolve().parents[2]


def rendered(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main(["manifests", "--stack", "Muster", *argv]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def agent(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_outputs_it_reads_are_the_ones_the_stack_declares(deployed: Deployed) -> None:
    declared = {c.OUT_CLUSTER_NAME, c.OUT_EVENT_BUS_NAME, c.OUT_EVENT_BUS_ARN}
    assert set(REQUIRED_OUTPUTS) == declared
    for key in (
        *declared,
        c.OUT_AGENT_NAMESPACE,
        c.OUT_AGENT_SERVICE_ACCOUNT,
        c.OUT_AGENT_IMAGE_REPOSITORY_URI,
    ):
        assert deployed.outputs.get(key), key


def test_the_agent_gets_the_stacks_bus_region_cluster_and_image(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the stack deployed (its bus has a generated name, not "muster")
    bus = deployed.outputs[c.OUT_EVENT_BUS_NAME]
    assert bus != "muster"
    # WHEN the manifests are rendered from it
    docs = rendered(capsys)
    # THEN every shipped object is there, in the order kubectl must apply them
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "Namespace" and kinds[-1] == "Deployment"
    assert len(docs) == len(load_documents(ROOT / "deploy" / "kubernetes"))
    # AND the agent sends to the deployed bus, in its region, as this cluster
    container = agent(docs)
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["MUSTER_EVENT_BUS"] == bus
    assert env["AWS_REGION"] == REGION
    assert env["MUSTER_CLUSTER_NAME"] == deployed.config.cluster_name
    # AND runs the image `muster agent-image` pushes to the stack's repository
    repository = deployed.outputs[c.OUT_AGENT_IMAGE_REPOSITORY_URI]
    assert container["image"] == f"{repository}:{__version__}"


def test_an_image_and_settings_can_be_given(
    deployed: Deployed, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings = tmp_path / "s.yaml"
    settings.write_text(
        "queueAccess: {restrict: true, queues: {gpu: {namespaces: [team-a], maxPriority: 5}}}\n"
    )
    docs = rendered(capsys, "--image", "registry.example/agent:7", "--settings", str(settings))
    assert agent(docs)["image"] == "registry.example/agent:7"
    params = next(d for d in docs if d["kind"] == "ConfigMap")
    assert params["data"]["restrictQueues"] == "true"
    assert params["data"]["queue.gpu.namespaces"] == "team-a"


def test_written_to_a_file(deployed: Deployed, tmp_path: Path) -> None:
    out = tmp_path / "muster.yaml"
    assert main(["manifests", "--stack", "Muster", "-o", str(out)]) == 0
    assert out.read_text().startswith("# Muster's cluster side for stack Muster")


def test_a_missing_stack_is_named(deployed: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifests", "--stack", "Nope"]) == 1
    err = capsys.readouterr().err
    assert "no stack named Nope" in err and "Traceback" not in err


def test_a_bad_settings_file_names_the_field(
    deployed: Deployed, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings = tmp_path / "s.yaml"
    settings.write_text("timeout: soon\n")
    assert main(["manifests", "--stack", "Muster", "--settings", str(settings)]) == 2
    assert "timeout" in capsys.readouterr().err


def test_another_agent_namespace_and_service_account_move_every_reference() -> None:
    docs = load_documents(ROOT / "deploy" / "kubernetes", MANIFESTS)
    outputs = {
        c.OUT_CLUSTER_NAME: "gpu",
        c.OUT_EVENT_BUS_NAME: "bus",
        c.OUT_EVENT_BUS_ARN: "arn:aws:events:eu-west-1:111122223333:event-bus/bus",
        c.OUT_AGENT_NAMESPACE: "platform",
        c.OUT_AGENT_SERVICE_ACCOUNT: "gang-agent",
    }
    out = render(docs, outputs, image="i:1")
    text = yaml.safe_dump_all(out)
    assert "muster-system" not in text
    account = next(d for d in out if d["kind"] == "ServiceAccount")
    assert account["metadata"] == {
        **account["metadata"],
        "name": "gang-agent",
        "namespace": "platform",
    }
    assert next(d for d in out if d["kind"] == "Namespace")["metadata"]["name"] == "platform"
    deployment = next(d for d in out if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "gang-agent"
    env = {v["name"]: v.get("value") for v in agent(out)["env"]}
    assert env["AWS_REGION"] == "eu-west-1"


# --------------------------------------------------------------------------- agent image


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `docker` on PATH that records each call (arguments and stdin) and succeeds,
    or fails for the subcommand named by FAKE_DOCKER_FAIL."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    script = bin_dir / "docker"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "stdin = '' if sys.stdin.isatty() else sys.stdin.read()\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(' '.join(sys.argv[1:]) + ' <' + stdin + '>\\n')\n"
        "sys.exit(3 if os.environ.get('FAKE_DOCKER_FAIL') == sys.argv[1] else 0)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("MUSTER_DOCKER", raising=False)
    return log


def test_the_agent_image_is_built_from_the_dockerfile_and_pushed_to_the_stacks_repository(
    deployed: Deployed, fake_docker: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the image is built and published for the deployed stack
    assert main(["agent-image", "--stack", "Muster"]) == 0
    # THEN docker built the shipped Dockerfile, logged in to the stack's registry with
    # ECR's token on stdin, and pushed the tag the manifests name
    repository = deployed.outputs[c.OUT_AGENT_IMAGE_REPOSITORY_URI]
    image = f"{repository}:{__version__}"
    build, login, push = fake_docker.read_text().splitlines()
    assert build == f"build -f {ROOT / 'deploy' / 'agent.Dockerfile'} -t {image} {ROOT} <>"
    assert login.startswith(f"login --username AWS --password-stdin {repository.split('/')[0]} <")
    assert login != f"login --username AWS --password-stdin {repository.split('/')[0]} <>"
    assert push == f"push {image} <>"
    assert capsys.readouterr().out.strip() == image
    assert agent(rendered(capsys))["image"] == image


def test_a_failed_build_stops_before_the_push(
    deployed: Deployed,
    fake_docker: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "build")
    assert main(["agent-image", "--stack", "Muster"]) == 1
    assert "the build failed" in capsys.readouterr().err
    assert [line.split()[0] for line in fake_docker.read_text().splitlines()] == ["build"]


def test_without_docker_it_says_docker_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("MUSTER_DOCKER", raising=False)
    assert main(["agent-image", "--repository", "r.example/agent", "--no-push"]) == 1
    assert "needs Docker" in capsys.readouterr().err
