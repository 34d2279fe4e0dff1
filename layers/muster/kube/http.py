"""JSON over the official kubernetes client's HTTP stack (auth, TLS, connection pool).

Muster works on plain JSON for every kind (Job, JobSet, PyTorchJob, pods, nodes,
leases), so it uses `kubernetes.client.ApiClient` for transport and leaves the
generated model classes aside: one code path for built-in and custom resources,
and patch bodies that are exactly what goes on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes import client as k8s

MERGE_PATCH = "application/merge-patch+json"

ApiException = k8s.ApiException


class KubeApi:
    """A small JSON client for the Kubernetes API; raises `ApiException` on non-2xx."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        request_timeout: float = 10.0,
        watch_grace: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        # How long past its server-side timeout a quiet watch may stay open.
        self.watch_grace = watch_grace

    @classmethod
    def for_host(cls, host: str, *, token: str | None = None, **kwargs: Any) -> KubeApi:
        """A client for an API server at `host` (tests, port-forwards)."""
        config = k8s.Configuration(host=host.rstrip("/"))
        if token:
            config.api_key["BearerToken"] = token
            config.api_key_prefix["BearerToken"] = "Bearer"
        return cls(k8s.ApiClient(config), **kwargs)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = self.api_client.param_serialize(
            method,
            path,
            query_params=list(query) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(
            method,
            url,
            header_params=headers,
            body=body,
            _request_timeout=timeout if timeout is not None else self.request_timeout,
        )
        if not 200 <= response.status <= 299:
            response.read()
            data = response.data.decode("utf-8", "replace") if response.data else None
            raise ApiException.from_response(http_resp=response, body=data, data=None)
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._send(method, path, **kwargs)
        raw = response.read()
        return json.loads(raw) if raw else {}

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def list(self, path: str, *, label_selector: str | None = None) -> dict[str, Any]:
        query = [("labelSelector", label_selector)] if label_selector else []
        return self.request("GET", path, query=query)

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
        )
        raw = response.response
        try:
            buffer = b""
            for chunk in raw.stream(amt=65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip():
                yield json.loads(buffer)
        finally:
            raw.release_conn()
