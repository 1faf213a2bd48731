"""The remote engine's calls through a fleet gateway: TLS signed by the gateway's own CA
(``--remote-ca-bundle``), headers on every call (``--remote-headers``), and a base URL
with a path prefix, against a recording HTTPS server in this process."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from conftest import uvicorn_in_thread
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.errors import BackendError
from engines.calls import AiohttpCalls, CallFailed, Timeouts, Transport
from engines.local.prm import RemotePrm
from engines.remote.scorer_clients import RemoteClassify
from server.resources.model_match import remote_probe
from server.settings import Settings


def _certs(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 it signs: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "thinkgate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


SEEN: list[tuple[str, dict[str, str]]] = []


async def _record(request: Request) -> Response:
    SEEN.append((request.url.path, dict(request.headers)))
    return JSONResponse({"ok": True})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    ca, cert, key = _certs(tmp_path_factory.mktemp("tls"))
    app = Starlette(routes=[Route("/{path:path}", _record, methods=["POST"])])
    config = uvicorn.Config(app, log_level="warning", ssl_certfile=str(cert), ssl_keyfile=str(key))
    with uvicorn_in_thread(config) as port:
        yield f"https://127.0.0.1:{port}/team-a/smol", ca


async def test_calls_verify_the_gateways_ca_and_carry_its_headers(
    gateway: tuple[str, Path],
) -> None:
    base, ca = gateway
    settings = Settings(
        engine="remote",
        vllm_urls=(f"{base}/",),
        remote_ca_bundle=str(ca),
        remote_headers="Authorization: Bearer fleet-token,X-Team: a",  # type: ignore[arg-type]
    )
    remote = settings.remote
    assert remote.urls == (base,)  # the prefix kept, the trailing slash not
    transport = Transport(ca_bundle=remote.ca_bundle, headers=remote.headers)
    calls = AiohttpCalls(Timeouts(connect=5, read=10), transport)
    SEEN.clear()
    answer = await calls.post(f"{remote.urls[0]}/v1/completions", b"{}", {"x-session-id": "s"})
    async with calls.stream(f"{remote.urls[0]}/inference/v1/generate", b"{}", {}) as streamed:
        assert streamed.status == 200 and await streamed.read()
    await calls.aclose()
    assert answer.status == 200
    assert [p for p, _ in SEEN] == [
        "/team-a/smol/v1/completions",
        "/team-a/smol/inference/v1/generate",
    ]
    for _, headers in SEEN:
        assert headers["authorization"] == "Bearer fleet-token" and headers["x-team"] == "a"
    assert SEEN[0][1]["x-session-id"] == "s"


async def test_the_scorers_calls_take_the_same_ca_and_headers(
    gateway: tuple[str, Path],
) -> None:
    """--prm-url and --reward-url servers behind the fleet gateway: their probe and their
    calls verify its CA and carry its headers (the recorder's answer is no PRM's, so each
    call then fails on the answer's shape, after it was seen)."""
    base, ca = gateway
    settings = Settings(
        prm_url=base,
        reward_url=base,
        remote_ca_bundle=str(ca),
        remote_headers=("Authorization: Bearer fleet-token",),
    )
    SEEN.clear()
    assert remote_probe(base, timeout_s=5, transport=settings.transport) is None
    prm = RemotePrm(base, step_tag_id=7, timeout_s=5, transport=settings.transport)
    reward = RemoteClassify(base, timeout_s=5, transport=settings.transport)
    with pytest.raises(BackendError):
        await prm.step_rewards([[1, 2, 7]])
    with pytest.raises(BackendError):
        await reward.score_sequences([[1, 2]])
    await prm.aclose()
    await reward.aclose()
    assert [p for p, _ in SEEN] == [
        "/team-a/smol/tokenize",
        "/team-a/smol/pooling",
        "/team-a/smol/classify",
    ]
    assert {h["authorization"] for _, h in SEEN} == {"Bearer fleet-token"}
    SEEN.clear()
    assert remote_probe(base, timeout_s=5) is None  # without the CA: refused, nothing seen
    assert SEEN == []


async def test_without_the_ca_the_gateways_certificate_is_refused(
    gateway: tuple[str, Path],
) -> None:
    base, _ = gateway
    calls = AiohttpCalls(Timeouts(connect=5, read=10), Transport())
    with pytest.raises(CallFailed):
        await calls.post(f"{base}/v1/completions", b"{}", {})
    await calls.aclose()


@pytest.mark.parametrize("bad", ["Authorization", "Bad Name: x", ": value", "X-Empty:"])
def test_a_malformed_remote_header_is_refused_at_start(bad: str) -> Any:
    with pytest.raises(ValueError, match="Name: value"):
        Settings(engine="remote", vllm_urls=("http://h:1",), remote_headers=(bad,))
