"""`ClusterActions` for Kubernetes: admit, evict and record on an EKS cluster.

Jobs, JobSets and PyTorchJobs are held and withdrawn by their `suspend` flag (their
controllers create and remove the pods); a plain pod group is held by Muster's
scheduling gate on each pod and withdrawn by deleting its pods.

Error handling, so that nothing is left half-done without the core knowing:
- 404 on the workload: `WorkloadGone` (the core marks it Finished).
- 409 conflict: read the object again and retry the change on the fresh copy.
- 429, 5xx, timeouts, connection errors: bounded backoff, then `ClusterUnavailable`,
  which the caller leaves to its queue's retry (every action is idempotent).
- Other 4xx (403 Forbidden, 422 Invalid): `ClusterActionError`, which retrying
  cannot mend (fix RBAC or the workload).

Fencing: a late, redelivered admit must not release a workload that a newer
eviction withdrew, and a late eviction must not withdraw a newer attempt. The
authority is the control plane's own record (`records`, a consistent read of the
workload's committed state), consulted after reading the object and before a
patch conditional on that read's resourceVersion: a decision is committed to the
record before its effects run, so whichever of two racing writers patches second
has already seen the other's record. `muster.io/admitted-attempt` and
`muster.io/evicted-attempt` are still written, as a view for `kubectl` users; the
workload's owner can edit annotations, so they never decide.

The suspend flag (or the scheduling gate) is patched on its own, and the view
afterwards in a patch of its own, best effort: an owner who filled the object's
annotations to the API server's 256 KiB limit makes any patch that adds one
fail with 422, which must never keep a workload from being withdrawn. Muster's
view on the workload (`record`) is refused the same way, and the control plane
treats it as best effort too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import urllib3

from muster import contract
from muster.core.fencing import still_current
from muster.core.model import Admit, Evict, Kind, LogEvent, Workload
from muster.core.pod_groups import ListedMember, gpus_each, pods_to_release
from muster.core.printable import printable
from muster.core.topology import pinned_node
from muster.kube.conventions import (
    ADMITTED_ATTEMPT_ANNOTATION,
    ANNOTATION_PREFIX,
    EVENT_RESOURCE,
    EVICTED_ATTEMPT_ANNOTATION,
    PACKED_NODE_ANNOTATION,
    POD_GROUP_LABEL,
    POD_RESOURCE,
    RESOURCES,
    SCHEDULING_GATE,
    split_key,
)
from muster.kube.events import describe, event_body
from muster.kube.http import ApiException, KubeApi, bearer
from muster.kube.placement import admission_placement, pod_placement
from muster.kube.resources import QuantityError, pod_gpus
from muster.retry import Backoff, Refused, Transient, retry
from muster.runtime.ports import WorkloadGone

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient

log = logging.getLogger("muster.kube")

T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})

MAX_ANNOUNCED_PODS = 32  # Events per lifecycle event on a pod group
MAX_RECORDED_PODS = 32  # pods of a group that carry Muster's view (the first by name)

RecordReader = Callable[[str], Workload | None]
"""The control plane's committed record of a workload (None: not known)."""


class ClusterActionError(Refused):
    """The API server refused the change for a reason a retry cannot mend."""


class ClusterUnavailable(Transient):
    """The API server did not answer usefully after bounded retries; retry later."""


class _Conflict(Exception):
    pass


class _Transient(Exception):
    """A failure worth another try: throttled, a server error, a timeout, no connection."""


