"""The two wire protocols of vLLM's OpenAI server that carry token ids both ways.

* ``generate``: ``POST /inference/v1/generate`` (vLLM 0.32, ``--enable-scale-out``):
  ``{"token_ids", "sampling_params": {...SamplingParams, extra_args}}``; the answer
  holds ``choices[i].token_ids`` (and per-token logprobs), the stream one ``data:``
  frame per choice per step with the new ``token_ids``.
* ``completions``: ``POST /v1/completions`` with a token-id ``prompt``,
  ``return_token_ids`` and ``vllm_xargs`` (what a router exposing only the OpenAI routes
  passes on).

Pure functions: bodies out, ``Sample``/``SampleDelta`` in, and the mapping of an
upstream's error answer onto the error tree. No I/O here (``upstream.py`` does it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from core.engine import (
    QUIET_STREAM_INTERVAL,
    FinishReason,
    GenerateRequest,
    Sample,
    SampleDelta,
    SamplingConfig,
    TokenLogprob,
)
from core.errors import (
    BackendError,
    GatewayError,
    InvalidRequest,
    Overloaded,
    UpstreamError,
)
from core.token_confidence import MAX_TOP_K, token_confidence
from engines.logprobs import Entry, best
from engines.vllm_errors import param_for

Protocol = Literal["generate", "completions"]

PATHS: Final[dict[Protocol, str]] = {
    "generate": "/inference/v1/generate",
    "completions": "/v1/completions",
}
_FINISH: Final[dict[str, FinishReason]] = {"stop": "stop", "length": "length", "abort": "abort"}


def body(
    protocol: Protocol,
    request: GenerateRequest,
    *,
    max_tokens: int,
    upstream_model: str,
    stream: bool,
) -> dict[str, Any]:
    """The JSON body of ``request`` for ``protocol`` (``max_tokens`` already resolved)."""
    params = _sampling_params(protocol, request.sampling, max_tokens)
    if protocol == "generate":
        return _generate_body(request, params, stream=stream)
    return _completions_body(request, params, upstream_model=upstream_model, stream=stream)


def _sampling_params(protocol: Protocol, s: SamplingConfig, max_tokens: int) -> dict[str, Any]:
    """vLLM's ``SamplingParams`` for ``s``, as both protocols carry them."""
    params: dict[str, Any] = {
        "n": s.n,
        "max_tokens": max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "ignore_eos": s.ignore_eos,
    }
    # vLLM's sampling extras: sent only when set, as its own clients do.
    for name, value, neutral in (
        ("top_k", s.top_k, 0),
        ("min_p", s.min_p, 0.0),
        ("repetition_penalty", s.repetition_penalty, 1.0),
        ("presence_penalty", s.presence_penalty, 0.0),
        ("frequency_penalty", s.frequency_penalty, 0.0),
        ("min_tokens", s.min_tokens, 0),
    ):
        if value != neutral:
            params[name] = value
    if s.logit_bias:
        # JSON keys are strings; vLLM reads them back as token ids.
        params["logit_bias"] = {str(k): v for k, v in s.logit_bias.items()}
    if s.seed is not None:
        params["seed"] = s.seed
    if s.stop:
        params["stop"] = list(s.stop)
    if s.stop_token_ids:
        params["stop_token_ids"] = list(s.stop_token_ids)
    logprobs = _logprobs(protocol, s)
    if logprobs is not None:
        params["logprobs"] = logprobs
    if s.prompt_logprobs is not None:
        params["prompt_logprobs"] = s.prompt_logprobs
    if s.structured is not None:
        # vLLM's structured outputs; the server's reasoning parser holds them back until
        # thinking ends (``thinkgate replica`` starts it with one).
        params["structured_outputs"] = (
            {"json_object": True}
            if s.structured.kind == "json_object"
            else {"json": json.loads(s.structured.schema or "{}")}
        )
    return params


def _wanted(s: SamplingConfig) -> int:
    """The top-k candidates asked for per token (confidences, the client's alternatives)."""
    return max(s.top_logprobs, s.token_logprobs or 0)


