"""The V1 adapter in a vLLM OpenAI server: ``--logits-processors
kernels.elastic.vllm_v1:ElasticLogitsProcessor``, arguments in ``vllm_xargs``.

What the RemoteEngine path relies on: the FQCN loads in the server's worker, budgets
arrive through ``vllm_xargs``, bad values are a 400 naming the key, and the server
keeps serving afterwards.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kernels.elastic import args as keys

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "testbed" / "models" / "base"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="testbed model not exported"),
]


@pytest.fixture(scope="module")
def server(remote_stack: Any) -> str:
    """A replica of the shared remote stack: ``thinkgate replica`` is vLLM's own OpenAI
    server started with our processors' FQCNs (its command is tested in
    test_replica_command.py); one more server of its own cost ~70 s of the suite."""
    url: str = remote_stack.replicas[0].url
    return url


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


def _served_model(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
        return str(json.loads(response.read())["data"][0]["id"])


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
        "model": _served_model(server),
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
