"""Lease-based leader election against the emulated API server."""

from __future__ import annotations

from typing import Any

import pytest
from muster.agent.leader import LeaseElector
from muster.kube.http import KubeApi

LEASES = "coordination.k8s.io/v1/leases"


@pytest.fixture()
def api(apiserver: Any) -> KubeApi:
    apiserver.handler.resources[LEASES] = {"kind": "Lease", "namespaced": True}
    return KubeApi.for_host(apiserver.url)


def test_one_of_two_replicas_leads_and_the_other_takes_over_when_it_stops(
    apiserver: Any, api: KubeApi
) -> None:
    now = [1000.0]
    a = LeaseElector(
        api, namespace="muster-system", name="muster-agent", identity="a", clock=lambda: now[0]
    )
    b = LeaseElector(
        api, namespace="muster-system", name="muster-agent", identity="b", clock=lambda: now[0]
    )
    # GIVEN a creates the Lease
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    lease = apiserver.handler.objects[LEASES, "muster-system", "muster-agent"]
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseDurationSeconds"]) == ("a", 15)
    # WHEN a keeps renewing, b stays a follower
    now[0] += 10
    assert a.try_acquire_or_renew() is True
    now[0] += 10
    assert b.try_acquire_or_renew() is False
    # WHEN a stops renewing for longer than the lease duration
    now[0] += 16
    assert a.leading is False  # a stops sending before b may take over
    assert b.try_acquire_or_renew() is True
    lease = apiserver.handler.objects[LEASES, "muster-system", "muster-agent"]
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)
    # THEN a, coming back, does not grab it
    assert a.try_acquire_or_renew() is False


def test_a_leader_that_cannot_reach_the_api_steps_down(api: KubeApi) -> None:
    now = [1000.0]
    a = LeaseElector(
        api, namespace="muster-system", name="muster-agent", identity="a", clock=lambda: now[0]
    )
    assert a.try_acquire_or_renew()
    a.api = KubeApi.for_host("http://127.0.0.1:9", request_timeout=0.5)
    now[0] += 5
    assert a.try_acquire_or_renew() is True  # still inside its renew deadline
    now[0] += 6
    assert a.try_acquire_or_renew() is False
