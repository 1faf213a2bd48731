"""Whether a server-wide resource was made for the served model.

A reward model scores token ids: one with another tokenizer reads another model's ids
as its own (measured: the testbed reward model in front of SmolLM2 answered "Token id
34519 is out of vocabulary", blaming the client). Two tokenizers are taken to be the
same when they tokenise a probe text (digits, words, punctuation, accents, CJK, an
emoji, think tags) to the same ids; the probe is cheap, needs no vocabulary dump and
works over vLLM's ``/tokenize`` for a remote reward server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

import httpx

from engines.calls import Transport

PROBE: Final = (
    "Compute 12+7*3 mod 10. The answer is \\boxed{3}.\n"
    'Über naïve café, 東京 and 🙂; <think>a</think> {"k": [1, 2.5]}'
)


class TokenizerMismatch(RuntimeError):
    """A resource that reads token ids was made for another tokenizer."""


def probe_ids(encode: Callable[[str], list[int]]) -> tuple[int, ...]:
    return tuple(encode(PROBE))


def local_probe(path: Path, *, trust_remote_code: bool = False) -> tuple[int, ...]:
    """The probe's ids under the tokenizer stored in a model directory."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    return probe_ids(lambda text: list(tok.encode(text, add_special_tokens=False)))


def remote_probe(
    url: str, *, timeout_s: float, transport: Transport | None = None
) -> tuple[tuple[int, ...], str] | None:
    """The probe's ids under a vLLM server's tokenizer (``POST /tokenize``) and the name
    it serves; None when the server does not say (no ``/tokenize``, unreachable): the
    caller then cannot check and says so."""
    base = url.rstrip("/")
    try:
        t = transport or Transport()
        verify = t.ssl_context() or True
        with httpx.Client(timeout=timeout_s, verify=verify, headers=dict(t.headers)) as client:
            models = client.get(f"{base}/v1/models")
            name = str(models.json()["data"][0]["id"]) if models.status_code == 200 else base
            got = client.post(
                f"{base}/tokenize", json={"prompt": PROBE, "add_special_tokens": False}
            )
            if got.status_code != 200:
                return None
            return tuple(int(t) for t in got.json()["tokens"]), name
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None


def same_tokenizer(policy: tuple[int, ...], other: tuple[int, ...]) -> bool:
    return policy == other


def mismatch(
    what: str,
    other: str,
    served: str,
    *,
    kind: str = "a reward model",
    leave_out: str = "--reward-model none, no --reward-url",
) -> TokenizerMismatch:
    return TokenizerMismatch(
        f"{what} {other} does not share the served model's tokenizer ({served}): it would "
        f"read the policy's token ids as other tokens. Serve {kind} trained on the "
        f"policy's tokenizer, or leave it out ({leave_out})"
    )
