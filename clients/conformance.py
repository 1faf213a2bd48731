"""``thinkgate conformance --base-url URL``: what a test-time-scaling server owes its
clients, checked against any server that speaks OpenAI's chat completions (thinkgate,
vLLM, a router in front of either). Generic checks run everywhere; the strategy and budget
checks run where the server answers with thinkgate's ``X-Budget-Applied`` header, and are
reported skipped elsewhere.

* ``n-choices``: ``n`` > 1 is ``n`` choices in schema, and usage covers them all;
* ``n-stream``: a streamed ``n`` > 1 ends every choice, and its usage chunk covers all;
* ``length-cut``: ``max_tokens`` cuts with ``finish_reason: length`` and is honoured;
* ``fan-out-usage``: a k-sample strategy on the argmax path (``top_k`` 1) bills k times
  one sample's tokens (usage summed over the fan-out, not the chosen answer's alone);
* ``strategy-schema``: a strategy's answer is a chat completion in schema, with its
  ``thinkgate`` object;
* ``progress-while-sampling``: several samples at once show their work as they run (a
  streamed ``n`` 2 interleaves their reasoning; a strategy reports each sample's end
  before its answer);
* ``budget-cut``: a total-token ceiling is honoured, and the cut says ``length``;
* ``thinking-budget``: a thinking budget is honoured per sample.

Exit status 0 when nothing failed (skips allowed); ``--json`` prints one object per check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

QUESTION = "Compute 3+4 mod 10."
FINISH = {"stop", "length", "tool_calls", "content_filter"}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # "pass", "fail" or "skip"
    detail: str
    seconds: float = 0.0


class Failed(Exception):
    """A check's finding: what the server did against what it owes."""


class Skipped(Exception):
    """The check does not apply to this server (it is not thinkgate, or the model does
    not reason)."""


