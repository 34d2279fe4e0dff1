"""The administrator's commands against the synthesized stack deployed into moto.

State is made through the control plane (submit, admit, pods, deadlines, backoff);
the commands find the table, queue and settings from the stack's outputs and the
ingest function's environment, as they do against AWS.
"""

from __future__ import annotations

import json

import pytest
import yaml
from muster.cli import main
from muster.runtime.service import MAX_EFFECT_TRIES

from .conftest import Deployed

pytestmark = pytest.mark.slow


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def deactivate(aws: Deployed, key: str) -> None:
    """Submit a gang of 2 whose second pod never schedules, until it is Deactivated.

    The requeuing limit is 1 (set at run time by the caller): the first timeout
    requeues, the second deactivates.
    """
    aws.submit(key, gang=2, queue="spot")
    assert key in aws.admit()
    aws.pod(key, "w-0", 1, ready=True, node="gpu-node-1")
    aws.pod(
        key,
        "w-1",
        1,
        ready=False,
        reason="Unschedulable",
        message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
    )
    aws.deadline_passes(key)
    assert aws.phase(key) == "Requeued"
    aws.backoff_ends(key)
    assert key in aws.admit()
    aws.pod(key, "w-0", 2, ready=True, node="gpu-node-2")
    aws.pod(key, "w-1", 2, ready=False, node="gpu-node-3", reason="ContainersNotReady")
    aws.deadline_passes(key)
    assert aws.phase(key) == "Deactivated"


