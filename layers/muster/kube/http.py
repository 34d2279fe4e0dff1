"""JSON over HTTPS to the Kubernetes API, on urllib3 (which botocore already brings).

Muster works on plain JSON for every kind (Job, JobSet, PyTorchJob, pods, nodes,
leases, Events), so a small client is all it needs: one code path for built-in
and custom resources, patch bodies exactly as they go on the wire, and nothing
to import on a Lambda's cold start but urllib3.

TLS: with `ca_file` (the cluster's CA from `eks:DescribeCluster`) every HTTPS
connection is verified against that CA alone, not the system store, and the
server's certificate must name the API endpoint's host (urllib3's
`cert_reqs="CERT_REQUIRED"` with `ca_certs`, and its hostname check, which is on
whenever verification is). Without `ca_file` the system's trust store verifies
the server; only `verify=False`, which nothing in the control plane passes,
turns verification off.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import urllib3

MERGE_PATCH = "application/merge-patch+json"

Authorization = Callable[[], str | None]
"""The `Authorization` header's value for the next request (None: none sent)."""


class ApiException(Exception):
    """The API server answered outside 2xx: its status, reason and body (a Status)."""

    def __init__(
        self,
        status: int = 0,
        reason: str | None = None,
        body: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"({status}) {reason}" + (f": {body}" if body else ""))
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = dict(headers or {})


def bearer(token: str | Callable[[], str] | None) -> Authorization:
    """An `Authorization` source from a token or a token source (a `TokenCache.token`)."""
    if token is None:
        return lambda: None
    if isinstance(token, str):
        header = f"Bearer {token}"
        return lambda: header
    source = token
    return lambda: f"Bearer {source()}"


class KubeApi:
    """A small JSON client for the Kubernetes API; raises `ApiException` on non-2xx.

    It never retries on its own: urllib3's retries are off, so a refused
    connection or a timeout reaches the caller at once, and the one retry policy
    is the caller's (the adapter's bounded backoff, the agent's reflector).
    """

    def __init__(
        self,
        host: str,
        *,
        authorization: Authorization = lambda: None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        verify: bool = True,
        request_timeout: float = 10.0,
        watch_grace: float = 30.0,
        maxsize: int = 8,
    ) -> None:
        self.host = host.rstrip("/")
        self.authorization = authorization
        self.ca_file = ca_file
        self.request_timeout = request_timeout
        # How long past its server-side timeout a quiet watch may stay open.
        self.watch_grace = watch_grace
        tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE"}
        if verify and ca_file:
            tls["ca_certs"] = ca_file  # the cluster's own CA, and nothing else
        if cert_file:
            tls["cert_file"] = cert_file
            tls["key_file"] = key_file
        self.pool = urllib3.PoolManager(maxsize=maxsize, retries=False, **tls)

    @classmethod
    def for_host(
        cls, host: str, *, token: str | Callable[[], str] | None = None, **kwargs: Any
    ) -> KubeApi:
        """A client for an API server at `host` (tests, port-forwards)."""
        return cls(host, authorization=bearer(token), **kwargs)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        authorization = self.authorization()
        if authorization:
            headers["Authorization"] = authorization
        url = self.host + path
        if query:
            url += "?" + urlencode([(k, _query_value(v)) for k, v in query])
        seconds = timeout if timeout is not None else self.request_timeout
        connect, read = seconds if isinstance(seconds, tuple) else (seconds, seconds)
        response = self.pool.request(
            method,
            url,
            body=json.dumps(body).encode() if body is not None else None,
            headers=headers,
            timeout=urllib3.Timeout(connect=connect, read=read),
            preload_content=not stream,
            redirect=False,
        )
        if not 200 <= response.status <= 299:
            data = response.data.decode("utf-8", "replace") if response.data else None
            response.release_conn()
            raise ApiException(response.status, response.reason, data, response.headers)
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        raw = self._send(method, path, **kwargs).data
        return json.loads(raw) if raw else {}

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        """One list request; with `limit`, one page of at most that many items, whose
        `metadata.continue` (if any) asks for the next."""
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if limit:
            query.append(("limit", limit))
        if continue_token:
            query.append(("continue", continue_token))
        return self.request("GET", path, query=query)

    def list_pages(
        self, path: str, *, label_selector: str | None = None, limit: int = 500
    ) -> Iterator[dict[str, Any]]:
        """A collection in pages of at most `limit` items (Kubernetes' chunked list), so
        no more than one page is held at once. Every page is of the first one's
        resourceVersion; a continue token that expired meanwhile raises the server's
        `410 Gone` (`ApiException`), and the caller lists again from the start."""
        token: str | None = None
        while True:
            page = self.list(path, label_selector=label_selector, limit=limit, continue_token=token)
            yield page
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body=dict(body), content_type=MERGE_PATCH)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body=dict(body), content_type="application/json")

    def delete(self, path: str) -> dict[str, Any]:
        return self.request("DELETE", path)

    def watch(
        self,
        path: str,
        *,
        resource_version: str | None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[dict[str, Any]]:
        """The raw watch events ({"type", "object"}) of a collection, one per line."""
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        # The read timeout outlives the server-side timeout so the server ends the stream.
        response = self._send(
            "GET",
            path,
            query=query,
            timeout=(self.request_timeout, timeout_seconds + self.watch_grace),
            stream=True,
        )
        try:
            buffer = b""
            for chunk in response.stream(amt=65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip():
                yield json.loads(buffer)
        finally:
            response.release_conn()


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
