"""its_hub's particle filtering and beam search on vLLM's own servers: the its_hub side of
``thinkgate bench search-peers`` (benchmarks/search_peers.py), run INSIDE the peers'
virtual environment.

    /work/peers-venv/bin/python benchmarks/search_peers_its_hub.py \\
        --vllm-url http://127.0.0.1:8711 --prm-url http://127.0.0.1:8712 \\
        --algorithm particle-filtering --budget 4 \\
        --questions-file q.jsonl --concurrency 2 --out its_hub-pf.jsonl

Standalone on purpose: stdlib + its_hub (+ the ``requests`` it installs), nothing from
thinkgate (whose modules need vLLM and our pinned versions). Why the library API and not
its IaaS server: its_hub 1.2.0's IaaS accepts only ``self-consistency``
(``its_hub.core.gateway.SUPPORTED_ALGORITHMS``); ``ParticleFiltering`` and ``BeamSearch``
exist only as library classes. Its own PRM class (``core/reward_models/local_vllm_prm.py``)
needs the ``experimental`` extra (reward_hub, transformers) and loads vLLM in its own
process on a device; here both sides use one PRM served by vLLM (``POST /pooling``,
STEP pooling at the newline), through ``_VllmPoolingPRM`` below. Notes:
``benchmarks/its_hub_search_notes.md``.

How its_hub drives the model (its source): ``StepGeneration.aforward`` sends, per live
particle and per step, one ``POST {endpoint}/chat/completions`` with the user turn plus an
assistant turn holding every step so far (``continue_final_message: true``, ``stop`` = the
step token), all particles of a step concurrently (``asyncio.gather``, a new aiohttp
session per step); then one ``prm.ascore(prompt, [text of each live particle])``.

Questions file (JSONL), written by the driver in the main venv:
``{"id": ..., "prompt": "Compute 3+8-5+7 mod 10.", "answer": 3}`` where ``prompt`` is the
user message exactly as ``testbed.task.Question.prompt`` (the server's chat template adds
the turn markers, as ``testbed.tokenizer.chat_prompt`` does); or ``{"messages": [{"role":
"user", "content": ...}], "answer": ...}`` with one user turn (its content is used: its_hub
turns a message list into ``"user: ..."`` text before sending it as the user turn).

Output (JSONL, one line per question) and a summary (``--summary``, default
``<out>.summary.json``, also printed): answers, correctness, wall seconds, tokens billed by
vLLM's responses to its_hub's calls (its_hub's StepGeneration passes no usage accumulator,
so this script collects the ``usage`` of every response), PRM calls and tokens, and for the
whole run vLLM's own counters from ``/metrics`` before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import random
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import its_hub
import numpy as np
import requests
from its_hub.api import AbstractProcessRewardModel, ChatMessage, ChatMessages, GenerationUsage
from its_hub.core.algorithms.beam_search import BeamSearch
from its_hub.core.algorithms.particle_gibbs import ParticleFiltering
from its_hub.core.lms.openai_lm import OpenAICompatibleLanguageModel
from its_hub.core.lms.step_generation import StepGeneration

# The testbed's chat template up to the generation prompt (testbed.tokenizer.chat_prompt):
# what the generator saw before the assistant text, so the PRM scores the same sequence.
TESTBED_PREFIX = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n"
BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
THINK_END = "</think>"


@dataclass
class _QuestionStats:
    """What one question cost: every LM response's usage and every PRM call."""

    usage: GenerationUsage = field(default_factory=GenerationUsage)
    prm_calls: int = 0
    prm_texts: int = 0
    prm_prompt_tokens: int = 0
    prm_s: float = 0.0


CURRENT: contextvars.ContextVar[_QuestionStats | None] = contextvars.ContextVar(
    "its_hub_question", default=None
)


