"""The SDK's clients share one TLS context per process (client.api.tls_context) and still verify
every server's certificate against the CA bundle: a real HTTPS server on this machine, with a
certificate made for it that no authority signed, is refused by each new client."""

from __future__ import annotations

import json
import ssl
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from client import Client
from tests.local_http import send, serving


class Best(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        send(self, 200, json.dumps({"commit": None, "val_bpb": None}).encode(), "application/json")


def self_signed(folder: Path) -> ssl.SSLContext:
    """A server-side context with a new certificate for 127.0.0.1, signed by itself."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    new = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        ["openssl", *new, *subject, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_every_client_refuses_a_certificate_no_authority_signed(tmp_path: Path) -> None:
    with serving(Best, tls=self_signed(tmp_path)) as url:
        for _ in range(2):  # the first client makes the shared context, the second reuses it
            with Client(url) as client, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                client.best()
        # The server itself answers: what refused it was the verification.
        with httpx.Client(verify=False) as insecure:
            assert insecure.get(f"{url}/api/v1/best").status_code == 200
