"""The control plane's Kubernetes client over real TLS: trusted only through the cluster's CA.

A local HTTPS server presents a certificate signed by a throwaway CA, as an EKS
API endpoint presents one signed by the cluster's CA (`certificateAuthority`
in DescribeCluster). The client must accept it with that CA, and refuse it with
another CA or under a host name the certificate does not carry.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3
from muster.kube.http import ApiException, KubeApi

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def _name(common: str) -> Any:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(tmp: Path, label: str) -> tuple[Any, Any, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(label))
        .issuer_name(_name(label))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp / f"{label}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def _server_cert(tmp: Path, ca_key: Any, ca_cert: Any) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        # Only the IP address: "localhost" is a name the certificate does not carry.
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "server.pem", tmp / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        _Handler.seen.append(dict(self.headers))
        status = 404 if self.path.endswith("/missing") else 200
        body = (
            {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not there"}
            if status == 404
            else {"kind": "APIVersions", "versions": ["v1"]}
        )
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    """(port, the cluster's CA file, an unrelated CA file)."""
    ca_key, ca_cert, ca_file = _ca(tmp_path, "cluster-ca")
    _, _, other_ca = _ca(tmp_path, "other-ca")
    cert, key = _server_cert(tmp_path, ca_key, ca_cert)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.seen.clear()
    try:
        yield server.server_address[1], ca_file, other_ca
    finally:
        server.shutdown()
        server.server_close()


def test_the_cluster_ca_verifies_the_api_server(tls_server: tuple[int, Path, Path]) -> None:
    port, ca_file, _ = tls_server
    api = KubeApi.for_host(f"https://127.0.0.1:{port}", token="t0ken", ca_file=str(ca_file))
    assert api.get("/api") == {"kind": "APIVersions", "versions": ["v1"]}
    assert _Handler.seen[-1]["Authorization"] == "Bearer t0ken"


def test_a_server_the_cluster_ca_did_not_sign_is_refused(
    tls_server: tuple[int, Path, Path],
) -> None:
    port, _, other_ca = tls_server
    api = KubeApi.for_host(f"https://127.0.0.1:{port}", token="t0ken", ca_file=str(other_ca))
    with pytest.raises(urllib3.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        api.get("/api")
    # nor does the system's trust store vouch for it
    with pytest.raises(urllib3.exceptions.SSLError):
        KubeApi.for_host(f"https://127.0.0.1:{port}").get("/api")
    assert _Handler.seen == []  # no request, and so no token, ever reached it


def test_a_host_name_the_certificate_does_not_carry_is_refused(
    tls_server: tuple[int, Path, Path],
) -> None:
    port, ca_file, _ = tls_server
    api = KubeApi.for_host(f"https://localhost:{port}", ca_file=str(ca_file))
    with pytest.raises(urllib3.exceptions.SSLError, match="match"):
        api.get("/api")


def test_a_refusal_carries_status_reason_and_body(tls_server: tuple[int, Path, Path]) -> None:
    port, ca_file, _ = tls_server
    api = KubeApi.for_host(f"https://127.0.0.1:{port}", ca_file=str(ca_file))
    with pytest.raises(ApiException) as raised:
        api.get("/api/v1/namespaces/ml/pods/missing")
    assert raised.value.status == 404
    assert raised.value.reason == "Not Found"
    assert json.loads(raised.value.body or "")["message"] == "not there"
