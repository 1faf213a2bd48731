"""``thinkgate bench peers``: self-consistency through thinkgate and through the peers
users would run instead, on the same held-out testbed questions, in one run.

  thinkgate        ``thinkgate serve`` (``X-Strategy: self-consistency``,
                   ``X-Budget-Samples: 16``): one engine request with ``n = 16``
  its_hub          its_hub's IaaS server (``its-iaas``, PyPI ``its_hub[iaas]``) configured
                   through ``POST /configure`` for ``self-consistency`` with a ``\\boxed{}``
                   regex, budget 16 per request, pointed at vLLM's own OpenAI server
  optillm-sc       optillm (PyPI) with ``optillm_approach: self_consistency`` pointed at
                   vLLM's server: its sample count is fixed at 5 in the approach's code
  optillm-mv       optillm's ``majority_voting`` plugin with ``k: 16`` (the way to get 16
                   samples out of optillm), same server

vLLM's server runs with the same engine settings as thinkgate's engine (float32, 512-token
context, 64 sequences, no chunked prefill, eager, the model in the engine core on CPU
for both) and
no reasoning parser: on the testbed model ``</think>`` is a special token, which vLLM
drops from the text unless ``skip_special_tokens`` is false, so its ``deepseek_r1``
parser (which splits the text) puts the whole answer into ``reasoning`` and returns
``content: null``; neither peer can send that flag (its_hub drops unknown fields, optillm
builds its own requests), so they get the whole text as ``content``, answer last. The
peers run from a virtual
environment of their own (``--peers-venv``; they pin other versions than ours), as
subprocesses. A peer that cannot be started or fails is a row with the reason.

Per peer: questions per second (``--concurrency`` questions in flight, wall time of the
whole set), accuracy (the returned content's final answer against the gold one), prompt
and completion tokens billed (the response's ``usage``), for the peers on vLLM also the
tokens vLLM itself counted (its ``/metrics``), and what the response carries. Then one
probe each of what users ask of a gateway: streaming, a per-sample ``max_tokens``, a
thinking budget. Writes ``benchmarks/results/peers/peers.{md,json,png}``.

    .venv/bin/python -m benchmarks.peers [--questions 24] [--samples 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import ROOT, free_port, machine, serve, thinkgate, vllm_server
from strategies.answers import equivalent, extract_answer
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("peers")
# The same engine settings as thinkgate's own engine (benchmarks/overhead.py).
ENGINE_FLAGS = (
    "--max-num-seqs", "64", "--max-num-batched-tokens", "32768", "--no-enable-chunked-prefill",
)  # fmt: skip
MAX_TOKENS = 400  # as the other live benches on the 512-token testbed context
BOXED = r"\\boxed\{([^}]*)\}"
# A peer's start-up: a broken install should fail its row quickly, not hold the run.
PEER_START_S = 240.0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Peer:
    name: str
    samples: int
    how: str  # what selects the strategy and the sample count, as a user would send it
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class _Row:
    name: str
    samples: int
    how: str
    error: str | None = None
    questions: int = 0
    failed: int = 0
    first_failure: str | None = None
    wall_s: float = 0.0
    qps: float = 0.0
    accuracy: float = 0.0
    prompt_billed: float | None = None  # mean per question; None: not reported
    completion_billed: float | None = None
    reasoning_billed: float | None = None
    engine_prompt: float | None = None  # vLLM's own count per question (peers on vLLM)
    engine_completion: float | None = None
    engine_requests: float | None = None
    usage_keys: list[str] = field(default_factory=list)
    message_keys: list[str] = field(default_factory=list)
    reasoning_split: str = ""
    metadata: str = ""
    streaming: str = ""
    max_tokens_probe: str = ""
    thinking_budget: str = ""


def _usage_numbers(usage: dict[str, Any]) -> tuple[int | None, int | None, int | None]:
    details = usage.get("completion_tokens_details") or {}
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return usage.get("prompt_tokens"), usage.get("completion_tokens"), reasoning


def _content(data: dict[str, Any]) -> str:
    choices = data.get("choices") or [{}]
    return str((choices[0].get("message") or {}).get("content") or "")


async def _post(
    client: httpx.AsyncClient, url: str, peer: _Peer, model: str, q: Question, **extra: Any
) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": q.prompt}],
        "temperature": 1.0,
        "max_tokens": MAX_TOKENS,
        **peer.body,
        **extra,
    }
    r = await client.post(f"{url}/v1/chat/completions", json=body, headers=peer.headers)
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
    data: dict[str, Any] = r.json()
    return data


async def _engine_counts(client: httpx.AsyncClient, vllm_url: str | None) -> dict[str, float]:
    """vLLM's own token and request counters (what the engine did, whatever was billed)."""
    if vllm_url is None:
        return {}
    text = (await client.get(f"{vllm_url}/metrics")).text
    out: dict[str, float] = {}
    for name in ("prompt_tokens_total", "generation_tokens_total", "request_success_total"):
        hits = re.findall(rf"^vllm:{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
        out[name] = sum(float(x) for x in hits)
    return out


async def _run_peer(
    url: str,
    peer: _Peer,
    questions: Sequence[Question],
    concurrency: int,
    vllm_url: str | None,
) -> _Row:
    row = _Row(name=peer.name, samples=peer.samples, how=peer.how, questions=len(questions))
    async with httpx.AsyncClient(timeout=900) as client:
        models = (await client.get(f"{url}/v1/models")).json()["data"]
        model = str(models[0]["id"])
        # Warm-up on a question outside the set: first requests pay one-off costs.
        warm = make_questions("test", 1, seed=999, min_ops=9, max_ops=12)[0]
        await _post(client, url, peer, model, warm)
        before = await _engine_counts(client, vllm_url)
        gate = asyncio.Semaphore(concurrency)

        async def one(q: Question) -> dict[str, Any] | str:
            async with gate:
                try:
                    return await _post(client, url, peer, model, q)
                except Exception as e:  # one failed question is a wrong answer, counted
                    return f"{type(e).__name__}: {e}"

        t0 = time.perf_counter()
        got = await asyncio.gather(*(one(q) for q in questions))
        row.wall_s = time.perf_counter() - t0
        after = await _engine_counts(client, vllm_url)
        row.qps = len(questions) / row.wall_s
        ok = [(q, d) for q, d in zip(questions, got, strict=True) if isinstance(d, dict)]
        fails = [d for d in got if isinstance(d, str)]
        row.failed, row.first_failure = len(fails), (fails[0] if fails else None)
        right = [
            (a := extract_answer(_content(d))) is not None and equivalent(a, str(q.answer))
            for q, d in ok
        ]
        row.accuracy = 100.0 * sum(right) / len(questions)
        numbers = [_usage_numbers(d.get("usage") or {}) for _, d in ok]
        for i, attr in enumerate(("prompt_billed", "completion_billed", "reasoning_billed")):
            seen = [float(x) for n in numbers if (x := n[i]) is not None]
            # A field some answers lack is reported as missing, not averaged over fewer.
            if seen and len(seen) == len(numbers):
                setattr(row, attr, statistics.fmean(seen))
        if before:
            n = len(questions)
            row.engine_prompt = (after["prompt_tokens_total"] - before["prompt_tokens_total"]) / n
            row.engine_completion = (
                after["generation_tokens_total"] - before["generation_tokens_total"]
            ) / n
            row.engine_requests = (
                after["request_success_total"] - before["request_success_total"]
            ) / n
        if ok:
            sample = ok[0][1]
            row.usage_keys = sorted(_flat_keys(sample.get("usage") or {}))
            message = (sample.get("choices") or [{}])[0].get("message") or {}
            row.message_keys = sorted(k for k, v in message.items() if v not in (None, ""))
            split = [
                k for k in ("reasoning", "reasoning_content") if message.get(k) not in (None, "")
            ]
            reasoning_tokens = "yes" if row.reasoning_billed else "no"
            row.reasoning_split = (
                f"text: {'`' + '`, `'.join(split) + '`' if split else 'none'}; "
                f"usage reasoning_tokens: {reasoning_tokens}"
            )
            row.metadata = _metadata(sample)
        row.streaming = await _probe_stream(client, url, peer, model, questions[0])
        row.max_tokens_probe = await _probe_max_tokens(
            client, url, peer, model, questions[0], vllm_url
        )
        row.thinking_budget = await _probe_thinking(client, url, peer, model, questions[0])
    return row


def _flat_keys(d: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat_keys(v, f"{prefix}{k}.")
        elif v is not None:
            yield f"{prefix}{k}"


def _metadata(data: dict[str, Any]) -> str:
    """What the answer says about the vote, beyond the OpenAI fields."""
    choice = (data.get("choices") or [{}])[0]
    if isinstance(choice.get("thinkgate"), dict):
        keys = ", ".join(sorted(choice["thinkgate"]))
        return f"per choice `thinkgate`: {keys}"
    if data.get("metadata"):
        return "`metadata`: " + ", ".join(sorted(data["metadata"]))
    return "none"


async def _probe_stream(
    client: httpx.AsyncClient, url: str, peer: _Peer, model: str, q: Question
) -> str:
    """One ``stream: true`` request: does it answer with SSE, and do tokens arrive before
    the vote (real streaming) or all at its end (buffered)?"""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": q.prompt}],
        "temperature": 1.0,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        **peer.body,
    }
    t0 = time.perf_counter()
    first_byte: float | None = None
    content_at: list[float] = []
    comments = 0
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers=peer.headers
        ) as r:
            kind = r.headers.get("content-type", "")
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")[:160]
                return f"refused: HTTP {r.status_code} {text}"
            async for line in r.aiter_lines():
                if first_byte is None and line:
                    first_byte = time.perf_counter() - t0
                if line.startswith(":"):
                    comments += 1
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                try:
                    chunk = json.loads(line[5:])
                except json.JSONDecodeError:
                    continue
                if "error" in chunk:
                    return f"error frame: {str(chunk['error'])[:160]}"
                for c in chunk.get("choices") or []:
                    delta = c.get("delta") or {}
                    if any(delta.get(k) for k in ("content", "reasoning", "reasoning_content")):
                        content_at.append(time.perf_counter() - t0)
    except httpx.HTTPError as e:
        return f"failed: {type(e).__name__}: {e}"
    total = time.perf_counter() - t0
    if "text/event-stream" not in kind:
        return f"not SSE (content-type {kind!r}), {total:.1f} s"
    if not content_at:
        return f"SSE with no text delta, {total:.1f} s"
    spread = content_at[-1] - content_at[0]
    shape = "text all at the end (buffered)" if spread < 0.05 * total else "text spread out"
    extra = f", {comments} progress comments from {first_byte or 0:.2f} s" if comments else ""
    return (
        f"SSE, {len(content_at)} text chunks, first text at {content_at[0]:.1f} s of "
        f"{total:.1f} s: {shape}{extra}"
    )