def _logprobs(protocol: Protocol, s: SamplingConfig) -> int | None:
    """vLLM's ``logprobs`` for ``s``; None: not asked for."""
    wanted = _wanted(s)
    if wanted > 0:
        # The top-k candidates per token (confidences, the client's alternatives); the
        # sampled token's logprob and so cumulative_logprob come with them.
        # ``generate`` lists only the first ``logprobs`` entries of vLLM's per-token dict,
        # the sampled token first: one more than k keeps the true top k listed when the
        # sampled token is not among them (exact up to vLLM's cap of MAX_TOP_K).
        extra_one = protocol == "generate" and wanted < MAX_TOP_K
        return wanted + 1 if extra_one else wanted
    if s.logprobs or s.token_logprobs is not None:
        return 0  # the sampled token's logprob only
    return None


def _generate_body(
    request: GenerateRequest, params: dict[str, Any], *, stream: bool
) -> dict[str, Any]:
    """The scale-out route's body: the prompt's ids and vLLM's ``SamplingParams``."""
    s = request.sampling
    extra = dict(s.extra_args)
    if extra:
        params["extra_args"] = extra
    # Text is decoded in the gateway; the server detokenizes only for stop strings.
    params["detokenize"] = bool(s.stop)
    if stream and not request.visible:
        # Fewer frames through every hop (a router included) for a stream nobody
        # reads token by token (the scale-out route takes vLLM's SamplingParams).
        params["stream_interval"] = QUIET_STREAM_INTERVAL
    return {
        "request_id": request.request_id,
        "token_ids": list(request.prompt_token_ids),
        "sampling_params": params,
        "stream": stream,
    }


def _completions_body(
    request: GenerateRequest, params: dict[str, Any], *, upstream_model: str, stream: bool
) -> dict[str, Any]:
    """``/v1/completions``' body: a token-id prompt, the params at the top level."""
    s = request.sampling
    out: dict[str, Any] = {
        "model": upstream_model,
        "prompt": list(request.prompt_token_ids),
        "return_token_ids": True,
        "stream": stream,
        **params,
    }
    extra = dict(s.extra_args)
    if extra:
        out["vllm_xargs"] = extra
    if _wanted(s) > 0 or s.token_logprobs is not None or s.prompt_logprobs is not None:
        # Key top_logprobs by "token_id:N", not by decoded text: distinct tokens that
        # decode alike (byte-fallback pieces) would collapse into one candidate.
        out["return_tokens_as_token_ids"] = True
    return out


def finish(reason: object) -> FinishReason:
    """Our finish reason for an upstream one; an unknown one is an upstream fault."""
    if not isinstance(reason, str) or reason not in _FINISH:
        raise BackendError(f"vLLM server finished a sample with {reason!r}")
    return _FINISH[reason]


def _logprob_sum(protocol: Protocol, choice: Mapping[str, Any]) -> float | None:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, Mapping):
        return None
    if protocol == "generate":
        content = logprobs.get("content") or []
        return float(sum(float(c["logprob"]) for c in content))
    values = logprobs.get("token_logprobs") or []
    return float(sum(float(v) for v in values if v is not None))


def _confidences(protocol: Protocol, choice: Mapping[str, Any], k: int) -> tuple[float, ...] | None:
    """Per-token confidences of a choice when ``top_logprobs = k`` was asked for.

    ``generate`` lists per token its dict's first entries, the sampled token first; asked
    for k + 1 (``body``), they always hold the true top k, whose mean this takes (at
    k = MAX_TOP_K vLLM allows no extra one: a sampled token outside the top k then
    stands in for the k-th, a small bias in rare low-probability steps). ``completions``
    sends the whole dict: the top k, plus the sampled token when it is not among them.
    """
    if k <= 0:
        return None
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, Mapping):
        return None
    if protocol == "generate":
        content = logprobs.get("content") or []
        return tuple(
            token_confidence((float(t["logprob"]) for t in c.get("top_logprobs") or ()), k)
            for c in content
        )
    tops = logprobs.get("top_logprobs") or []
    # A token vLLM had no candidates for comes as null: confidence 0 (no information).
    return tuple(token_confidence((float(v) for v in (t or {}).values()), k) for t in tops)


def _aligned(
    confidences: tuple[float, ...] | None, ids: tuple[int, ...], k: int
) -> tuple[float, ...] | None:
    """``confidences``, checked to be one per token: misaligned ones would score the
    wrong tokens, and a server (or router) that dropped them must not pass silently."""
    if k <= 0:
        return None
    if not ids:
        return ()
    if confidences is None or len(confidences) != len(ids):
        got = "no" if confidences is None else len(confidences)
        raise BackendError(f"vLLM server answered {got} top logprobs for {len(ids)} tokens")
    return confidences


