"""Pod objects as the Kubernetes API returns them (`kubectl get pod -o json`), trimmed to
metadata, spec.nodeName and status: one per way a pod of a gang can fail to be Ready.

The status blocks follow what the kubelet and the scheduler write (condition types
and reasons, container state reasons, `lastState.terminated` with its exit code).
"""

from __future__ import annotations

from typing import Any

T0 = "2026-09-21T14:13:20Z"
T1 = "2026-09-21T14:13:25Z"


def _meta(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "team-a",
        "uid": f"uid-{name}",
        "resourceVersion": "1001",
        "creationTimestamp": T0,
        "labels": {"batch.kubernetes.io/job-name": "llama", "muster.io/queue": "default"},
    }


def _conditions(*, scheduled: bool = True, ready: bool = False, reason: str = "") -> list:
    found: list[dict[str, Any]] = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": T1},
        {"type": "Initialized", "status": "True", "lastTransitionTime": T1},
    ]
    ready_status = "True" if ready else "False"
    not_ready = {} if ready else {"reason": "ContainersNotReady"}
    found += [
        {"type": "Ready", "status": ready_status, "lastTransitionTime": T1, **not_ready},
        {"type": "ContainersReady", "status": ready_status, "lastTransitionTime": T1, **not_ready},
        {
            "type": "PodScheduled",
            "status": "True" if scheduled else "False",
            "lastTransitionTime": T0,
        }
        | ({"reason": reason} if reason else {}),
    ]
    return found


def _container(state: dict[str, Any], *, restarts: int = 0, last: dict | None = None) -> dict:
    return {
        "name": "trainer",
        "image": "registry.example.com/team-a/llama:2.1",
        "imageID": "",
        "ready": False,
        "started": "running" in state,
        "restartCount": restarts,
        "state": state,
        "lastState": {"terminated": last} if last else {},
    }


def _placed(name: str, containers: list[dict], *, phase: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": _meta(name),
        "spec": {"nodeName": "gpu-node-3", "containers": [{"name": "trainer"}]},
        "status": {
            "phase": phase,
            "conditions": _conditions(),
            "hostIP": "10.0.1.3",
            "podIP": "10.1.3.7",
            "startTime": T1,
            "containerStatuses": containers,
        },
    }


def _waiting(reason: str, message: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}


IMAGE = "registry.example.com/team-a/llama:2.1"

IMAGE_PULL_BACKOFF = _placed(
    "llama-0",
    [_container(_waiting("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"'))],
)
ERR_IMAGE_PULL = _placed(
    "llama-1",
    [
        _container(
            _waiting(
                "ErrImagePull",
                f'failed to pull and unpack image "{IMAGE}": failed to resolve reference '
                f'"{IMAGE}": {IMAGE}: not found',
            )
        )
    ],
)
INVALID_IMAGE_NAME = _placed(
    "llama-2",
    [
        _container(
            _waiting(
                "InvalidImageName",
                'Failed to apply default image tag "Registry/LLAMA:latest": couldn\'t parse '
                "image name: invalid reference format: repository name must be lowercase",
            )
        )
    ],
)
CREATE_CONTAINER_CONFIG_ERROR = _placed(
    "llama-3",
    [_container(_waiting("CreateContainerConfigError", 'secret "hf-token" not found'))],
)
CREATE_CONTAINER_ERROR = _placed(
    "llama-4",
    [
        _container(
            _waiting(
                "CreateContainerError",
                "failed to generate container spec: failed to mkdir /data: read-only file system",
            )
        )
    ],
)
CRASH_LOOP_BACKOFF = _placed(
    "llama-5",
    [
        _container(
            _waiting(
                "CrashLoopBackOff",
                "back-off 40s restarting failed container=trainer pod=llama-5_team-a(uid)",
            ),
            restarts=3,
            last={
                "exitCode": 1,
                "reason": "Error",
                "startedAt": T1,
                "finishedAt": T1,
                "containerID": "containerd://abc",
            },
        )
    ],
    phase="Running",
)
OOM_KILLED_RESTARTING = _placed(
    "llama-6",
    [
        _container(
            {"running": {"startedAt": T1}},
            restarts=4,
            last={
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": T0,
                "finishedAt": T1,
                "containerID": "containerd://def",
            },
        )
    ],
    phase="Running",
)
FAILED = {
    "metadata": _meta("llama-7"),
    "spec": {"nodeName": "gpu-node-3", "containers": [{"name": "trainer"}]},
    "status": {
        "phase": "Failed",
        "conditions": _conditions(),
        "startTime": T1,
        "containerStatuses": [
            _container(
                {
                    "terminated": {
                        "exitCode": 2,
                        "reason": "Error",
                        "startedAt": T1,
                        "finishedAt": T1,
                        "containerID": "containerd://0a1",
                    }
                }
            )
        ],
    },
}
UNSCHEDULABLE = {
    "metadata": _meta("llama-8"),
    "spec": {"containers": [{"name": "trainer"}]},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": T0,
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. "
                "preemption: 0/4 nodes are available: 4 No preemption victims found for "
                "incoming pod.",
            }
        ],
        "qosClass": "BestEffort",
    },
}
NOT_YET_SCHEDULED = {
    "metadata": _meta("llama-9"),
    "spec": {"containers": [{"name": "trainer"}]},
    "status": {"phase": "Pending", "qosClass": "BestEffort"},
}
# The kubelet of gpu-node-3 stopped posting status: the node controller marks the
# pod not Ready; the control plane learns the node is NotReady from the node's event.
ON_NOT_READY_NODE = {
    "metadata": _meta("llama-10"),
    "spec": {"nodeName": "gpu-node-3", "containers": [{"name": "trainer"}]},
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": T0},
            {"type": "Ready", "status": "False", "lastTransitionTime": T1},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": T0},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": T0},
        ],
        "containerStatuses": [_container({"running": {"startedAt": T0}})],
    },
}
STARTING_RUNNING = _placed(
    "llama-11", [_container({"running": {"startedAt": T1}})], phase="Running"
)
CONTAINER_CREATING = _placed("llama-12", [_container(_waiting("ContainerCreating", ""))])
# One restart is not yet a crash loop: a data loader can fail once on a cold cache.
RESTARTED_ONCE = _placed(
    "llama-13",
    [
        _container(
            {"running": {"startedAt": T1}},
            restarts=1,
            last={"exitCode": 1, "reason": "Error", "startedAt": T0, "finishedAt": T1},
        )
    ],
    phase="Running",
)