async def _probe_max_tokens(
    client: httpx.AsyncClient,
    url: str,
    peer: _Peer,
    model: str,
    q: Question,
    vllm_url: str | None,
    cap: int = 48,
) -> str:
    """``max_tokens`` is per sample in OpenAI's API: with a cap of ``cap`` the tokens
    generated can be at most ``samples * cap``. Judged on vLLM's own count where there
    is one (a peer may bill less than was generated)."""
    before = await _engine_counts(client, vllm_url)
    try:
        data = await _post(client, url, peer, model, q, max_tokens=cap)
    except Exception as e:
        return f"request failed: {str(e)[:160]}"
    after = await _engine_counts(client, vllm_url)
    _, completion, _ = _usage_numbers(data.get("usage") or {})
    generated = (
        after["generation_tokens_total"] - before["generation_tokens_total"] if before else None
    )
    limit = cap * peer.samples
    made = generated if generated is not None else completion
    verdict = "no count" if made is None else ("honoured" if made <= limit else "IGNORED")
    counted = f", vLLM generated {generated:.0f}" if generated is not None else ""
    return (
        f"cap {cap} (limit {limit} for {peer.samples} samples): {completion} completion "
        f"tokens billed{counted}: {verdict}; answer {_content(data)[-40:]!r}"
    )