class KubernetesCluster:
    """`muster.runtime.ports.ClusterActions` over the Kubernetes API."""

    def __init__(
        self,
        api: KubeApi,
        *,
        records: RecordReader,
        attempts: int = 4,
        base_delay: float = 0.2,
        max_delay: float = 2.0,
        conflict_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.records = records
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.conflict_attempts = conflict_attempts
        self.sleep = sleep

    # ------------------------------------------------------------------ the port

    def admit(self, effect: Admit) -> None:
        if effect.kind is Kind.POD_GROUP:
            self._ungate_pod_group(effect)
        else:
            self._set_suspended(effect, suspend=False)

    def evict(self, effect: Evict) -> None:
        if effect.kind is Kind.POD_GROUP:
            self._delete_pod_group(effect)
        else:
            self._set_suspended(effect, suspend=True)

    def record(self, workload: str, kind: Kind, view: Mapping[str, str]) -> None:
        """Write `view` as `muster.io/<key>` annotations; an empty value removes one.

        A pod group has no object of its own: the view goes on its first
        `MAX_RECORDED_PODS` pods by name, so the calls do not grow with the gang.
        """
        annotations: dict[str, str | None] = {
            (key if "/" in key else ANNOTATION_PREFIX + key): (value or None)
            for key, value in view.items()
        }
        body = {"metadata": {"annotations": annotations}}
        namespace, name = split_key(workload)
        if kind is Kind.POD_GROUP:
            for pod in self._pod_group(workload)[:MAX_RECORDED_PODS]:
                path = POD_RESOURCE.item(namespace, pod["metadata"]["name"])
                # One pod of a group vanishing is not the group vanishing.
                with contextlib.suppress(WorkloadGone):
                    self._call(workload, partial(self.api.merge_patch, path, body))
            return
        path = RESOURCES[kind].item(namespace, name)
        self._call(workload, partial(self.api.merge_patch, path, body))

    def announce(
        self,
        workload: str,
        kind: Kind,
        event: LogEvent,
        detail: Mapping[str, Any],
        *,
        key: str,
        at: float,
    ) -> None:
        """A Kubernetes Event on the workload (each pod, for a pod group).

        The Event is sent once, without retries: it is a courtesy and must not
        hold up the decision that caused it. The object is read first for its uid,
        which `kubectl describe` uses to find its Events; a pod group's Events go
        on the pods that still exist.
        """
        shown = describe(event, detail, workload)
        if shown is None:
            return
        namespace, name = split_key(workload)
        if kind is Kind.POD_GROUP:
            targets = [
                (POD_RESOURCE, p["metadata"])
                for p in self._pod_group(workload)[:MAX_ANNOUNCED_PODS]
            ]
        else:
            resource = RESOURCES[kind]
            obj = self._call_once(workload, partial(self.api.get, resource.item(namespace, name)))
            targets = [(resource, obj.get("metadata") or {})]
        for resource, meta in targets:
            involved = {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            }
            body = event_body(involved=involved, event=shown, key=key, at=at)
            try:
                self.api.create(EVENT_RESOURCE.collection(namespace), body)
            except ApiException as exc:
                if exc.status != 409:  # 409 AlreadyExists: announced by an earlier try
                    raise ClusterActionError(
                        f"{workload}: Event refused ({exc.status} {exc.reason}): {_message(exc)}"
                    ) from exc

    def _call_once(self, workload: str, action: Callable[[], T]) -> T:
        try:
            return action()
        except ApiException as exc:
            if exc.status == 404:
                raise WorkloadGone(workload) from exc
            raise ClusterActionError(
                f"{workload}: the API server refused ({exc.status} {exc.reason}): {_message(exc)}"
            ) from exc

    # ------------------------------------------------------------------ suspend kinds

    def _stale(self, effect: Admit | Evict) -> bool:
        """Ask the record (never the object's annotations) whether `effect` still stands."""
        record = self.records(effect.workload)
        if still_current(effect, record):
            return False
        log.warning(
            "skipping stale %s of %s attempt %d (the record holds attempt %s, %s)",
            "admission" if isinstance(effect, Admit) else "eviction",
            effect.workload,
            effect.attempt,
            record.attempt if record else "none",
            record.phase.value if record else "no record",
        )
        return True

    def _set_suspended(self, effect: Admit | Evict, *, suspend: bool) -> None:
        workload, attempt = effect.workload, effect.attempt
        resource = RESOURCES[effect.kind]
        namespace, name = split_key(workload)
        path = resource.item(namespace, name)
        mark = EVICTED_ATTEMPT_ANNOTATION if suspend else ADMITTED_ATTEMPT_ANNOTATION

        def change() -> None:
            obj = self._call(workload, partial(self.api.get, path))
            found = obj.get("metadata", {}).get("uid")
            if effect.uid and found and found != effect.uid:
                raise WorkloadGone(workload)  # another object now has this name
            # The record is read after the object: a writer that committed a newer
            # decision before our read of the object is seen here; one that commits
            # later changes the object, and our conditional patch then conflicts.
            if self._stale(effect):
                return
            current = _dig(obj.get("spec") or {}, resource.suspend_path)
            if bool(current) is suspend:
                return  # already done (a redelivered effect)
            body: dict[str, Any] = {"spec": _nest(resource.suspend_path, suspend), "metadata": {}}
            if isinstance(effect, Admit):
                # Its pods kept in its domain, or on its node (`kube.placement`).
                spec, notes = admission_placement(effect.kind, obj, effect.domain, effect.topology)
                body["spec"] |= spec
                if notes:
                    body["metadata"]["annotations"] = notes
            version = obj.get("metadata", {}).get("resourceVersion")
            if version:  # optimistic concurrency: 409 if changed
                body["metadata"]["resourceVersion"] = version
            if not body["metadata"]:
                del body["metadata"]
            self._call(workload, partial(self.api.merge_patch, path, body), conflict=True)
            log.info("%s %s attempt %d", "suspended" if suspend else "released", workload, attempt)
            self._mark(workload, path, mark, attempt)

        self._on_fresh_reads(workload, change)

    def _mark(self, workload: str, path: str, mark: str, attempt: int) -> None:
        """The attempt admitted or evicted, as a view on the object: best effort, after
        the change itself, so that a refused annotation never holds the change back."""
        body = {"metadata": {"annotations": {mark: str(attempt)}}}
        try:
            self._call(workload, partial(self.api.merge_patch, path, body))
        except (ClusterActionError, ClusterUnavailable, WorkloadGone) as exc:
            log.warning("could not mark %s with %s=%d: %s", path, mark, attempt, exc)

    def _on_fresh_reads(self, what: str, change: Callable[[], None]) -> None:
        """`change` (a read, then a patch conditional on it) again after each 409."""
        try:
            retry(
                change,
                attempts=self.conflict_attempts,
                retry_on=_Conflict,
                on_retry=lambda _try, _error: log.info(
                    "conflict on %s; retrying on a fresh read", what
                ),
            )
        except _Conflict:
            raise ClusterUnavailable(
                f"{what}: still conflicting after {self.conflict_attempts} reads"
            ) from None

    # ------------------------------------------------------------------ pod groups

    def _pod_group(self, workload: str) -> list[dict[str, Any]]:
        namespace, name = split_key(workload)
        listing = self._call(
            workload,
            lambda: self.api.list(
                POD_RESOURCE.collection(namespace), label_selector=f"{POD_GROUP_LABEL}={name}"
            ),
        )
        pods = [
            p
            for p in listing.get("items") or []
            # A defence for API servers (and test doubles) that ignore the selector.
            if (p.get("metadata", {}).get("labels") or {}).get(POD_GROUP_LABEL) == name
        ]
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def _ungate_pod_group(self, effect: Admit) -> None:
        workload = effect.workload
        namespace, _ = split_key(workload)
        members = self._pod_group(workload)
        if not members:
            raise WorkloadGone(workload)
        if self._stale(effect):
            return
        # Terminating pods are being replaced by their controller: the group is not
        # gone, and its replacements are released when they are observed. No more
        # pods are released than the gang size admitted (the core's rule).
        charge = effect if effect.size else self._admitted_charge(effect)
        listed = (_listed_member(p) for p in members)
        chosen = set(pods_to_release(charge.size, listed, gpus_each(charge)))
        for index, pod in enumerate(members):
            if pod["metadata"]["name"] not in chosen:
                continue
            path = POD_RESOURCE.item(namespace, pod["metadata"]["name"])
            with contextlib.suppress(WorkloadGone):
                # The view goes on the first pods only, as `record`'s does.
                self._ungate_pod(effect, path, pod, mark=index < MAX_RECORDED_PODS)

    def _admitted_charge(self, effect: Admit) -> Admit:
        """The release with the charge of the committed record, for one written before
        the effect carried it (none released without a record)."""
        record = self.records(effect.workload)
        return Admit.of(record, effect.attempt) if record is not None else effect

    def _ungate_pod(
        self, effect: Admit, path: str, pod: dict[str, Any], *, mark: bool = True
    ) -> None:
        workload, attempt = effect.workload, effect.attempt
        first = [pod]  # the listed pod (the record was asked after the listing)

        def change() -> None:
            if first:
                current = first.pop()
            else:
                # After a conflict: a fresh read, then the record again, since an
                # eviction may have been committed meanwhile (and this pod be its
                # group's replacement, which must keep its gate).
                current = self._call(workload, partial(self.api.get, path))
                if self._stale(effect):
                    return
            gates = (current.get("spec") or {}).get("schedulingGates") or []
            if not any(g.get("name") == SCHEDULING_GATE for g in gates):
                return  # released already
            # Scheduling gates can only be removed; keep any other controller's gates.
            remaining = [g for g in gates if g.get("name") != SCHEDULING_GATE]
            # Its domain's labels added while it is gated (`kube.placement`).
            body: dict[str, Any] = {
                "spec": {"schedulingGates": remaining} | pod_placement(effect.domain),
                "metadata": {},
            }
            node = pinned_node(effect.domain)
            if node:  # packed onto one node (`kube.placement`)
                body["metadata"]["annotations"] = {PACKED_NODE_ANNOTATION: node}
            version = current["metadata"].get("resourceVersion")
            if version:
                body["metadata"]["resourceVersion"] = version
            if not body["metadata"]:
                del body["metadata"]
            self._call(workload, partial(self.api.merge_patch, path, body), conflict=True)
            if mark:
                self._mark(workload, path, ADMITTED_ATTEMPT_ANNOTATION, attempt)

        self._on_fresh_reads(path, change)

    def _delete_pod_group(self, effect: Evict) -> None:
        workload, attempt = effect.workload, effect.attempt
        namespace, _ = split_key(workload)
        pods = self._pod_group(workload)
        if self._stale(effect):
            return
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            path = POD_RESOURCE.item(namespace, pod["metadata"]["name"])
            with contextlib.suppress(WorkloadGone):
                self._call(workload, partial(self.api.delete, path))
        log.info("deleted the pods of %s attempt %d", workload, attempt)

    # ------------------------------------------------------------------ errors

    def _call(self, workload: str, action: Callable[[], T], *, conflict: bool = False) -> T:
        """`action`, tried again on transient failures with a capped backoff."""

        def once() -> T:
            try:
                return action()
            except ApiException as exc:
                status = exc.status or 0
                if status == 404:
                    raise WorkloadGone(workload) from exc
                if status == 409 and conflict:
                    raise _Conflict() from exc
                if status not in TRANSIENT_STATUSES:
                    raise ClusterActionError(
                        f"{workload}: the API server refused ({status} {exc.reason}): "
                        f"{_message(exc)}"
                    ) from exc
                raise _Transient(str(exc)) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise _Transient(str(exc)) from exc

        try:
            return retry(
                once,
                attempts=self.attempts,
                retry_on=_Transient,
                backoff=Backoff(self.base_delay, self.max_delay),
                sleep=self.sleep,
                on_retry=lambda n, error: log.warning(
                    "transient error on %s (try %d): %s", workload, n, error.__cause__
                ),
            )
        except _Transient as exc:
            error = exc.__cause__
            raise ClusterUnavailable(
                f"{workload}: API server unavailable after {self.attempts} tries: {error}"
            ) from error


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    body: Any = value
    for key in reversed(path):
        body = {key: body}
    return body


def _listed_member(pod: Mapping[str, Any]) -> ListedMember:
    """A listed pod of a group as the release rule reads it."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    phase = (pod.get("status") or {}).get("phase")
    try:
        gpus: int | None = pod_gpus(pod)
    except QuantityError:
        gpus = None
    return ListedMember(
        name=pod["metadata"]["name"],
        gated=any(g.get("name") == SCHEDULING_GATE for g in gates),
        ended=bool(pod["metadata"].get("deletionTimestamp")) or phase in ("Succeeded", "Failed"),
        gpus=gpus,
    )


def _message(exc: ApiException) -> str:
    """The API server's message, escaped: it may quote the object, which is tenant text
    (an annotation, a label), and it reaches quarantine errors and `muster status`."""
    try:
        text = str(json.loads(exc.body or "").get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        text = str(exc.body)
    return printable(text)


# --------------------------------------------------------------------------- factories

_CACHE: dict[tuple[str, str], KubernetesCluster] = {}
_CACHE_LOCK = threading.Lock()


def for_cluster(
    name: str,
    *,
    records: RecordReader,
    region: str | None = None,
    session: Any = None,
    eks_client: EKSClient | None = None,
    clock: Callable[[], float] = time.time,
) -> KubernetesCluster:
    """The adapter for EKS cluster `name`, authenticated with the standard AWS chain.

    Cached per (cluster, region) for the life of the process, so a warm Lambda
    reuses its connection pool and token; `records` is the fencing authority.
    """
    import boto3

    from muster.botocore_config import BOTOCORE_RETRIES
    from muster.kube.auth import TokenCache, describe_cluster, eks_token

    session = session or boto3.Session(region_name=region)
    region = region or session.region_name
    if not region:
        raise ValueError("region: no AWS region configured (set AWS_REGION)")
    key = (name, region)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE[key].records = records
            return _CACHE[key]
        endpoint = describe_cluster(
            eks_client or session.client("eks", region_name=region, config=BOTOCORE_RETRIES), name
        )
        tokens = TokenCache(lambda: eks_token(session, name, region), clock=clock)
        # TLS is verified against the cluster's own CA (DescribeCluster's
        # certificateAuthority), hostname included: see `muster.kube.http`.
        api = KubeApi(
            endpoint.endpoint, authorization=bearer(tokens.token), ca_file=endpoint.ca_file
        )
        adapter = KubernetesCluster(api, records=records)
        _CACHE[key] = adapter
        return adapter


def from_environment(
    environ: Mapping[str, str] | None = None, *, records: RecordReader
) -> KubernetesCluster:
    """The adapter the Lambdas use: cluster from `MUSTER_CLUSTER_NAME`, fenced by `records`.

    `MUSTER_KUBE_HOST` (optional) points straight at an API server instead of asking
    EKS (local runs and tests); `MUSTER_KUBE_TOKEN` is then its bearer token.
    """
    env = os.environ if environ is None else environ
    host = env.get("MUSTER_KUBE_HOST")
    if host:
        return KubernetesCluster(
            KubeApi.for_host(host, token=env.get("MUSTER_KUBE_TOKEN")), records=records
        )
    name = env.get(contract.ENV_CLUSTER_NAME)
    if not name:
        raise ValueError(f"{contract.ENV_CLUSTER_NAME}: required (the EKS cluster's name)")
    return for_cluster(
        name, records=records, region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    )