def test_describe_says_plainly_when_the_job_fails_on_its_own(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN failure-aware retry on, and a gang of 2 whose image cannot be pulled
    assert (
        run(
            capsys,
            "settings",
            "set",
            "workloadFaults.limitCount=1",
            "workloadFaults.evictAfter=30s",
        )[0]
        == 0
    )
    key = "team-b/bad-image"
    aws.submit(key, gang=2, queue="spot")
    for attempt in (1, 2):
        assert key in aws.admit()
        for i in range(2):
            aws.pod(
                key,
                f"w-{i}",
                10 * attempt + i,
                ready=False,
                node=f"gpu-node-{i}",
                reason="ImagePullBackOff",
                message='Back-off pulling image "repo/llama:typo"',
                scheduled=True,
                waiting="ImagePullBackOff",
            )
        # WHEN every pod has failed on its own for 30 s
        aws.fault_deadline_passes(key)
        if attempt == 1:
            assert aws.phase(key) == "Requeued"
            aws.backoff_ends(key)
    # THEN the second such eviction deactivates it, and describe says why
    assert aws.phase(key) == "Deactivated"
    code, out, err = run(capsys, "describe", key)
    assert code == 0, err
    assert "phase      Deactivated (WorkloadFaults)" in out
    why = out.split("Why it was last evicted:")[1].split("Evictions:")[0]
    assert "Deactivated / WorkloadFaults (evicted early by workloadFaults.evictAfter" in why
    assert (
        "diagnosis: 2 of 2 pods cannot pull image repo/llama:typo (ImagePullBackOff): the job "
        "fails on its own; retries stopped: 2 evictions in a row failed this way "
        "(workloadFaults.limitCount 1)"
    ) in why
    assert "w-0 on gpu-node-0: Pending, ImagePullBackOff" in why
    assert "[WorkloadFault]" in why
    evictions = out.split("Evictions:")[1].split("History:")[0]
    assert "WorkloadFault/WaitForStart" in evictions
    assert "Deactivated/WorkloadFaults" in evictions
    history = out.split("History:")[1]
    assert "reason=WorkloadFault cause=WaitForStart" in history
    assert "diagnosis: 2 of 2 pods cannot pull image repo/llama:typo" in history
    assert "Deactivated      reason=WorkloadFaults" in history
    assert run(capsys, "settings", "set", "workloadFaults=null")[0] == 0


def test_settings_set_validates_writes_the_record_and_requests_admission(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the administrator limits requeues and shortens the spot queue's timeout
    code, out, err = run(
        capsys,
        "settings",
        "set",
        "requeuingStrategy.backoffLimitCount=3",
        "queues.spot.timeout=10m",
    )
    # THEN the record holds exactly the changes, typed as YAML scalars
    assert code == 0, err
    record = aws.settings_record()
    assert record is not None
    assert record[0] == {
        "requeuingStrategy": {"backoffLimitCount": 3},
        "queues": {"spot": {"timeout": "10m"}},
    }
    assert "requeuingStrategy.backoffLimitCount: (unset) -> 3" in out
    assert "queues.spot.timeout: (unset) -> 10m" in out
    # AND an admission pass is requested on the admission function's queue
    assert aws.requeue_messages() == [
        {"type": "admission", "reason": "settings changed", "workload": None}
    ]

    # WHEN `settings get` shows them
    code, out, _ = run(capsys, "settings", "get")
    assert code == 0
    # THEN it is YAML of the effective settings, each value marked with its source
    assert yaml.safe_load(out)["requeuingStrategy"]["backoffLimitCount"] == 3
    assert yaml.safe_load(out)["queues"]["spot"]["timeout"] == "10m"
    assert "backoffLimitCount: 3  # runtime record" in out
    assert "timeout: 5m  # deployment" in out  # cdk.json's muster:settings
    assert "dryRun: false  # default" in out
    assert f"runtime record: version {record[1]}" in out

    # WHEN a key is reset with null
    code, _, err = run(capsys, "settings", "set", "queues.spot.timeout=null")
    # THEN it is gone from the record (the deployment's value applies again)
    assert code == 0, err
    after = aws.settings_record()
    assert after is not None
    assert after[0] == {"requeuingStrategy": {"backoffLimitCount": 3}, "queues": {"spot": {}}}


def test_a_typo_names_the_field_exits_2_and_writes_nothing(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN a key is misspelt
    code, out, err = run(capsys, "settings", "set", "requeuingStrategy.backofLimitCount=3")
    # THEN the core's message names the field and suggests the right one
    assert code == 2
    assert out == ""
    assert "requeuingStrategy.backofLimitCount: unknown setting" in err
    assert "did you mean 'backoffLimitCount'" in err
    assert "nothing written" in err
    # AND nothing was written or requested
    assert aws.settings_record() is None
    assert aws.requeue_messages() == []

    # WHEN a value is malformed, or a limit is below its base (a rule across two keys)
    code, _, err = run(capsys, "settings", "set", "queues.spot.timeout=soon")
    assert code == 2 and "queues.spot.timeout:" in err
    code, _, err = run(capsys, "settings", "set", "requeuingStrategy.backoffMaxSeconds=10")
    assert code == 2 and "backoffMaxSeconds: 10 is below backoffBaseSeconds 60" in err
    assert aws.settings_record() is None
    # AND a cap below what it caps, given at once or against a cap already set
    code, _, err = run(capsys, "settings", "set", "timeout=10m", "maxTimeout=5m")
    assert code == 2 and "maxTimeout: 5m is below timeout 10m" in err
    assert aws.settings_record() is None
    assert run(capsys, "settings", "set", "maxTimeout=15m")[0] == 0
    code, _, err = run(capsys, "settings", "set", "timeout=20m")
    assert code == 2 and "maxTimeout: 15m is below timeout 20m" in err


def test_settings_set_from_a_file(
    aws: Deployed, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    change = tmp_path / "change.yaml"
    change.write_text("blockAdmission: true\nqueues:\n  spot:\n    recoveryTimeout: 0s\n")
    code, out, err = run(capsys, "settings", "set", "--file", str(change))
    assert code == 0, err
    record = aws.settings_record()
    assert record is not None
    assert record[0] == {"blockAdmission": True, "queues": {"spot": {"recoveryTimeout": "0s"}}}
    assert "blockAdmission: false -> true" in out


def test_a_bad_settings_record_is_one_clear_error_for_every_command(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a settings record that the core's parser refuses (written around `settings set`,
    # as an older version or a hand edit could have)
    aws.store.put_settings_record(
        {"timeout": "soon", "requeuingStrategy": {"backoffJitter": 2}}, None
    )
    aws.submit("team-a/held", gang=1)
    # WHEN any command that reads settings runs
    for argv in (["settings", "get"], ["status"], ["reactivate", "team-a/held"]):
        code, out, err = run(capsys, *argv)
        # THEN it fails with the same message, naming every wrong field, and shows nothing
        assert code == 1, argv
        assert not any(
            line.startswith(("# Settings", "Cluster ", "team-a/held")) for line in out.splitlines()
        ), out
        assert "the runtime settings record (version 1) is invalid" in err
        assert "record: timeout:" in err
        assert "record: requeuingStrategy.backoffJitter: must be between 0 and 1" in err
        assert "muster settings set" in err
    # WHEN `settings set` repairs the record
    code, out, err = run(
        capsys, "settings", "set", "timeout=null", "requeuingStrategy.backoffJitter=0.1"
    )
    # THEN it is written, and every command reads it again
    assert code == 0, err
    assert "the record was invalid before" in out
    assert aws.settings_record() == ({"requeuingStrategy": {"backoffJitter": 0.1}}, 2)
    code, out, err = run(capsys, "settings", "get")
    assert code == 0, err
    assert "backoffJitter: 0.1  # runtime record" in out
    assert run(capsys, "status")[0] == 0


def test_describe_answers_why_the_job_was_evicted(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a requeuing limit of 1 and a gang that never becomes whole
    assert run(capsys, "settings", "set", "requeuingStrategy.backoffLimitCount=1")[0] == 0
    deactivate(aws, "team-a/llama")

    # WHEN the data scientist asks
    code, out, err = run(capsys, "describe", "team-a/llama")

    # THEN the state, the last eviction's cause and its not-ready pods are there
    assert code == 0, err
    assert "phase      Deactivated (RequeuingLimitExceeded)" in out
    assert "attempt    2" in out
    why = out.split("Why it was last evicted:")[1].split("Evictions:")[0]
    assert "attempt 2: Deactivated / RequeuingLimitExceeded" in why
    assert "(after a readiness timeout, WaitForStart)" in why
    assert "1 of 2 pods were Ready" in why
    assert "w-1 on gpu-node-3: Pending, ContainersNotReady" in why
    evictions = out.split("Evictions:")[1].split("History:")[0]
    assert "PodsReadyTimeout/WaitForStart" in evictions
    assert "Deactivated/RequeuingLimitExceeded" in evictions
    # AND the history, oldest first, with the first attempt's unschedulable pod
    history = out.split("History:")[1]
    events = [line.split()[2] for line in history.strip().splitlines() if "Z  " in line]
    assert events == [
        "Submitted",
        "Admitted",
        "Evicted",
        "Requeued",
        "BackoffFinished",
        "Admitted",
        "Evicted",
        "Deactivated",
    ]
    assert (
        "not ready: w-1 on (unscheduled): Pending, Unschedulable: "
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu"
    ) in history
    assert "count=1 requeueAt=" in history

    # WHEN a machine asks
    code, out, _ = run(capsys, "describe", "team-a/llama", "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["phase"] == "Deactivated"
    assert doc["evictions"] == {
        "PodsReadyTimeout/WaitForStart": 1,
        "Deactivated/RequeuingLimitExceeded": 1,
    }
    evicted = [h for h in doc["history"] if h["event"] == "Evicted"]
    assert [e["detail"]["attempt"] for e in evicted] == [1, 2]
    assert evicted[0]["detail"]["notReady"][0]["reason"] == "Unschedulable"

    # AND a name without a namespace means the default namespace, as with kubectl
    aws.submit("default/solo", gang=1)
    code, out, _ = run(capsys, "describe", "solo")
    assert code == 0 and out.startswith("Workload default/solo\n")


def test_describe_of_an_unknown_workload_exits_1(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "describe", "team-a/nope")
    assert code == 1
    assert out == ""
    assert "no workload team-a/nope in cluster training" in err


def test_reactivate_returns_a_deactivated_workload_and_requests_admission(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a Deactivated workload
    assert run(capsys, "settings", "set", "requeuingStrategy.backoffLimitCount=1")[0] == 0
    deactivate(aws, "team-b/bert")
    aws.requeue_messages()

    # WHEN the administrator reactivates it
    code, out, err = run(capsys, "reactivate", "team-b/bert")

    # THEN it is Pending with its requeue count reset, and an admission pass is requested
    assert code == 0, err
    assert "team-b/bert reactivated" in out
    w = aws.store.load("team-b/bert").workload
    assert (w.phase.value, w.requeue_count, w.reason) == ("Pending", 0, "Reactivated")
    assert aws.requeue_messages() == [
        {"type": "admission", "reason": "reactivated", "workload": "team-b/bert"}
    ]
    assert [h["event"] for h in aws.store.history("team-b/bert")][-1] == "Reactivated"
    # AND the admission function (here: the driver's pass) admits it with the cluster adapter
    assert "team-b/bert" in aws.admit()
    assert aws.cluster.calls[-1] == ("admit", "team-b/bert", 3)

    # WHEN it is reactivated again while active
    code, out, err = run(capsys, "reactivate", "team-b/bert")
    # THEN nothing changes and the message says why
    assert code == 1
    assert "team-b/bert is Admitted, not Deactivated" in err
    assert aws.phase("team-b/bert") == "Admitted"

    # AND an unknown workload is named
    code, _, err = run(capsys, "reactivate", "team-b/ghost")
    assert code == 1 and "no workload team-b/ghost" in err


def test_a_quarantined_workload_is_shown_and_released(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a workload the cluster refuses to admit, quarantined after its tries
    aws.submit("team-c/refused", gang=1)
    for _ in range(MAX_EFFECT_TRIES):
        aws.cluster.fail_next = PermissionError("jobs.batch is forbidden: 403")
        aws.admit()
    assert aws.store.load("team-c/refused").quarantine is not None
    aws.requeue_messages()

    # WHEN the administrator looks
    code, out, err = run(capsys, "status")
    # THEN status and describe say it is quarantined, with the error and what to do
    assert code == 0, err
    assert "QUARANTINED: team-c/refused after 5 failed tries" in out
    assert "forbidden: 403" in out
    code, out, err = run(capsys, "describe", "team-c/refused")
    assert code == 0, err
    assert "QUARANTINED since" in out
    assert "effects waiting: Admit, StartTimer, Publish" in out
    assert "muster release team-c/refused" in out

    # WHEN the cause is fixed and the administrator releases it
    code, out, err = run(capsys, "release", "team-c/refused")
    # THEN it is no longer quarantined, and a pass is asked for that carries out its effects
    assert code == 0, err
    assert "team-c/refused released" in out
    assert aws.store.load("team-c/refused").quarantine is None
    assert aws.requeue_messages() == [
        {"type": "admission", "reason": "released", "workload": "team-c/refused"}
    ]
    aws.plane(inline_admission=True).admission_pass(["team-c/refused"])
    assert aws.cluster.calls[-1] == ("admit", "team-c/refused", 1)
    assert not aws.store.load("team-c/refused").outbox

    # AND releasing what is not quarantined is refused, naming the phase
    code, _, err = run(capsys, "release", "team-c/refused")
    assert code == 1 and "team-c/refused is not quarantined (phase Admitted)" in err


def test_status_lists_workloads_by_queue_and_phase(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN one workload Running, one Admitted and not ready, one Pending behind blockAdmission
    aws.submit("team-c/ready", gang=1, queue="default")
    aws.submit("team-c/slow", gang=2, queue="default")
    admitted = aws.admit()
    assert {"team-c/ready", "team-c/slow"} <= set(admitted)
    aws.pod("team-c/ready", "r-0", 1, ready=True, node="n1")
    assert run(capsys, "settings", "set", "blockAdmission=true")[0] == 0
    aws.submit("team-c/waiting", gang=1, queue="batch")
    aws.admit()

    # WHEN the administrator looks
    code, out, err = run(capsys, "status")

    # THEN each workload is a row with its phase, attempt and ready count
    assert code == 0, err
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line.startswith("team-c/")
    }
    assert rows["team-c/ready"][1:6] == ["default", "Running", "1", "0", "1/1"]
    assert rows["team-c/slow"][1:6] == ["default", "Admitted", "1", "0", "0/2"]
    assert rows["team-c/waiting"][1:6] == ["batch", "Pending", "0", "0", "0/1"]
    # AND who holds admission, and that blockAdmission holds the queue
    assert "Admission held by:" in out
    held = out.split("Admission held by:")[1].splitlines()[0]
    assert "team-c/slow" in held and "team-c/ready" in held
    assert "blockAdmission: no admission until team-c/slow is PodsReady" in out

    code, out, _ = run(capsys, "status", "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["cluster"] == "training"
    assert doc["blockAdmission"] is True
    assert "team-c/waiting" in [w["workload"] for w in doc["phases"]["Pending"]]
    assert doc["counts"]["Running"] >= 1
    assert doc["admission"]["blockedBy"] == "team-c/slow"


def test_status_says_why_a_pending_workload_waits(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a queue whose GPU quota is smaller than a workload's request
    assert run(capsys, "settings", "set", "queues.small.gpuQuota=4")[0] == 0
    aws.submit("team-d/big", gang=2, queue="small", gpus=8)
    aws.submit("team-d/fits", gang=1, queue="small", gpus=2)
    # WHEN the administrator looks before the admission function's next pass
    code, out, err = run(capsys, "status")
    # THEN the core's planner says who is admissible and why the other waits
    assert code == 0, err
    assert "Admissible now (the next admission pass admits): team-d/fits" in out
    assert "Waiting: team-d/big: needs 8 GPUs, queue small quota has 4 free" in out


def test_a_missing_stack_is_a_clear_error(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "status", "--stack", "NotThere")
    assert code == 1
    assert "no stack named NotThere" in err
    assert out == ""


def test_status_says_one_thing_about_a_blocker_and_counts_evictions_of_a_deactivated_workload(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN blockAdmission on, a workload admitted and never ready, nothing queued behind it,
    # and a workload deactivated after two evictions (one requeue, then the limit)
    assert run(capsys, "settings", "set", "requeuingStrategy.backoffLimitCount=1")[0] == 0
    deactivate(aws, "team-e/gone")
    assert run(capsys, "settings", "set", "blockAdmission=true")[0] == 0
    aws.submit("team-e/broken", gang=2, queue="default")
    assert "team-e/broken" in aws.admit()

    # WHEN the administrator looks
    code, out, err = run(capsys, "status")

    # THEN the blocker named as holding admission is the one blockAdmission waits for
    assert code == 0, err
    assert "team-e/broken" in out.split("Admission held by:")[1].splitlines()[0]
    assert "blockAdmission: no admission until team-e/broken is PodsReady" in out
    assert "nothing is holding it" not in out and "blocks nothing" not in out
    # AND the deactivated workload's evictions are counted, and the reset count explained
    header = next(line for line in out.splitlines() if line.startswith("WORKLOAD"))
    columns = header.split()
    row = next(line.split() for line in out.splitlines() if line.startswith("team-e/gone"))
    assert row[columns.index("PHASE")] == "Deactivated"
    assert row[columns.index("REQUEUES")] == "0"
    assert row[columns.index("EVICTIONS")] == "2"
    assert "deactivation resets it" in out


def test_a_job_and_a_pytorchjob_of_one_name_are_told_apart_by_their_keys(
    aws: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    from muster.core import Kind, WorkloadObserved

    def observe(key: str, kind: Kind) -> None:
        aws.plane().handle(
            WorkloadObserved(key, "default", 1, kind=kind, seq=1, created_at=aws.clock.now)
        )

    # GIVEN a Job and a PyTorchJob both team-k/train, and a PyTorchJob alone as team-k/ddp
    observe("team-k/train", Kind.JOB)
    observe("team-k/train@pytorchjob", Kind.PYTORCHJOB)
    observe("team-k/ddp@pytorchjob", Kind.PYTORCHJOB)
    # WHEN the administrator looks: status shows each under the key the CLI takes back
    code, out, err = run(capsys, "status")
    assert code == 0, err
    rows = {line.split()[0] for line in out.splitlines() if line.startswith("team-k/")}
    assert rows == {"team-k/train", "team-k/train@pytorchjob", "team-k/ddp@pytorchjob"}
    # THEN `namespace/name` is the Job, and the marker (in any case) the PyTorchJob
    code, out, err = run(capsys, "describe", "team-k/train")
    assert code == 0 and out.startswith("Workload team-k/train\n"), err
    code, out, err = run(capsys, "describe", "team-k/train@PyTorchJob")
    assert code == 0 and out.startswith("Workload team-k/train@pytorchjob\n"), err
    # AND a name only one other kind has finds that one
    code, out, err = run(capsys, "describe", "team-k/ddp")
    assert code == 0 and out.startswith("Workload team-k/ddp@pytorchjob\n"), err
    # AND a name two other kinds have is an error naming both
    observe("team-k/ddp@jobset", Kind.JOBSET)
    code, out, err = run(capsys, "describe", "team-k/ddp")
    assert code == 1 and out == ""
    assert "team-k/ddp names several workloads: team-k/ddp@jobset, team-k/ddp@pytorchjob" in err