def _token_id(token: object) -> int:
    """A token of the completions route's logprobs (``return_tokens_as_token_ids``)."""
    if isinstance(token, str) and token.startswith("token_id:"):
        return int(token.removeprefix("token_id:"))
    raise BackendError(f"vLLM server named a logprob token {token!r}, not by its id")


def _client_logprobs(
    protocol: Protocol, choice: Mapping[str, Any], k: int | None, ids: tuple[int, ...]
) -> tuple[TokenLogprob, ...] | None:
    """The client's logprobs of a choice's tokens (one each) when it asked for them."""
    if k is None:
        return None
    logprobs = choice.get("logprobs")
    if not ids:
        return ()
    if not isinstance(logprobs, Mapping):
        raise BackendError(f"vLLM server answered no logprobs for {len(ids)} tokens")
    out: list[TokenLogprob] = []
    if protocol == "generate":
        content = logprobs.get("content") or []
        for c in content:
            entries: list[Entry] = [
                (int(t["token_id"]), float(t["logprob"]), t.get("rank"))
                for t in c.get("top_logprobs") or ()
            ]
            tid = int(c["token_id"])
            out.append(TokenLogprob(tid, float(c["logprob"]), best(entries, k)))
    else:
        tokens = logprobs.get("tokens") or []
        values = logprobs.get("token_logprobs") or []
        tops = logprobs.get("top_logprobs") or [None] * len(tokens)
        for token, value, top in zip(tokens, values, tops, strict=True):
            entries = [(_token_id(t), float(v), None) for t, v in (top or {}).items()]
            out.append(TokenLogprob(_token_id(token), float(value), best(entries, k)))
    if len(out) != len(ids):
        raise BackendError(f"vLLM server answered logprobs for {len(out)} of {len(ids)} tokens")
    if [t.token_id for t in out] != list(ids):
        raise BackendError("vLLM server answered logprobs of other tokens than it sampled")
    return tuple(out)


def prompt_logprobs(
    answer: Mapping[str, Any], k: int, prompt_ids: tuple[int, ...]
) -> tuple[TokenLogprob | None, ...]:
    """The prompt's logprobs of a non-streamed answer (vLLM's ``prompt_logprobs``: per
    prompt token null or ``{token id: {"logprob", "rank"}}``), one per prompt token: at
    the top of a ``generate`` answer, on each choice of a ``completions`` one."""
    positions = answer.get("prompt_logprobs")
    if positions is None:
        choices = answer.get("choices") or [{}]
        positions = choices[0].get("prompt_logprobs")
    if not isinstance(positions, list) or len(positions) != len(prompt_ids):
        got = len(positions) if isinstance(positions, list) else "no"
        raise BackendError(
            f"vLLM server answered {got} prompt logprobs for {len(prompt_ids)} prompt tokens"
        )
    out: list[TokenLogprob | None] = []
    for token, position in zip(prompt_ids, positions, strict=True):
        if not position:
            out.append(None)
            continue
        entries = [
            (int(str(t).removeprefix("token_id:")), float(v["logprob"]), v.get("rank"))
            for t, v in position.items()
        ]
        own = next((lp for t, lp, _ in entries if t == token), None)
        if own is None:
            raise BackendError(f"vLLM server answered no logprob for prompt token {token}")
        out.append(TokenLogprob(token, own, best(entries, k)))
    return tuple(out)


def _token_ids(choice: Mapping[str, Any]) -> tuple[int, ...]:
    ids = choice.get("token_ids")
    if ids is None:
        return ()
    if not isinstance(ids, list):
        raise BackendError("vLLM server answered without token ids (return_token_ids?)")
    return tuple(int(t) for t in ids)


def samples(
    protocol: Protocol,
    answer: Mapping[str, Any],
    n: int,
    *,
    top_k: int = 0,
    client_k: int | None = None,
    prompt: tuple[int, tuple[int, ...]] | None = None,
) -> list[Sample]:
    """The finished samples of a non-streamed answer, ordered by index (with token
    confidences when the request asked for ``top_logprobs = top_k > 0``, the client's
    logprobs for ``client_k``, the prompt's for ``prompt`` = (k, prompt ids))."""
    try:
        return _samples(protocol, answer, n, top_k, client_k, prompt)
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"unreadable answer from the vLLM server: {exc!r}") from exc


