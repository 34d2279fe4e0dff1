"""Lease-based leader election (coordination.k8s.io/v1), so one of two agents sends.

The holder renews `spec.renewTime` every `retry_period`; another replica takes the
Lease over only once `renewTime + leaseDurationSeconds` has passed. Every write
carries the Lease's resourceVersion, so two replicas racing for it cannot both win
(the loser gets 409 Conflict). A leader that cannot renew within `renew_deadline`
stops sending before anyone else may take over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from muster.kube.conventions import LEASE_RESOURCE
from muster.kube.http import ApiException, KubeApi

log = logging.getLogger("muster.agent")


def micro_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaseElector:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.path = LEASE_RESOURCE.item(namespace, name)
        self.collection = LEASE_RESOURCE.collection(namespace)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.last_renewed = 0.0

    @property
    def leading(self) -> bool:
        """True while the last successful renewal is within the renew deadline."""
        return self.last_renewed > 0 and self.clock() - self.last_renewed < self.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        try:
            won = self._attempt(now)
        except ApiException as exc:
            if exc.status != 409:
                log.warning("leader election: %s %s", exc.status, exc.reason)
            won = False
        except Exception as exc:
            log.warning("leader election: %s", exc)
            won = False
        if won:
            if not self.leading:
                log.info("%s is now the leader", self.identity)
            self.last_renewed = now
        return self.leading

    def _attempt(self, now: float) -> bool:
        try:
            lease = self.api.get(self.path)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.api.create(self.collection, self._lease(now, transitions=0))
            return True
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        expires = parse_micro_time(spec.get("renewTime")) + int(
            spec.get("leaseDurationSeconds") or self.lease_duration
        )
        version = (lease.get("metadata") or {}).get("resourceVersion")
        metadata: dict[str, Any] = {"resourceVersion": version} if version else {}
        if holder == self.identity:
            self.api.merge_patch(
                self.path, {"metadata": metadata, "spec": {"renewTime": micro_time(now)}}
            )
            return True
        if holder and now < expires:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + 1
        body = self._lease(now, transitions=transitions)
        body["metadata"] = metadata
        self.api.merge_patch(self.path, body)
        log.info("took over the lease from %s", holder or "nobody")
        return True

    def _lease(self, now: float, *, transitions: int) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_duration,
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": transitions,
            },
        }
