"""Chunked lists (`limit`/`continue`) over real HTTP, from the client to the agent.

A small scripted API server serves a collection in pages, as the Kubernetes API
does, and answers `410 Gone` to a continue token it was told has expired.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from muster.agent.watch import KubeWatchSource, Reflector, SyncPage
from muster.kube.conventions import NODE_RESOURCE, POD_RESOURCE
from muster.kube.http import KubeApi


class PagedServer:
    """Serves `items[path]` in pages; records each request's query."""

    def __init__(self) -> None:
        self.items: dict[str, list[dict[str, Any]]] = {}
        self.version = "900"
        self.expire_once: set[str] = set()  # continue tokens answered with 410, once
        self.queries: list[dict[str, list[str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                server.queries.append(query)
                status, body = server.answer(url.path, query)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        token = query.get("continue", [""])[0]
        if token in self.expire_once:
            self.expire_once.discard(token)
            return 410, {"kind": "Status", "code": 410, "reason": "Expired"}
        items = self.items.get(path, [])
        start = int(token or 0)
        limit = int(query.get("limit", [len(items) or 1])[0])
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": self.version}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return 200, {"kind": "List", "metadata": meta, "items": page}


@pytest.fixture()
def server() -> Iterator[PagedServer]:
    s = PagedServer()
    try:
        yield s
    finally:
        s.httpd.shutdown()


def pods(n: int) -> list[dict[str, Any]]:
    return [
        {"metadata": {"name": f"p{i:05d}", "namespace": "ml", "uid": f"u{i}"}} for i in range(n)
    ]


def test_list_pages_follows_continue_with_the_limit(server: PagedServer) -> None:
    server.items["/api/v1/pods"] = pods(1_234)
    api = KubeApi.for_host(server.url)
    pages = list(api.list_pages("/api/v1/pods", label_selector="a=b", limit=500))
    assert [len(p["items"]) for p in pages] == [500, 500, 234]
    assert [q.get("continue") for q in server.queries] == [None, ["500"], ["1000"]]
    assert all(q["limit"] == ["500"] and q["labelSelector"] == ["a=b"] for q in server.queries)


def _reflect(server: PagedServer, resource: Any) -> tuple[Reflector, list[SyncPage]]:
    delivered: list[SyncPage] = []

    def deliver(message: Any) -> None:
        assert isinstance(message, SyncPage)
        delivered.append(message)

    source = KubeWatchSource(KubeApi.for_host(server.url))
    reflector = Reflector(resource, source, deliver, clock=lambda: 0.0, sleep=lambda s: None)
    return reflector, delivered


def test_the_reflector_hands_over_pages_never_the_whole_list(server: PagedServer) -> None:
    # 50,000 pods and 2,000 nodes: no message holds more than one page.
    server.items["/api/v1/pods"] = pods(50_000)
    server.items["/api/v1/nodes"] = [{"metadata": {"name": f"n{i}"}} for i in range(2_000)]
    for resource, total in ((POD_RESOURCE, 50_000), (NODE_RESOURCE, 2_000)):
        reflector, delivered = _reflect(server, resource)
        reflector._list()
        assert max(len(p.items) for p in delivered) <= reflector.page
        assert sum(len(p.items) for p in delivered) == total
        assert [p.first for p in delivered].count(True) == 1 and delivered[-1].last
        assert {p.resource_version for p in delivered} == {"900"}
        assert reflector.resource_version == "900"


def test_an_expired_continue_token_starts_the_list_again(server: PagedServer) -> None:
    server.items["/api/v1/pods"] = pods(1_200)
    server.expire_once.add("1000")
    reflector, delivered = _reflect(server, POD_RESOURCE)
    reflector._list()
    # Two pages, then 410 on the third: the list starts over from its first page.
    assert [(p.first, p.last, len(p.items)) for p in delivered] == [
        (True, False, 500),
        (False, False, 500),
        (True, False, 500),
        (False, False, 500),
        (False, True, 200),
    ]
    assert reflector.stats["list_restarts"] == 1
    assert [q.get("continue") for q in server.queries] == [
        None,
        ["500"],
        ["1000"],
        None,
        ["500"],
        ["1000"],
    ]
