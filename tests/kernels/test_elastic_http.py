"""The V1 adapter in a vLLM OpenAI server: ``--logits-processors
kernels.vllm_v1:ElasticLogitsProcessor``, arguments in ``vllm_xargs``.

What the RemoteEngine path relies on: the FQCN loads in the server's worker, budgets
arrive through ``vllm_xargs``, bad values are a 400 naming the key, and the server
keeps serving afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernels import args as keys

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "testbed" / "models" / "base"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="testbed model not exported"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _root_cause(text: str) -> str:
    """The error lines of a failed start (the root cause sits far above the tail)."""
    errors = [line for line in text.splitlines() if "Error" in line or "error" in line]
    return "\n".join(errors[:20]) + "\n...\n" + text[-1500:]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(MODEL), "--host", "127.0.0.1", "--port", str(port)),
        *("--dtype", "float32", "--max-model-len", "256", "--enforce-eager"),
        *("--logits-processors", "kernels.vllm_v1:ElasticLogitsProcessor"),
    ]
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # engine start is ~40 s, far more on busy cores
        while True:
            assert proc.poll() is None, _root_cause(log.read_text())
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def test_budgets_and_errors_over_http(server: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    end, eos = tok.convert_tokens_to_ids("</think>"), tok.eos_token_id
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Compute 3+8 mod 10."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    base = {
        "model": str(MODEL),
        "prompt": prompt,
        "max_tokens": 40,
        "temperature": 1.0,
        "n": 3,
        "return_token_ids": True,
    }
    ids = {keys.THINK_END_ID: end, keys.EOS_ID: eos}
    for t, s in [(0, 0), (5, 2), (10, 3)]:
        xargs = {keys.THINKING_BUDGET: t, keys.SOLUTION_BUDGET: s, **ids}
        code, body = _post(server, {**base, "vllm_xargs": xargs})
        assert code == 200, body
        for choice in body["choices"]:
            out = choice["token_ids"]
            if end not in out:  # the model stopped by itself while thinking
                assert len(out) <= t and choice["finish_reason"] == "stop", out
                continue
            at = out.index(end)
            assert at <= t and len(out) <= at + 1 + s + 1, (t, s, out)
    for bad in ("5", -2):
        code, body = _post(server, {**base, "vllm_xargs": {keys.THINKING_BUDGET: bad, **ids}})
        assert code == 400 and keys.THINKING_BUDGET in body["error"]["message"], body
    code, body = _post(server, {**base, "n": 1})
    assert code == 200 and body["choices"], body