def _samples(
    protocol: Protocol,
    answer: Mapping[str, Any],
    n: int,
    k: int,
    client_k: int | None,
    prompt: tuple[int, tuple[int, ...]] | None,
) -> list[Sample]:
    error = answer.get("error")
    if error is not None:
        raise upstream_error(500, answer)
    prompt_lps = None if prompt is None else prompt_logprobs(answer, *prompt)
    done: dict[int, Sample] = {}
    for choice in answer.get("choices") or []:
        index = int(choice["index"])
        ids = _token_ids(choice)
        done[index] = Sample(
            index=index,
            token_ids=ids,
            finish_reason=finish(choice.get("finish_reason")),
            cumulative_logprob=_logprob_sum(protocol, choice),
            stop_reason=choice.get("stop_reason"),
            confidences=_aligned(_confidences(protocol, choice, k), ids, k),
            logprobs=_client_logprobs(protocol, choice, client_k, ids),
            prompt_logprobs=prompt_lps,
        )
    if sorted(done) != list(range(n)):
        raise BackendError(f"vLLM server returned samples {sorted(done)} of {n}")
    return [done[i] for i in range(n)]


def deltas(
    protocol: Protocol,
    frame: Mapping[str, Any],
    *,
    top_k: int = 0,
    client_k: int | None = None,
) -> list[SampleDelta]:
    """The deltas in one streamed frame (a usage-only frame has none), with token
    confidences when the request asked for ``top_logprobs = top_k > 0`` and the
    client's logprobs for ``client_k``."""
    try:
        return _deltas(protocol, frame, top_k, client_k)
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"unreadable frame from the vLLM server: {exc!r}") from exc


def _deltas(
    protocol: Protocol, frame: Mapping[str, Any], k: int, client_k: int | None
) -> list[SampleDelta]:
    if frame.get("error") is not None:
        raise upstream_error(500, frame)
    out: list[SampleDelta] = []
    for choice in frame.get("choices") or []:
        reason = choice.get("finish_reason")
        ids = _token_ids(choice)
        if not ids and reason is None:
            continue
        out.append(
            SampleDelta(
                index=int(choice["index"]),
                token_ids=ids,
                finish_reason=finish(reason) if reason is not None else None,
                cumulative_logprob=_logprob_sum(protocol, choice),
                stop_reason=choice.get("stop_reason"),
                confidences=_aligned(_confidences(protocol, choice, k), ids, k),
                logprobs=_client_logprobs(protocol, choice, client_k, ids),
            )
        )
    return out


def error_message(answer: object) -> str:
    """The message of vLLM's error body (``{"error": {...}}`` or the flat older form)."""
    if isinstance(answer, Mapping):
        inner = answer.get("error", answer)
        if isinstance(inner, Mapping):
            message = inner.get("message") or inner.get("detail")
            if message:
                return str(message)
        if isinstance(inner, str):
            return inner
        detail = answer.get("detail")
        if detail:
            return str(detail)
    return str(answer)[:500]


def error_param(answer: object) -> str | None:
    """The ``param`` of vLLM's error body, when it names one."""
    inner = answer.get("error") if isinstance(answer, Mapping) else None
    param = inner.get("param") if isinstance(inner, Mapping) else None
    return param if isinstance(param, str) and param else None


def upstream_error(status: int, answer: object) -> GatewayError:
    """The gateway error for an upstream's error answer with HTTP ``status``.

    A 4xx is the request's fault (the server validated it: sampling values, our
    processors' arguments) and keeps vLLM's message, as is any answer whose message is
    one of vLLM's validation messages (``vllm_errors.PARAMS``, which also names the
    field); 429 is overload; the rest is an upstream failure (the caller decides whether
    to retry it elsewhere).
    """
    message = error_message(answer)
    if status == 429:
        return Overloaded(f"vLLM server overloaded: {message}")
    if 400 <= status < 500:
        return InvalidRequest(message, param=error_param(answer) or param_for(message))
    if (param := param_for(message)) is not None:
        # vLLM's generate route answers 500 for the checks its engine makes while it runs
        # the request (a token id outside the vocabulary): still the request's fault.
        return InvalidRequest(message, param=param)
    return UpstreamError(f"vLLM server error ({status}): {message}")