@dataclass(slots=True)
class Server:
    client: httpx.AsyncClient
    model: str
    thinkgate: bool = False

    async def chat(self, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
        payload = {"model": self.model, "messages": [{"role": "user", "content": QUESTION}]}
        return await self.client.post(
            "/v1/chat/completions", json={**payload, **body}, headers=headers or {}
        )

    async def answer(self, **body: Any) -> dict[str, Any]:
        r = await self.chat(**body)
        _expect(r.status_code == 200, f"status {r.status_code}: {r.text[:300]}")
        out: dict[str, Any] = r.json()
        return out

    async def stream(self, **body: Any) -> list[dict[str, Any]]:
        """The stream's JSON chunks, in order."""
        return [event for kind, event in await self.events(**body) if kind == "data"]

    async def events(self, **body: Any) -> list[tuple[str, dict[str, Any]]]:
        """The stream in order: ``("data", chunk)``, and ``("progress", data)`` for each
        ``: thinkgate.progress`` comment (other comments, keep-alives, are left out)."""
        payload = {"model": self.model, "messages": [{"role": "user", "content": QUESTION}]}
        out: list[tuple[str, dict[str, Any]]] = []
        done = False
        async with self.client.stream(
            "POST", "/v1/chat/completions", json={**payload, **body, "stream": True}
        ) as r:
            _expect(r.status_code == 200, f"status {r.status_code}")
            async for line in r.aiter_lines():
                if line.startswith(": thinkgate.progress "):
                    out.append(("progress", json.loads(line.split(" ", 2)[2])))
                elif line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    out.append(("data", json.loads(line[6:])))
        _expect(done, "the stream did not end with data: [DONE]")
        return out

    def need_thinkgate(self) -> None:
        if not self.thinkgate:
            raise Skipped("not a thinkgate server (no X-Budget-Applied header)")


def _expect(ok: bool, why: str) -> None:
    if not ok:
        raise Failed(why)


def _choices_in_schema(body: dict[str, Any], n: int) -> None:
    _expect(body.get("object") == "chat.completion", f"object is {body.get('object')!r}")
    choices = body.get("choices") or []
    _expect(sorted(c.get("index") for c in choices) == list(range(n)), f"{len(choices)} choices")
    for c in choices:
        message = c.get("message") or {}
        _expect(message.get("role") == "assistant", f"choice {c.get('index')}: role")
        _expect(c.get("finish_reason") in FINISH, f"finish_reason {c.get('finish_reason')!r}")
    usage = body.get("usage") or {}
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    _expect(prompt > 0 and completion >= n, f"usage {usage}")
    _expect(usage.get("total_tokens") == prompt + completion, f"total_tokens in {usage}")


async def n_choices(s: Server) -> str:
    body = await s.answer(n=3, max_tokens=48, temperature=1.0, seed=1)
    _choices_in_schema(body, 3)
    completion = body["usage"]["completion_tokens"]
    _expect(completion <= 3 * 48, f"{completion} completion tokens over 3 x max_tokens 48")
    return f"3 choices, {completion} completion tokens"


async def n_stream(s: Server) -> str:
    chunks = await s.stream(n=2, max_tokens=48, stream_options={"include_usage": True})
    ended = {
        c["index"] for k in chunks for c in k.get("choices", []) if c.get("finish_reason") in FINISH
    }
    _expect(ended == {0, 1}, f"choices ended: {sorted(ended)}")
    usage = [k["usage"] for k in chunks if k.get("usage")]
    _expect(bool(usage), "no usage chunk (stream_options.include_usage)")
    _expect(usage[-1]["completion_tokens"] >= 2, f"usage {usage[-1]}")
    return f"{len(chunks)} chunks, usage {usage[-1]['completion_tokens']} completion tokens"


async def length_cut(s: Server) -> str:
    body = await s.answer(max_tokens=1, temperature=0)
    choice = body["choices"][0]
    _expect(choice["finish_reason"] == "length", f"finish_reason {choice['finish_reason']!r}")
    _expect(body["usage"]["completion_tokens"] == 1, f"usage {body['usage']}")
    return "max_tokens 1: finish_reason length, 1 token"


async def fan_out_usage(s: Server) -> str:
    s.need_thinkgate()
    # top_k 1: every sample is the argmax path (vLLM refuses n > 1 at temperature 0).
    greedy = {"temperature": 1.0, "top_k": 1, "seed": 7, "max_tokens": 96}
    one = await s.answer(**greedy)
    many = await s.answer(**greedy, strategy="self-consistency", budget={"samples": 3})
    drawn = many.get("thinkgate", {}).get("samples")
    _expect(isinstance(drawn, int) and drawn >= 1, f"thinkgate.samples {drawn!r}")
    single, billed = one["usage"]["completion_tokens"], many["usage"]["completion_tokens"]
    _expect(
        billed == drawn * single,
        f"{drawn} greedy samples billed {billed} tokens, one sample is {single}",
    )
    return f"{drawn} samples x {single} tokens = {billed} billed"


async def strategy_schema(s: Server) -> str:
    s.need_thinkgate()
    r = await s.chat(
        headers={"X-Strategy": "self-consistency", "X-Budget-Samples": "2"}, max_tokens=96
    )
    _expect(r.status_code == 200, f"status {r.status_code}: {r.text[:300]}")
    body = r.json()
    _choices_in_schema(body, 1)
    info = body.get("thinkgate") or {}
    _expect(info.get("strategy") == "self-consistency", f"thinkgate {info}")
    _expect("samples=2" in r.headers.get("X-Budget-Applied", ""), "X-Budget-Applied")
    return f"X-Budget-Applied: {r.headers['X-Budget-Applied']}"


def _reasoning(delta: dict[str, Any]) -> bool:
    return bool(delta.get("reasoning_content") or delta.get("reasoning"))


async def progress_while_sampling(s: Server) -> str:
    """Several samples at once show their work as they run: a streamed ``n`` 2 interleaves
    both samples' reasoning before either ends; a thinkgate strategy reports each sample's
    end (``: thinkgate.progress``) before its answer streams."""
    chunks = await s.stream(n=2, max_tokens=96, temperature=1.0, seed=3)
    order = [
        (c["index"], "end" if c.get("finish_reason") else "reasoning")
        for k in chunks
        for c in k.get("choices", [])
        if c.get("finish_reason") or _reasoning(c.get("delta") or {})
    ]
    if not any(kind == "reasoning" for _, kind in order):
        raise Skipped("the model's answers carry no reasoning")
    first_end = next((i for i, (_, kind) in enumerate(order) if kind == "end"), len(order))
    thinking = {index for index, kind in order[:first_end] if kind == "reasoning"}
    _expect(thinking == {0, 1}, f"reasoning of samples {sorted(thinking)} before the first end")
    if not s.thinkgate:
        return "n 2: both samples' reasoning streamed before either ended"
    events = await s.events(strategy="self-consistency", budget={"samples": 3}, max_tokens=96)
    first_data = next((i for i, (kind, _) in enumerate(events) if kind == "data"), len(events))
    reports = [e for kind, e in events[:first_data] if kind == "progress"]
    done = {r.get("samples_done") for r in reports if "samples_done" in r}
    _expect(len(done) >= 3, f"progress before the answer: {reports[:5]}")
    return f"n 2 interleaved; {len(reports)} progress reports before a 3-sample answer"


async def budget_cut(s: Server) -> str:
    s.need_thinkgate()
    body = await s.answer(strategy="self-consistency", budget={"samples": 4, "tokens": 24})
    completion = body["usage"]["completion_tokens"]
    _expect(completion <= 24, f"{completion} completion tokens past the ceiling of 24")
    reasons = {c["finish_reason"] for c in body["choices"]}
    cut = body.get("thinkgate", {}).get("budget_cut") or any(
        c.get("thinkgate", {}).get("budget_cut") for c in body["choices"]
    )
    _expect(reasons <= FINISH, f"finish_reason {reasons}")
    _expect("length" in reasons or not cut, f"a budget cut ended with {reasons}")
    return f"{completion} tokens within 24, finish {sorted(reasons)}"


async def thinking_budget(s: Server) -> str:
    s.need_thinkgate()
    r = await s.chat(
        headers={"X-Strategy": "elastic", "X-Budget-Thinking": "8"}, max_tokens=64, temperature=0
    )
    _expect(r.status_code == 200, f"status {r.status_code}: {r.text[:300]}")
    usage = r.json()["usage"]
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if not isinstance(reasoning, int):
        raise Failed(f"no reasoning_tokens in {usage}")
    # The budget counts thinking tokens; the closing </think> may be billed beside them.
    _expect(reasoning <= 8 + 1, f"{reasoning} reasoning tokens past a thinking budget of 8")
    return f"{reasoning} reasoning tokens under a budget of 8"


CHECKS: dict[str, Callable[[Server], Awaitable[str]]] = {
    "n-choices": n_choices,
    "n-stream": n_stream,
    "length-cut": length_cut,
    "fan-out-usage": fan_out_usage,
    "strategy-schema": strategy_schema,
    "progress-while-sampling": progress_while_sampling,
    "budget-cut": budget_cut,
    "thinking-budget": thinking_budget,
}


async def connect(client: httpx.AsyncClient, model: str | None) -> Server:
    """The server and the model the checks ask (the first ``/v1/models`` lists when none
    is named); whether it is thinkgate, from a first answer's headers."""
    if model is None:
        listed = await client.get("/v1/models")
        listed.raise_for_status()
        model = str(listed.json()["data"][0]["id"])
    server = Server(client, model)
    probe = await server.chat(max_tokens=4)
    server.thinkgate = "X-Budget-Applied" in probe.headers
    return server


async def run_checks(
    client: httpx.AsyncClient,
    model: str | None = None,
    names: Sequence[str] = tuple(CHECKS),
    report: Callable[[Check], None] = lambda c: None,
) -> list[Check]:
    server = await connect(client, model)
    out: list[Check] = []
    for name in names:
        started = time.perf_counter()
        try:
            check = Check(name, "pass", await CHECKS[name](server))
        except Skipped as why:
            check = Check(name, "skip", str(why))
        except (Failed, KeyError, TypeError, ValueError, httpx.HTTPError) as why:
            check = Check(name, "fail", f"{type(why).__name__}: {why}")
        check = Check(check.name, check.status, check.detail, time.perf_counter() - started)
        report(check)
        out.append(check)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="thinkgate conformance", description=__doc__.split("\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server's root URL")
    p.add_argument("--model", default=None, help="default: the first /v1/models lists")
    p.add_argument("--api-key", default=None, help="sent as a bearer token")
    p.add_argument("--only", default="", help="comma-separated check names (default: all)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--json", action="store_true", help="one JSON object per check")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(CHECKS)
    unknown = sorted(set(names) - set(CHECKS))
    if unknown:
        p.error(f"--only: unknown checks {unknown}; checks: {', '.join(CHECKS)}")

    def report(c: Check) -> None:
        if args.json:
            print(json.dumps(asdict(c)), flush=True)
        else:
            print(f"{c.status.upper():4s}  {c.name:25s} {c.seconds:6.1f} s  {c.detail}", flush=True)

    async def go() -> list[Check]:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        base = args.base_url.rstrip("/").removesuffix("/v1")
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=args.timeout) as c:
            return await run_checks(c, args.model, names, report)

    try:
        checks = asyncio.run(go())
    except httpx.HTTPError as exc:
        print(f"thinkgate conformance: cannot reach {args.base_url}: {exc}", file=sys.stderr)
        return 2
    failed = [c.name for c in checks if c.status == "fail"]
    passed = sum(c.status == "pass" for c in checks)
    skipped = sum(c.status == "skip" for c in checks)
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