class _CountingLM(OpenAICompatibleLanguageModel):  # type: ignore[misc]
    """its_hub's own OpenAI-compatible LM, two additions only:

    - the usage of every response is added to the running question's counters (its
      ``agenerate`` takes a ``usage_accumulator``; ``StepGeneration`` never passes one);
    - ``skip_special_tokens: false`` is sent when asked (``keep_special``): on the testbed
      ``</think>`` is a special token, which vLLM drops from the text by default, and
      its_hub re-sends the text as the next prompt, so without it the model never sees
      that it stopped thinking (its_hub has no field for it: ``_prepare_request_data``
      builds the body from a fixed list).
    """

    def __init__(self, *args: Any, keep_special: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep_special = keep_special

    def _prepare_request_data(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        data: dict[str, Any] = super()._prepare_request_data(*args, **kwargs)
        if self.keep_special:
            data["skip_special_tokens"] = False
        return data

    async def agenerate(self, *args: Any, **kwargs: Any) -> Any:
        stats = CURRENT.get()
        if stats is not None and kwargs.get("usage_accumulator") is None:
            kwargs["usage_accumulator"] = stats.usage
        return await super().agenerate(*args, **kwargs)


class _VllmPoolingPRM(AbstractProcessRewardModel):  # type: ignore[misc]
    """its_hub's PRM interface over a vLLM pooling server (``POST /pooling``,
    ``task: token_classify``) serving ``Qwen2ForProcessRewardModel`` with STEP pooling at
    the step tag (the testbed: the newline; ``--pooler-config '{"step_tag_id": 47}'``).

    its_hub calls ``await prm.ascore(prompt, [response, ...])`` once per step with the text
    of every live path (``StepGeneration._post_process(steps, stopped=True)``: the steps
    joined by the step token, no token after the last) and wants one float in [0, 1] per
    response (particle filtering takes its logit as the log weight; beam search sorts by
    it). Like reward_hub's PRM behind its_hub's ``LocalVllmProcessRewardModel`` (split at
    the step separator, a tag after every step, the last included), the text sent is the
    prompt as the generator saw it, the response, and a step tag after the last step when
    the response does not end with one, except once the thinking is over (past
    ``</think>``: the answer line is no step, the PRM's last reward is the one at the
    newline after ``</think>``). All texts of a call go in one request; vLLM tokenises.
    Rewards at tags inside the prompt are dropped. Aggregation over the steps: ``last``
    (reward_hub's ``PRMResult`` default), ``min`` or ``prod``.
    """

    def __init__(
        self,
        url: str,
        *,
        model: str,
        prefix: str = TESTBED_PREFIX,
        step_tag: str = "\n",
        aggregation: str = "last",
        timeout_s: float = 300.0,
    ) -> None:
        if aggregation not in ("last", "min", "prod"):
            raise ValueError(f"unknown aggregation {aggregation!r}")
        self.url = url.rstrip("/") + "/pooling"
        self.model = model
        self.prefix = prefix
        self.step_tag = step_tag
        self.aggregation = aggregation
        self.timeout_s = timeout_s
        self._session = requests.Session()

    def text_for(self, prompt: str, response: str) -> tuple[str, int]:
        """(text to score, number of tags in the prompt part)."""
        head = self.prefix.format(prompt=prompt)
        past_thinking = THINK_END in response and not response.rstrip().endswith(THINK_END)
        if not response.endswith(self.step_tag) and not past_thinking:
            response += self.step_tag
        return head + response, head.count(self.step_tag)

    def _aggregate(self, rewards: list[float]) -> float:
        if not rewards:
            return 0.5  # nothing to judge yet: no preference
        if self.aggregation == "last":
            return rewards[-1]
        if self.aggregation == "min":
            return min(rewards)
        return float(np.prod(rewards))

    def _post(self, texts: list[str]) -> dict[str, Any]:
        body = {"model": self.model, "input": texts, "task": "token_classify"}
        r = self._session.post(self.url, json=body, timeout=self.timeout_s)
        if r.status_code != 200:
            raise RuntimeError(f"PRM server: HTTP {r.status_code} {r.text[:300]}")
        data: dict[str, Any] = r.json()
        return data

    def step_rewards(self, prompt: str, responses: list[str]) -> list[list[float]]:
        pairs = [self.text_for(prompt, resp) for resp in responses]
        t0 = time.perf_counter()
        data = self._post([text for text, _ in pairs])
        stats = CURRENT.get()
        if stats is not None:
            stats.prm_calls += 1
            stats.prm_texts += len(pairs)
            stats.prm_prompt_tokens += int((data.get("usage") or {}).get("prompt_tokens") or 0)
            stats.prm_s += time.perf_counter() - t0
        items = sorted(data["data"], key=lambda item: item["index"])
        out: list[list[float]] = []
        for (text, skip), item in zip(pairs, items, strict=True):
            rows = item["data"]
            if len(rows) != text.count(self.step_tag):
                raise RuntimeError(
                    f"PRM returned {len(rows)} rewards for {text.count(self.step_tag)} step "
                    "tags: serve it with STEP pooling at the step tag "
                    "(--pooler-config '{\"step_tag_id\": N}')"
                )
            out.append([float(row[1]) for row in rows[skip:]])  # label 1 = right
        return out

    async def ascore(
        self, prompt_or_messages: str | list[ChatMessage] | ChatMessages, steps: list[str]
    ) -> list[float]:
        prompt = prompt_or_messages
        if not isinstance(prompt, str):
            prompt = ChatMessages.from_prompt_or_messages(prompt).to_prompt()
        single = isinstance(steps, str)
        responses: list[str] = [steps] if isinstance(steps, str) else list(steps)
        # In a thread, as its_hub's own PRM does (to_thread keeps the question's counters).
        rewards = await asyncio.to_thread(self.step_rewards, prompt, responses)
        scores = [self._aggregate(r) for r in rewards]
        return scores[0] if single else scores  # type: ignore[return-value]

    def score(
        self, prompt_or_messages: str | list[ChatMessage] | ChatMessages, steps: list[str]
    ) -> list[float]:
        return asyncio.run(self.ascore(prompt_or_messages, steps))


def _metrics(url: str, names: tuple[str, ...]) -> dict[str, float]:
    """vLLM's own counters (summed over label sets); {} when /metrics cannot be read."""
    try:
        text = requests.get(url.rstrip("/") + "/metrics", timeout=10).text
    except requests.RequestException:
        return {}
    out: dict[str, float] = {}
    for name in names:
        hits = re.findall(rf"^vllm:{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
        out[name] = sum(float(x) for x in hits)
    return out


GEN_COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "request_success_total")
PRM_COUNTERS = ("prompt_tokens_total", "request_success_total")


def _load_questions(path: Path) -> list[dict[str, Any]]:
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        q = json.loads(line)
        if "prompt" not in q:
            msgs = q.get("messages") or []
            users = [m for m in msgs if m.get("role") == "user"]
            if len(msgs) != 1 or len(users) != 1:
                raise ValueError(f"question {i}: want `prompt` or one user message")
            q["prompt"] = users[0]["content"]
        q.setdefault("id", i)
        out.append(q)
    return out


def _final_answer(text: str) -> str | None:
    found = BOXED.findall(text)
    return found[-1] if found else None


def _served_model(url: str) -> str:
    data = requests.get(url.rstrip("/") + "/v1/models", timeout=30).json()["data"]
    return str(data[0]["id"])


def _build(args: argparse.Namespace, prm: _VllmPoolingPRM) -> Any:
    sg = StepGeneration(
        max_steps=args.max_steps,
        step_token=args.step_token,
        stop_token=args.stop_token,
        temperature=args.temperature,
        include_stop_str_in_output=False,
    )
    if args.algorithm == "particle-filtering":
        # ParticleFiltering's own defaults: argmax of the final log weights; its
        # resampling_method argument is not passed on (multinomial whatever is asked).
        return ParticleFiltering(sg, prm, final_response_selection=args.selection)
    width = args.beam_width or max(1, args.budget // 4)
    if args.budget % width:
        raise SystemExit(f"--budget {args.budget} must be a multiple of --beam-width {width}")
    return BeamSearch(sg, prm, beam_width=width)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    random.seed(args.seed)  # its_hub resamples with `random` and `np.random`
    np.random.seed(args.seed)
    questions = _load_questions(Path(args.questions_file))[: args.limit or None]
    model = args.model or _served_model(args.vllm_url)
    prm_model = args.prm_model or _served_model(args.prm_url)
    endpoint = args.vllm_url.rstrip("/")
    endpoint = endpoint if endpoint.endswith("/v1") else endpoint + "/v1"
    lm = _CountingLM(
        endpoint=endpoint,
        api_key="none",  # vLLM checks none; its_hub sends it as a bearer token
        model_name=model,
        keep_special=not args.skip_special_tokens,
        max_concurrency=args.max_lm_concurrency,
    )
    prm = _VllmPoolingPRM(
        args.prm_url, model=prm_model, aggregation=args.aggregation, step_tag=args.step_token
    )
    alg = _build(args, prm)
    gate = asyncio.Semaphore(args.concurrency)

    async def one(q: dict[str, Any]) -> dict[str, Any]:
        async with gate:
            stats = _QuestionStats()
            CURRENT.set(stats)
            t0 = time.perf_counter()
            row: dict[str, Any] = {"id": q["id"], "gold": q.get("answer")}
            try:
                infer = alg.ainfer(lm, q["prompt"], args.budget, return_response_only=False)
                # A client's deadline (its_hub has none of its own): past it, no answer.
                result = await asyncio.wait_for(infer, timeout=args.deadline_s)
                text = str(result.the_one.get("content") or "")
                row["answer_text"] = text
                row["selected_index"] = int(result.selected_index)
                if hasattr(result, "steps_used_lst"):
                    row["steps_used"] = list(result.steps_used_lst)
                    row["log_weights"] = [round(float(w), 4) for w in result.log_weights_lst]
                else:
                    row["steps_used"] = list(result.steps_used)
                    row["scores"] = [round(float(s), 4) for s in result.scores]
            except TimeoutError:
                row["late"] = True
                text = ""
            except Exception as e:  # a failed question is a wrong answer, counted
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                text = ""
            row["wall_s"] = round(time.perf_counter() - t0, 3)
            answer = _final_answer(text)
            row["answer"] = answer
            gold = q.get("answer")
            row["correct"] = answer is not None and gold is not None and answer == str(gold)
            row["prompt_tokens"] = stats.usage.prompt_tokens
            row["completion_tokens"] = stats.usage.completion_tokens
            row["lm_calls"] = stats.usage.num_calls
            row["prm_calls"] = stats.prm_calls
            row["prm_texts"] = stats.prm_texts
            row["prm_prompt_tokens"] = stats.prm_prompt_tokens
            row["prm_s"] = round(stats.prm_s, 3)
            return row

    gen_before = _metrics(args.vllm_url.removesuffix("/v1"), GEN_COUNTERS)
    prm_before = _metrics(args.prm_url, PRM_COUNTERS)
    t0 = time.perf_counter()
    rows = await asyncio.gather(*(one(q) for q in questions))
    wall = time.perf_counter() - t0
    gen_after = _metrics(args.vllm_url.removesuffix("/v1"), GEN_COUNTERS)
    prm_after = _metrics(args.prm_url, PRM_COUNTERS)
    await lm.close()

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    n = len(rows)

    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before[k] for k in before if k in after}

    summary = {
        "peer": "its_hub",
        "its_hub_version": its_hub.__version__,
        "algorithm": args.algorithm,
        "budget": args.budget,
        "beam_width": getattr(alg, "beam_width", None),
        "aggregation": args.aggregation,
        "max_steps": args.max_steps,
        "step_token": args.step_token,
        "stop_token": args.stop_token,
        "temperature": args.temperature,
        "skip_special_tokens": args.skip_special_tokens,
        "questions": n,
        "concurrency": args.concurrency,
        "wall_s": round(wall, 3),
        "qps": round(n / wall, 4) if wall else None,
        "accuracy": round(100.0 * sum(r["correct"] for r in rows) / n, 2) if n else None,
        "failed": sum(1 for r in rows if "error" in r),
        "mean_question_s": round(statistics.fmean(r["wall_s"] for r in rows), 3) if n else None,
        "billed_prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "billed_completion_tokens": sum(r["completion_tokens"] for r in rows),
        "lm_calls": sum(r["lm_calls"] for r in rows),
        "prm_calls": sum(r["prm_calls"] for r in rows),
        "prm_prompt_tokens": sum(r["prm_prompt_tokens"] for r in rows),
        "vllm_counted": delta(gen_before, gen_after),
        "prm_server_counted": delta(prm_before, prm_after),
    }
    Path(args.summary or f"{args.out}.summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-url", required=True, help="vLLM OpenAI server (with or without /v1)")
    p.add_argument("--prm-url", required=True, help="vLLM pooling server with the PRM")
    p.add_argument("--algorithm", required=True, choices=("particle-filtering", "beam-search"))
    p.add_argument("--budget", type=int, required=True, help="particles / total beams (N)")
    p.add_argument("--questions-file", required=True)
    p.add_argument("--concurrency", type=int, default=1, help="questions in flight")
    p.add_argument("--out", required=True, help="JSONL, one line per question")
    p.add_argument("--summary", default=None, help="default: <out>.summary.json")
    p.add_argument("--model", default=None, help="default: the vLLM server's first model")
    p.add_argument("--prm-model", default=None, help="default: the PRM server's first model")
    p.add_argument(
        "--beam-width",
        type=int,
        default=0,
        help="beams kept per step (its_hub: each expanded budget/width times); "
        "default budget // 4, at least 1",
    )
    p.add_argument("--aggregation", choices=("last", "min", "prod"), default="last")
    p.add_argument(
        "--selection",
        choices=("argmax", "sample"),
        default="argmax",
        help="particle filtering's final choice (its default: argmax)",
    )
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--step-token", default="\n")
    p.add_argument(
        "--stop-token", default="\\boxed", help="a path stops at the step holding this text"
    )
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument(
        "--max-lm-concurrency",
        type=int,
        default=-1,
        help="its_hub's per-call cap on concurrent requests (-1: all at once)",
    )
    p.add_argument(
        "--skip-special-tokens",
        action="store_true",
        help="let vLLM drop </think> from the text (its_hub as is)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="a client timeout per question: a later answer counts as none (row late)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # its_hub's StepGeneration calls its own deprecated agenerate() on every step.
    warnings.filterwarnings("ignore", message=r"agenerate\(\) is deprecated")
    summary = asyncio.run(run(args))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
