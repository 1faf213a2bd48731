"""``thinkgate bench security``'s lines against the gateway over a scripted engine (real
HTTP, no vLLM): each line is met on a server that is safe, and the probes can fail (a
server without keys leaks, and the line says so)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import uvicorn_in_thread

from benchmarks import security, security_fair, security_probes
from benchmarks.security_lines import fuzzed_lines
from benchmarks.security_upload import big_upload
from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.settings import Settings

LIMIT = 256 * 1024


def _serve(tmp: Path, tokens: Any, **settings: Any) -> Iterator[str]:
    async def handler(r: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *["3\n</think>\\boxed{3}"] * max(1, r.sampling.n))

    engine = ScriptedEngine(handler, tokens=tokens, model_name="testbed-base")
    base = {"reward_model": "none", "prm_model": "none", "state_dir": str(tmp / "state")}
    config = Settings(**{**base, "batch_max_file_bytes": LIMIT, **settings})
    with uvicorn_in_thread(
        uvicorn.Config(create_app(config, engine=engine), log_level="warning")
    ) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, testbed_tokens: Any
) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("security")
    (tmp / "keys.toml").write_text(security.keys_file())
    (tmp / "state").mkdir()
    yield from ((url, tmp) for url in _serve(tmp, testbed_tokens, keys_file=str(tmp / "keys.toml")))


@pytest.fixture(scope="module")
def owned(served: tuple[str, Path]) -> security_probes.Owned:
    with httpx.Client(base_url=served[0], timeout=30) as client:
        return security_probes.make_owned(client, security.KEYS["a"])


def test_the_request_probes_are_met_on_the_gateway(
    served: tuple[str, Path], owned: security_probes.Owned
) -> None:
    a, b = security.KEYS["a"], security.KEYS["b"]
    with httpx.Client(base_url=served[0], timeout=30) as client:
        lines = [
            security_probes.unauthenticated(client, owned, a),
            security_probes.cross_tenant(client, owned, a, b),
            security_probes.cross_origin(client, owned, a),
            security_probes.foreign_host(client, owned, a),
            security_probes.non_json(client, a),
        ]
    for line in lines:
        assert line.met and line.tries >= 10, line
    assert "with A's key: 200" in lines[0].detail  # the key itself works: a real control


def test_a_server_without_keys_fails_the_read_probe(tmp_path: Path, testbed_tokens: Any) -> None:
    for url in _serve(tmp_path, testbed_tokens):
        with httpx.Client(base_url=url, timeout=30) as client:
            owned = security_probes.make_owned(client, "any")
            line = security_probes.unauthenticated(client, owned, "any")
        assert not line.met and line.failures >= 10, line


def test_fuzzed_lines_are_refused_by_line_and_field(served: tuple[str, Path]) -> None:
    line = fuzzed_lines(served[0], security.KEYS["a"], lines=120, seed=0)
    assert line.tries == 120 and line.met, line
    assert "valid (cancelled)" in line.detail and "x400" in line.detail, line


def test_a_chunked_upload_past_the_limit_is_refused_without_spooling(
    served: tuple[str, Path],
) -> None:
    url, tmp = served
    roots = (tmp / "state",)
    line = big_upload(
        url, security.KEYS["a"], pid=os.getpid(), roots=roots, total=16 * LIMIT, limit=LIMIT
    )
    assert line.met, line
    assert "16.0 MiB sent" not in line.detail, line  # refused before the end


def test_the_held_tenant_is_held_to_four(served: tuple[str, Path]) -> None:
    keys = (security.KEYS["small"], security.KEYS["b"])
    lines = security_fair.held_to_four(
        served[0], keys, ["Compute 1+2 mod 10."] * 8, max_tokens=8, solo_p95=10.0
    )
    assert lines[0].met, lines
    assert (
        "refused" in lines[0].detail or "most 4" in lines[0].detail or "most 3" in lines[0].detail
    )
