"""One vLLM server behind the remote engine: what it is, how it is doing, how to check it.

``verify`` is what admits a server (at start and when an ejected one comes back):
it must serve the model the others serve, with the gateway's tokenizer (a ``/tokenize``
round trip of a probe text must give the gateway's ids), and it is probed for the
protocol it speaks and the thinkgate logits processors it has loaded. vLLM has no
endpoint listing processors; each of ours validates its arguments at admission, so a
request carrying a deliberately invalid argument is refused (400 naming the key) only
where the processor is loaded, and served (one token) where it is not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import httpx

from core.engine import ModelTokens
from engines.remote.wire import PATHS, Protocol, error_message
from kernels.processors import SPECS

State = Literal["starting", "up", "down", "mismatch"]

# Answers of a server that does not expose the scale-out routes (403 without
# --enable-scale-out; 404/405 behind a router that passes only the OpenAI routes).
NO_ROUTE: Final = (403, 404, 405)


class ServerMismatch(RuntimeError):
    """The server cannot stand in for the others (model, tokenizer, context, protocol)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFacts:
    """What a verified server serves."""

    model_id: str
    max_model_len: int
    protocol: Protocol
    processors: frozenset[str]


@dataclass(slots=True, kw_only=True)
class Upstream:
    """One server's live state (mutated only by the remote engine's event loop)."""

    url: str
    state: State = "starting"
    facts: ServerFacts | None = None
    outstanding_samples: int = 0
    outstanding_requests: int = 0
    requests: int = 0
    failures: int = 0
    ejections: int = 0
    last_error: str | None = None
    since: float = field(default_factory=time.monotonic)
    # The sole route's health check: "/readiness" (a router publishes it), else "/health".
    health_path: str | None = None
    # What a router publishes about its fleet ({"healthy_workers", "total_workers"}).
    fleet: dict[str, int] | None = None

    def set_state(self, state: State, error: str | None = None) -> None:
        if state != self.state:
            self.since = time.monotonic()
            if state == "down" and self.state == "up":
                self.ejections += 1
        self.state = state
        if error is not None:
            self.last_error = error

    def status(self) -> dict[str, Any]:
        """This server as ``/ready`` reports it."""
        facts = self.facts
        return {
            "url": self.url,
            "state": self.state,
            "for_s": round(time.monotonic() - self.since, 1),
            "outstanding_samples": self.outstanding_samples,
            "outstanding_requests": self.outstanding_requests,
            "requests": self.requests,
            "failures": self.failures,
            "ejections": self.ejections,
            "protocol": facts.protocol if facts else None,
            "processors": sorted(facts.processors) if facts else [],
            "last_error": self.last_error,
            "health_check": self.health_path or "/health",
            "fleet": dict(self.fleet) if self.fleet is not None else None,
        }


def probe_text(tokens: ModelTokens, think_start: str, think_end: str) -> str:
    """Text whose ids must be the same on the server and in the gateway."""
    body = "Compute 3+8-5+7 mod 10. Answer: 42, \\boxed{3}! ok?"
    if not tokens.think_start_ids:
        return body
    return f"{think_start}\n{body}\n{think_end}\n{body}"


async def verify(
    client: httpx.AsyncClient,
    url: str,
    *,
    tokens: ModelTokens,
    probe: str,
    protocol: Literal["auto", "generate", "completions"],
    timeout_s: float,
) -> ServerFacts:
    """Check the server at ``url`` and learn its facts.

    Raises ``ServerMismatch`` when it cannot serve for this gateway, ``httpx.HTTPError``
    when it does not answer (not up yet, or gone).
    """
    models = await _get_json(client, f"{url}/v1/models", timeout_s)
    data = models.get("data") or []
    if not data:
        raise ServerMismatch(f"{url}: /v1/models lists no model")
    model_id = str(data[0]["id"])
    max_len = int(data[0].get("max_model_len") or 0)
    if max_len < 1:
        raise ServerMismatch(f"{url}: /v1/models gives no max_model_len for {model_id!r}")

    want = tokens.encode(probe)
    got = await client.post(
        f"{url}/tokenize",
        json={"model": model_id, "prompt": probe, "add_special_tokens": False},
        timeout=timeout_s,
    )
    if got.status_code != 200:
        raise ServerMismatch(
            f"{url}: /tokenize answered {got.status_code}: {error_message(_json(got))}"
        )
    ids = [int(t) for t in _json(got).get("tokens", [])]
    if ids != want:
        raise ServerMismatch(
            f"{url}: serves {model_id!r} with another tokenizer than the gateway's "
            f"(a probe text gave {len(ids)} ids there, {len(want)} here, first difference "
            f"at {_first_difference(ids, want)}); point --model at the servers' model"
        )

    first = want[:1] or [0]
    chosen: Protocol
    if protocol == "completions":
        chosen = "completions"
    else:
        answer = await _probe(client, url, "generate", model_id, first, {}, timeout_s)
        if answer.status_code in NO_ROUTE:
            if protocol == "generate":
                raise ServerMismatch(
                    f"{url}: no /inference/v1/generate (answered {answer.status_code}); start "
                    "the server with --enable-scale-out (thinkgate replica does)"
                )
            chosen = "completions"
        elif answer.status_code != 200:
            raise ServerMismatch(
                f"{url}: /inference/v1/generate answered {answer.status_code}: "
                f"{error_message(_json(answer))}"
            )
        else:
            chosen = "generate"
    processors: set[str] = set()
    for spec in SPECS:
        name, key, extra = spec.name, spec.opt_in, dict(spec.probe)
        answer = await _probe(client, url, chosen, model_id, first, extra, timeout_s)
        text = error_message(_json(answer))
        if answer.status_code == 400 and key in text:
            processors.add(name)
        elif answer.status_code != 200:
            raise ServerMismatch(
                f"{url}: the {name} processor probe answered {answer.status_code}: {text}"
            )
    return ServerFacts(
        model_id=model_id,
        max_model_len=max_len,
        protocol=chosen,
        processors=frozenset(processors),
    )


async def _probe(
    client: httpx.AsyncClient,
    url: str,
    protocol: Protocol,
    model_id: str,
    prompt: list[int],
    extra: dict[str, object],
    timeout_s: float,
) -> httpx.Response:
    """A one-token greedy request carrying ``extra`` as processor arguments."""
    if protocol == "generate":
        params: dict[str, object] = {"max_tokens": 1, "temperature": 0.0}
        if extra:
            params["extra_args"] = extra
        payload: dict[str, object] = {"token_ids": prompt, "sampling_params": params}
    else:
        payload = {"model": model_id, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
        if extra:
            payload["vllm_xargs"] = extra
    return await client.post(f"{url}{PATHS[protocol]}", json=payload, timeout=timeout_s)


async def _get_json(client: httpx.AsyncClient, url: str, timeout_s: float) -> dict[str, Any]:
    answer = await client.get(url, timeout=timeout_s)
    if answer.status_code != 200:
        raise httpx.HTTPStatusError(
            f"{url} answered {answer.status_code}", request=answer.request, response=answer
        )
    return _json(answer)


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        value = answer.json()
    except ValueError:
        return {"error": {"message": answer.text[:300]}}
    return value if isinstance(value, dict) else {"data": value}


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
