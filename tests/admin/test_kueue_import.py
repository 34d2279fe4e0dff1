"""`muster settings import` and `validate` on Kueue's configuration (offline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from muster.cli import main
from muster.core import parse_settings
from muster.core.settings import SettingsError
from muster.kueue import import_kueue

# Kueue's documented example for waitForPodsReady (config.kueue.x-k8s.io/v1beta2),
# inside a Configuration with parts that have no Muster equivalent.
V1BETA2 = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: :8081
manageJobsWithoutQueueName: false
waitForPodsReady:
  timeout: 10m
  recoveryTimeout: 3m
  requeuingStrategy:
    timestamp: Creation
    backoffLimitCount: 5
    backoffBaseSeconds: 30
integrations:
  frameworks:
  - batch/job
  - ray.io/rayjob
fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare]
"""


def test_a_v1beta2_configuration_imports_with_its_version_defaults_written_out() -> None:
    imported = import_kueue(yaml.safe_load(V1BETA2))
    assert imported.settings == {
        "timeout": "10m",
        "blockAdmission": False,  # v1beta2's default
        "recoveryTimeout": "3m",
        "requeuingStrategy": {
            "timestamp": "Creation",
            "backoffBaseSeconds": 30,
            "backoffMaxSeconds": 3600,  # Kueue's default, written out
            "backoffLimitCount": 5,
        },
    }
    settings = parse_settings(imported.settings)
    assert settings.defaults.timeout == 600 and settings.defaults.recovery_timeout == 180
    notes = "\n".join(map(str, imported.notes))
    assert "health, namespace: configure Kueue's controller" in notes
    assert "manageJobsWithoutQueueName" in notes and "fairSharing" in notes
    assert "not supported: integrations.frameworks: ray.io/rayjob;" in notes
    assert "batch/job," not in notes.split("rayjob")[0]


