"""List-then-watch for one resource, surviving the real world.

A `Reflector` lists a resource in pages (`limit`/`continue`, so that 50,000 pods
are never held at once), hands each page to the agent as part of a full sync, then
watches from the list's resourceVersion. A continue token that expired mid-list
(`410 Gone`) starts the list again from its first page. A stream that ends is resumed from the
last resourceVersion seen (bookmarks included); `410 Gone` (the version is too
old) triggers a relist, which re-sends the current state; every `resync` it
relists anyway, which heals anything lost; API errors back off exponentially.
The source is a small protocol so that tests feed scripted streams.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import urllib3

from muster.kube.conventions import Resource
from muster.kube.http import ApiException, KubeApi
from muster.retry import Backoff

log = logging.getLogger("muster.agent")


LIST_PAGE = 500
"""Items per list request (the client-go reflector's page size)."""
MAX_LIST_RESTARTS = 3


Items = list[dict[str, Any]]


class WatchExpired(Exception):
    """410 Gone: the resourceVersion is too old to resume from; relist."""


class ListExpired(Exception):
    """410 Gone on a continue token: the list's snapshot was compacted; list again."""


class WatchSource(Protocol):
    def list(
        self, resource: Resource, label_selector: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        """(items, the list's resourceVersion)."""
        ...

    def watch(
        self, resource: Resource, resource_version: str, label_selector: str | None, timeout: int
    ) -> Iterator[dict[str, Any]]:
        """Raw watch events ({"type", "object"}); raises `WatchExpired` on 410."""
        ...


class KubeWatchSource:
    """`WatchSource` over the Kubernetes API."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def list(
        self, resource: Resource, label_selector: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        listing = self.api.list(resource.collection(), label_selector=label_selector)
        version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        return list(listing.get("items") or []), version

    def list_pages(
        self, resource: Resource, label_selector: str | None, limit: int
    ) -> Iterator[tuple[Items, str, bool]]:
        """(items, the list's resourceVersion, whether it is the last page), page by page;
        raises `ListExpired` when a continue token expired."""
        version = ""
        pages = self.api.list_pages(
            resource.collection(), label_selector=label_selector, limit=limit
        )
        first = True
        try:
            for page in pages:
                meta = page.get("metadata") or {}
                if first:
                    version = str(meta.get("resourceVersion") or "")
                yield list(page.get("items") or []), version, not meta.get("continue")
                first = False
        except ApiException as exc:
            if exc.status == 410 and not first:
                raise ListExpired() from exc
            raise

    def watch(
        self, resource: Resource, resource_version: str, label_selector: str | None, timeout: int
    ) -> Iterator[dict[str, Any]]:
        try:
            yield from self.api.watch(
                resource.collection(),
                resource_version=resource_version,
                label_selector=label_selector,
                timeout_seconds=timeout,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired() from exc
            raise
        except urllib3.exceptions.ReadTimeoutError:
            # The server kept a quiet stream open past its timeout: resume as if it ended.
            return


@dataclass(frozen=True, slots=True)
class Sync:
    """A full listing: everything that exists now (anything else known is gone)."""

    resource: Resource
    items: list[dict[str, Any]]
    resource_version: str


@dataclass(frozen=True, slots=True)
class SyncPage:
    """One page of a full listing: `first` starts it (anything gathered of an earlier,
    unfinished listing is dropped), `last` ends it (what was not listed is gone)."""

    resource: Resource
    items: list[dict[str, Any]]
    resource_version: str
    first: bool
    last: bool


@dataclass(frozen=True, slots=True)
class Change:
    """One watch event: ADDED, MODIFIED or DELETED."""

    resource: Resource
    type: str
    obj: dict[str, Any]


class Reflector:
    """Keeps one resource flowing to `deliver` as `Sync` and `Change` messages."""

    def __init__(
        self,
        resource: Resource,
        source: WatchSource,
        deliver: Callable[[Sync | SyncPage | Change], None],
        *,
        label_selector: str | None = None,
        resync: float = 600.0,
        watch_timeout: int = 300,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.resource = resource
        self.source = source
        self.deliver = deliver
        self.label_selector = label_selector
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.max_delay = max_delay
        self.clock = clock
        self.sleep = sleep
        self.resource_version: str | None = None
        self.next_resync = 0.0
        self.backoff = Backoff(base_delay, max_delay)
        self.missing = False  # the resource is not served (its CRD is not installed)
        self.stats = {"lists": 0, "watches": 0, "expired": 0, "errors": 0, "list_restarts": 0}
        self.page = LIST_PAGE

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step(stop)

    def step(self, stop: threading.Event | None = None) -> None:
        """One list-or-watch round; errors are logged and backed off, never raised."""
        try:
            if self.resource_version is None or self.clock() >= self.next_resync:
                self._list()
            self._watch(stop)
            self.backoff.reset()
            self.missing = False
        except WatchExpired:
            self.stats["expired"] += 1
            log.info(
                "%s: resourceVersion %s expired; relisting",
                self.resource.plural,
                self.resource_version,
            )
            self.resource_version = None
        except Exception as exc:
            self.stats["errors"] += 1
            if isinstance(exc, ApiException) and exc.status == 404 and self.resource.group:
                # An optional CRD (JobSet, PyTorchJob): say so once, look again now and then.
                if not self.missing:
                    log.warning(
                        "%s: not served by this cluster (CRD not installed?); checking every %.0fs",
                        self.resource.plural,
                        self.max_delay,
                    )
                self.missing = True
                self.sleep(self.max_delay)
                return
            delay = self.backoff.next()
            log.warning("%s: watch failed, retrying in %.1fs: %s", self.resource.plural, delay, exc)
            self.sleep(delay)

    def _list(self) -> None:
        pages = getattr(self.source, "list_pages", None)
        if pages is None:  # a source without chunked lists: one page
            items, version = self.source.list(self.resource, self.label_selector)
            self.deliver(Sync(self.resource, items, version))
        else:
            version = self._list_in_pages(pages)
        self.stats["lists"] += 1
        self.resource_version = version
        self.next_resync = self.clock() + self.resync

    def _list_in_pages(self, pages: Callable[..., Iterator[tuple[list[Any], str, bool]]]) -> str:
        """Every page to the agent; an expired continue token starts the list again."""
        for restart in range(MAX_LIST_RESTARTS + 1):
            try:
                version, first = "", True
                for items, version, last in pages(self.resource, self.label_selector, self.page):
                    self.deliver(SyncPage(self.resource, items, version, first, last))
                    first = False
                return version
            except ListExpired:
                self.stats["list_restarts"] += 1
                log.info(
                    "%s: the list's continue token expired; listing again (%d)",
                    self.resource.plural,
                    restart + 1,
                )
        raise RuntimeError(f"{self.resource.plural}: list kept expiring")

    def _watch(self, stop: threading.Event | None) -> None:
        self.stats["watches"] += 1
        assert self.resource_version is not None
        for event in self.source.watch(
            self.resource, self.resource_version, self.label_selector, self.watch_timeout
        ):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise WatchExpired()
                raise RuntimeError(f"watch error: {obj.get('code')} {obj.get('message')}")
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.deliver(Change(self.resource, kind, obj))
            if (stop is not None and stop.is_set()) or self.clock() >= self.next_resync:
                return