async def _probe_thinking(
    client: httpx.AsyncClient, url: str, peer: _Peer, model: str, q: Question, cap: int = 32
) -> str:
    """A thinking budget separate from the answer's: thinkgate's ``X-Budget-Thinking``;
    the peers have no such field (their request models and approaches, read in their
    source), so vLLM's own ``thinking_token_budget`` is sent and the result reported."""
    if peer.name == "thinkgate":
        p = _Peer(
            name=peer.name,
            samples=peer.samples,
            how=peer.how,
            headers={**peer.headers, "X-Budget-Thinking": str(cap)},
        )
        extra: dict[str, Any] = {}
        sent = f"`X-Budget-Thinking: {cap}`"
    else:
        p, extra, sent = peer, {"thinking_token_budget": cap}, f"`thinking_token_budget: {cap}`"
    try:
        data = await _post(client, url, p, model, q, **extra)
    except Exception as e:
        return f"{sent}: request failed: {str(e)[:160]}"
    _, completion, reasoning = _usage_numbers(data.get("usage") or {})
    # optillm reports reasoning_tokens from a regex over <think> tags (0 without them):
    # only thinkgate's count says what a budget did.
    if peer.name != "thinkgate" or reasoning is None or not completion:
        return (
            f"none in its API (its source); {sent} sent, usage: {completion} completion "
            f"tokens, reasoning {reasoning}, for {peer.samples} samples"
        )
    limit = (cap + 1) * peer.samples  # the closing </think> is one token past the budget
    verdict = "honoured" if reasoning <= limit else "not honoured"
    return f"{sent}: {reasoning} reasoning tokens for {peer.samples} samples: {verdict}"