def test_defaults_follow_the_api_version_as_kueue_sets_them() -> None:
    # v1beta2: always on, 30m, blockAdmission false
    v2 = import_kueue({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"})
    assert v2.settings["timeout"] == "30m" and v2.settings["blockAdmission"] is False
    assert "dryRun" not in v2.settings
    # v1beta1 with enable: 5m, blockAdmission defaults to true
    v1 = import_kueue(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "waitForPodsReady": {"enable": True},
        }
    )
    assert v1.settings["timeout"] == "5m" and v1.settings["blockAdmission"] is True
    assert v1.settings["requeuingStrategy"]["timestamp"] == "Eviction"
    # v1beta1 without enable: Kueue never evicts, so the import only reports (dry run)
    off = import_kueue({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"})
    assert off.settings["dryRun"] is True
    assert any("waitForPodsReady is off" in str(n) for n in off.notes)
    # v1beta2 with the DisableWaitForPodsReady gate: off as well
    gated = import_kueue(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "featureGates": {"DisableWaitForPodsReady": True},
        }
    )
    assert gated.settings["dryRun"] is True


def test_a_bare_block_is_read_with_v1beta2_defaults_or_v1beta1_when_it_has_enable() -> None:
    assert import_kueue({"timeout": "7m"}).settings["blockAdmission"] is False
    assert import_kueue({"enable": True, "timeout": "7m"}).settings["blockAdmission"] is True
    wrapped = import_kueue({"waitForPodsReady": {"blockAdmission": True}})
    assert wrapped.settings["timeout"] == "30m" and wrapped.settings["blockAdmission"] is True
    v1 = import_kueue({"timeout": "7m"}, api_version="v1beta1")
    assert v1.settings["blockAdmission"] is True and v1.settings["dryRun"] is True


def test_every_mistake_in_a_kueue_document_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as err:
        import_kueue(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta3",
                "kind": "Configuration",
                "waitForPodsReady": {
                    "timout": "5m",
                    "requeuingStrategy": {"backoffLimit": 2},
                },
            }
        )
    assert [e.split(":")[0] for e in err.value.errors] == [
        "apiVersion",
        "waitForPodsReady.timout",
        "waitForPodsReady.requeuingStrategy.backoffLimit",
    ]
    assert "did you mean 'timeout'?" in err.value.errors[1]
    # values Muster's parser refuses are named with their Kueue path
    with pytest.raises(SettingsError) as bad:
        import_kueue({"waitForPodsReady": {"timeout": "soon", "blockAdmission": "yes"}})
    assert [e.split(":")[0] for e in bad.value.errors] == [
        "waitForPodsReady.timeout",
        "waitForPodsReady.blockAdmission",
    ]
    # and both kinds in one document come out in one run, not the first kind first
    with pytest.raises(SettingsError) as both:
        import_kueue(
            {
                "waitForPodsReady": {
                    "timout": "5m",
                    "blockAdmission": "yes",
                    "requeuingStrategy": {"backoffLimitCount": -1, "backoffLimt": 2},
                }
            }
        )
    assert sorted(e.split(":")[0] for e in both.value.errors) == [
        "waitForPodsReady.blockAdmission",
        "waitForPodsReady.requeuingStrategy.backoffLimitCount",
        "waitForPodsReady.requeuingStrategy.backoffLimt",
        "waitForPodsReady.timout",
    ]


def test_import_command_writes_a_document_validate_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a Kueue configuration file
    source = tmp_path / "kueue-config.yaml"
    source.write_text(V1BETA2)
    target = tmp_path / "muster-settings.yaml"
    # WHEN it is imported
    assert main(["settings", "import", str(source), "-o", str(target)]) == 0
    err = capsys.readouterr().err
    # THEN what does not carry over is on stderr, each labelled with what Muster has
    # for it: "no equivalent" only where it has nothing
    lines = err.splitlines()
    assert "no equivalent: fairSharing: Muster orders by priority" in err
    assert any(line.startswith("in Muster: manageJobsWithoutQueueName:") for line in lines)
    assert any(
        line.startswith("not supported: integrations.frameworks: ray.io/rayjob") for line in lines
    )
    assert any(line.startswith("in Muster: Kueue adds a random jitter") for line in lines)
    assert not any(
        line.startswith("no equivalent:")
        and ("manageJobsWithoutQueueName" in line or "jitter" in line or "rayjob" in line)
        for line in lines
    )
    # AND the written file is valid settings
    assert main(["settings", "validate", str(target)]) == 0
    out = capsys.readouterr().out
    resolved = yaml.safe_load(out.split("\n", 1)[1])
    assert resolved["timeout"] == "10m" and resolved["recoveryTimeout"] == "3m"
    # AND to stdout without -o
    assert main(["settings", "import", str(source)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["requeuingStrategy"]["backoffLimitCount"] == 5


def test_validate_reads_a_kueue_configuration_and_points_to_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "kueue.yaml"
    source.write_text(V1BETA2)
    assert main(["settings", "validate", str(source)]) == 0
    out = capsys.readouterr().out
    assert "read as a Kueue Configuration config.kueue.x-k8s.io/v1beta2" in out
    assert f"muster settings import {source}" in out
    bare = tmp_path / "block.yaml"
    bare.write_text("waitForPodsReady:\n  enable: true\n  timeout: 2m\n")
    assert main(["settings", "validate", str(bare)]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out.split("valid; ", 1)[1].split("\n", 1)[1])
    assert resolved["timeout"] == "2m" and resolved["blockAdmission"] is True


def test_import_of_a_bad_document_exits_2_with_every_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "kueue.yaml"
    source.write_text("waitForPodsReady:\n  timout: 5m\n  blockAdmision: true\n")
    assert main(["settings", "import", str(source)]) == 2
    err = capsys.readouterr().err
    assert f"{source}: waitForPodsReady.timout" in err
    assert f"{source}: waitForPodsReady.blockAdmision" in err


# What `kubectl -n kueue-system get configmap kueue-manager-config -o yaml` prints:
# Kueue's Configuration as text under the key its manifests and Helm chart use.
CONFIGMAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
    "data": {"controller_manager_config.yaml": V1BETA2},
}


def test_the_configmap_kubectl_prints_imports_as_the_configuration_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the ConfigMap as kubectl prints it
    imported = import_kueue(CONFIGMAP)
    # THEN it imports as the Configuration in its data, and says where it was found
    assert imported.settings == import_kueue(yaml.safe_load(V1BETA2)).settings
    assert imported.source == (
        "Kueue Configuration config.kueue.x-k8s.io/v1beta2 in ConfigMap "
        "kueue-system/kueue-manager-config (data.controller_manager_config.yaml)"
    )
    # AND the command reads it from a file, and validate points to import
    source = tmp_path / "cm.yaml"
    source.write_text(yaml.safe_dump(CONFIGMAP))
    assert main(["settings", "import", str(source)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["timeout"] == "10m"
    assert main(["settings", "validate", str(source)]) == 0
    assert "in ConfigMap kueue-system/kueue-manager-config" in capsys.readouterr().out
    # AND mistakes inside it say where they are
    broken = dict(
        CONFIGMAP, data={"controller_manager_config.yaml": "waitForPodsReady: {timout: 5m}"}
    )
    with pytest.raises(SettingsError) as err:
        import_kueue(broken)
    assert err.value.errors[0].startswith(
        "data.controller_manager_config.yaml: waitForPodsReady.timout: not a field"
    )
    # AND a ConfigMap without Kueue's Configuration is refused, naming the key looked for
    other = dict(CONFIGMAP, data={"app.yaml": "x: 1"})
    with pytest.raises(SettingsError, match=r"no key controller_manager_config\.yaml"):
        import_kueue(other)