@contextmanager
def its_hub(venv: Path, vllm_url: str, model: str, samples: int) -> Iterator[str]:
    port = free_port()
    cmd = [str(venv / "bin" / "its-iaas"), "--host", "127.0.0.1", "--port", str(port)]
    with serve(
        cmd, ready_path="/docs", log=LOGS / "peers-its_hub.log", port=port, timeout_s=PEER_START_S
    ) as url:
        # The IaaS takes its algorithm and backend once, for every request (its /configure).
        config = {
            "provider": "openai",
            "endpoint": f"{vllm_url}/v1",
            "api_key": "none",  # required by its config model; vLLM checks none
            "model": model,
            "alg": "self-consistency",
            "regex_patterns": [BOXED],
            "budget": samples,
            "temperature": 1.0,
        }
        r = httpx.post(f"{url}/configure", json=config, timeout=60)
        if r.status_code != 200:
            raise RuntimeError(f"/configure: HTTP {r.status_code} {r.text[:200]}")
        yield url


@contextmanager
def optillm(venv: Path, vllm_url: str, model: str) -> Iterator[str]:
    port = free_port()
    cmd = [str(venv / "bin" / "optillm"), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--base-url", f"{vllm_url}/v1", "--model", model]
    # optillm builds its OpenAI client only when a key is in the environment.
    os.environ.setdefault("OPENAI_API_KEY", "none")
    with serve(
        cmd, ready_path="/health", log=LOGS / "peers-optillm.log", port=port, timeout_s=PEER_START_S
    ) as url:
        yield url


def peers(samples: int) -> dict[str, _Peer]:
    s = str(samples)
    return {
        "thinkgate": _Peer(
            name="thinkgate",
            samples=samples,
            how=f"headers `X-Strategy: self-consistency`, `X-Budget-Samples: {s}`",
            headers={"X-Strategy": "self-consistency", "X-Budget-Samples": s},
        ),
        "its_hub": _Peer(
            name="its_hub",
            samples=samples,
            how=f"`POST /configure` (algorithm, regex, backend: global), `X-ITS-Budget: {s}`",
            headers={"X-ITS-Budget": s},
        ),
        "optillm-sc": _Peer(
            name="optillm-sc",
            samples=5,
            how="body `optillm_approach: self_consistency` (5 samples, fixed in its code)",
            body={"optillm_approach": "self_consistency"},
        ),
        "optillm-mv": _Peer(
            name="optillm-mv",
            samples=samples,
            how=f"body `optillm_approach: majority_voting`, `k: {s}` (plugin)",
            body={"optillm_approach": "majority_voting", "k": samples},
        ),
    }


def run(args: argparse.Namespace) -> list[_Row]:
    questions = make_questions("test", args.questions, seed=args.seed, min_ops=9, max_ops=12)
    model = str(model_path("base"))
    table = peers(args.samples)
    wanted = [p for p in args.peers.split(",") if p]
    rows: list[_Row] = []
    # thinkgate's plugin: every engine spins 1 ms, not vLLM's 1 s (benchmarks/overhead.py).
    os.environ["THINKGATE_ENGINE_SPIN_MS"] = "1"
    LOGS.mkdir(parents=True, exist_ok=True)

    def failed(name: str, what: str) -> _Row:
        p = table[name]
        return _Row(name=name, samples=p.samples, how=p.how, error=what)

    if "thinkgate" in wanted:
        log = LOGS / "peers-thinkgate.log"
        try:
            # No reward engine: self-consistency does not score, and it would take a core.
            tg_flags = ("--reward-model", "none", "--max-n", str(args.samples))
            with thinkgate(model, *tg_flags, log=log) as url:
                rows.append(
                    asyncio.run(
                        _run_peer(url, table["thinkgate"], questions, args.concurrency, None)
                    )
                )
        except Exception as e:
            rows.append(failed("thinkgate", f"{type(e).__name__}: {e}"))
        print(json.dumps(asdict(rows[-1]), indent=1), flush=True)
    on_vllm = [p for p in wanted if p != "thinkgate"]
    if not on_vllm:
        return rows
    venv = Path(args.peers_venv)
    with vllm_server(model, *ENGINE_FLAGS, log=LOGS / "peers-vllm.log") as vllm_url:
        served = httpx.get(f"{vllm_url}/v1/models", timeout=10).json()["data"][0]["id"]

        def measure(name: str, url: str) -> None:
            try:
                rows.append(
                    asyncio.run(_run_peer(url, table[name], questions, args.concurrency, vllm_url))
                )
            except Exception as e:
                rows.append(failed(name, f"{type(e).__name__}: {e}"))
            print(json.dumps(asdict(rows[-1]), indent=1), flush=True)

        if "its_hub" in on_vllm:
            try:
                with its_hub(venv, vllm_url, served, args.samples) as hub_url:
                    measure("its_hub", hub_url)
            except Exception as e:
                rows.append(failed("its_hub", f"could not start: {type(e).__name__}: {e}"))
        opt = [p for p in on_vllm if p.startswith("optillm")]
        if opt:
            try:
                with optillm(venv, vllm_url, served) as opt_url:
                    for name in opt:
                        measure(name, opt_url)
            except Exception as e:
                for name in opt:
                    if not any(r.name == name for r in rows):
                        rows.append(failed(name, f"could not start: {type(e).__name__}: {e}"))
    return rows


def _num(x: float | None, fmt: str = "{:.0f}") -> str:
    return "not reported" if x is None else fmt.format(x)


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def _write_report(args: argparse.Namespace, rows: Sequence[_Row], seconds: float, sha: str) -> str:
    versions = _peer_versions(Path(args.peers_venv))
    names = [r.name for r in rows]
    head = "| | " + " | ".join(names) + " |"
    rule = "|---|" + "---|" * len(rows)

    def line(label: str, cells: Sequence[str]) -> str:
        return f"| {label} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    def cell(r: _Row, text: str) -> str:
        return f"did not run: {r.error}" if r.error else text

    lines = [
        "# Self-consistency through thinkgate and its peers (thinkgate bench peers)",
        "",
        f"{args.questions} held-out testbed questions (test split, 9-12 operations, seed "
        f"{args.seed}), temperature 1, max_tokens {MAX_TOKENS}, {args.concurrency} questions "
        "in flight per peer, one run, a warm-up question first. thinkgate serves the testbed "
        "`base` model in process (`thinkgate serve --reward-model none --max-n 16`); "
        "its_hub and optillm front vLLM's own OpenAI server on the "
        "same model and engine settings (float32, 512-token context, 64 sequences, the "
        "model in the engine core on CPU), without a reasoning parser: vLLM's "
        "`deepseek_r1` parser returns "
        "`content: null` on this model (`</think>` is a special token, dropped from the "
        "text it splits) and neither peer can ask for `skip_special_tokens: false`, so "
        "they vote over the whole text, answer last. Tokens are means per question. "
        f"Peers: {versions}. Total {seconds / 60:.1f} min.",
        "",
        "## Measured",
        "",
        head,
        rule,
        line("samples per question", [str(r.samples) for r in rows]),
        line("how it is asked for", [r.how for r in rows]),
        line("questions / s", [cell(r, f"{r.qps:.3f}") for r in rows]),
        line("accuracy %", [cell(r, f"{r.accuracy:.1f}") for r in rows]),
        line(
            "failed questions",
            [cell(r, f"{r.failed}" + (f" ({r.first_failure})" if r.failed else "")) for r in rows],
        ),
        line("prompt tokens billed", [cell(r, _num(r.prompt_billed)) for r in rows]),
        line("completion tokens billed", [cell(r, _num(r.completion_billed)) for r in rows]),
        line("reasoning tokens billed", [cell(r, _num(r.reasoning_billed)) for r in rows]),
        line(
            "vLLM counted: requests / prompt / generated tokens",
            [
                cell(
                    r,
                    "in process (one `n` request)"
                    if r.engine_prompt is None
                    else f"{_num(r.engine_requests, '{:.1f}')} / {_num(r.engine_prompt)} / "
                    f"{_num(r.engine_completion)}",
                )
                for r in rows
            ],
        ),
        "",
        "## What each returns and could not do",
        "",
        head,
        rule,
        line(
            "prompt the model sees",
            [cell(r, f"{PROMPT_SENT.get(r.name, '')}{_per_call(r)}") for r in rows],
        ),
        line("usage fields", [cell(r, ", ".join(r.usage_keys) or "none") for r in rows]),
        line("message fields", [cell(r, ", ".join(r.message_keys)) for r in rows]),
        line("reasoning split", [cell(r, r.reasoning_split) for r in rows]),
        line("vote metadata", [cell(r, r.metadata) for r in rows]),
        line("streaming (`stream: true`)", [cell(r, r.streaming) for r in rows]),
        line("per-sample `max_tokens`", [cell(r, r.max_tokens_probe) for r in rows]),
        line("thinking budget", [cell(r, r.thinking_budget) for r in rows]),
        line("strategy per request", [STRATEGY_CHOICE.get(r.name, "") for r in rows]),
        "",
        'Rows from probes are one request each (the first question); "strategy per '
        'request" and "prompt the model sees" are read from the peers\' source.',
        "",
        "Why the peers' numbers look as they do (their source, the versions above): "
        "its_hub's IaaS builds each call from the budget, endpoint, model and key only "
        "(`_build_its_config`), so a request's `temperature` and `max_tokens` never reach "
        "vLLM (its defaults apply: temperature 1, the rest of the context), and it bills "
        "the prompt once per sample. optillm's `self_consistency` draws 5 samples one "
        "after another whatever is asked, skips samples cut by `max_tokens` (and does "
        "not bill them), and groups answers by text similarity of the whole response "
        "(`difflib` ratio >= 0.8), not by their final answer: long reasoning texts rarely "
        "match, so it mostly returns the first sample. Its `majority_voting` plugin asks "
        "vLLM for `n = k` in one call but votes on the whole text when no `Answer:` "
        "pattern is found. Both optillm paths reshape the prompt (an empty system turn, "
        "the chat flattened to `User: ...`), which this small testbed model, trained on "
        "its exact chat template, answers worse than the chat as sent. optillm bills "
        "no prompt tokens and "
        "reports `reasoning_tokens` from a regex over `<think>` tags.",
        "",
        "![questions per second, accuracy and tokens per peer](peers.png)",
        "",
        f"Machine: {machine()}, shared with other jobs while it ran (the peers run one "
        "after another, so load drift between them is not cancelled: questions per "
        f"second are indicative). Commit {sha} (and uncommitted work in the tree).",
        "",
        f"Command: `.venv/bin/python -m benchmarks.peers --questions {args.questions} "
        f"--samples {args.samples} --concurrency {args.concurrency} --seed {args.seed} "
        f"--peers {args.peers} --peers-venv {args.peers_venv}`. The peers' venv: "
        f"`bash scripts/peers-venv.sh {args.peers_venv}` (its_hub, and optillm without "
        "pip's resolver, which backtracks for minutes; the script says why).",
        "",
    ]
    return "\n".join(lines)


def _per_call(r: _Row) -> str:
    if r.engine_prompt is None or not r.engine_requests:
        return ""
    return f"; {r.engine_prompt / r.engine_requests:.0f} prompt tokens per vLLM request"


# From the peers' source (optillm server.py parse_conversation; its_hub's LM client).
PROMPT_SENT = {
    "thinkgate": "the chat as sent, prefilled once for all samples",
    "its_hub": "the chat as sent, once per sample (prefix cache shares it)",
    "optillm-sc": "an empty system turn, then the chat flattened into one user turn `User: ...`",
    "optillm-mv": "an empty system turn, then the chat flattened into one user turn `User: ...`",
}

STRATEGY_CHOICE = {
    "thinkgate": "yes: `X-Strategy` header or body field, budgets in headers",
    "its_hub": "no: one algorithm for the whole server (`POST /configure`); per request "
    "only the budget",
    "optillm-sc": "yes: `optillm_approach` or a model-name prefix; no per-request sample count",
    "optillm-mv": "yes: `optillm_approach` or a model-name prefix; `k` per request",
}


def _peer_versions(venv: Path) -> str:
    py = venv / "bin" / "python"
    if not py.exists():
        return f"no peers venv at {venv}"
    code = (
        "import importlib.metadata as m\n"
        "for p in ('its_hub', 'optillm', 'vllm'):\n"
        "    try: print(p, m.version(p))\n"
        "    except m.PackageNotFoundError: print(p, 'not installed')\n"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True).stdout
    return ", ".join(out.strip().splitlines()[:2])


def _plot(rows: Sequence[_Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in rows if r.error is None]
    names = [f"{r.name}\n({r.samples} samples)" for r in ran]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    axes[0].bar(names, [r.qps for r in ran], color="tab:blue")
    axes[0].set_ylabel("questions / s")
    axes[1].bar(names, [r.accuracy for r in ran], color="tab:green")
    axes[1].set_ylabel("accuracy (%)")
    xs = range(len(ran))
    billed = [r.completion_billed or 0.0 for r in ran]
    # No orange bar where vLLM's count is not separate from the bill (thinkgate in process).
    engine = [r.engine_completion if r.engine_completion is not None else float("nan") for r in ran]
    axes[2].bar([x - 0.2 for x in xs], billed, width=0.4, label="billed")
    axes[2].bar([x + 0.2 for x in xs], engine, width=0.4, label="generated (vLLM's count)")
    axes[2].set_xticks(list(xs), names)
    axes[2].set_ylabel("completion tokens / question")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Self-consistency on the testbed: thinkgate vs its_hub and optillm on vLLM")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if "--load" in given:  # thinkgate bench peers --load: DeepConf and SC at 1/4/16 clients
        from benchmarks import peers_load

        return peers_load.main([a for a in given if a != "--load"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--peers", default="thinkgate,its_hub,optillm-sc,optillm-mv")
    parser.add_argument("--peers-venv", default="/work/peers-venv")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite peers.md from peers.json"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        saved = json.loads((RESULTS / "peers.json").read_text())
        rows = [_Row(**r) for r in saved["rows"]]
        seconds = float(saved["seconds"])
        sha = str(saved.get("commit", "unknown"))
    else:
        t0 = time.perf_counter()
        sha = _commit()
        rows = run(args)
        seconds = time.perf_counter() - t0
        (RESULTS / "peers.json").write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "commit": sha,
                    "seconds": seconds,
                    "rows": [asdict(r) for r in rows],
                },
                indent=1,
            )
        )
    report = _write_report(args, rows, seconds, sha)
    (RESULTS / "peers.md").write_text(report)
    _plot(rows, RESULTS / "peers.png")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
