"""Answer pools: many samples per question, drawn once, stored, then reused.

Calibration (``thinkgate calibrate pets``) and the benchmark need, per question, a pool
of sampled answers. Two ways to draw them:

* ``draw_local``: an in-process vLLM engine (``vllm.LLM``) on a model directory; the
  chat template comes from the model's tokenizer, and the answer is read from the
  tokens after ``</think>`` only (a cut-off trajectory has no answer);
* ``draw_http``: a running thinkgate server (strategy ``plain``, one request with
  ``n = pool`` per question); ``message.content`` is already the answer part.

Pools are stored as JSONL, one question per line::

    {"messages": [...], "gold": "3", "answers": ["3", null, ...], "completion_tokens": [...]}
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from strategies.answers import equivalent, extract_answer
from strategies.pets.calibration.simulate import Pool
from strategies.pets.labels import label_answers

Messages = tuple[Mapping[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """A question: its chat messages and, when known, its gold answer."""

    messages: Messages
    gold: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRecord:
    item: Item
    answers: tuple[str | None, ...]
    completion_tokens: tuple[int, ...]

    def to_pool(self) -> Pool:
        """Answers as class labels (math-verify equivalence), and the gold's label."""
        labels, groups = label_answers(self.answers)
        gold = None
        if self.item.gold is not None:
            gold = next(
                (g for g, grp in enumerate(groups) if equivalent(grp.answer, self.item.gold)), None
            )
        return Pool(labels=labels, gold=gold)


def load_items(path: Path) -> list[Item]:
    """Questions from JSONL: each line has ``messages`` (chat) or ``prompt`` (one user
    message), and optionally ``answer`` (gold). Blank lines are skipped."""
    items: list[Item] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        doc = json.loads(line)
        if "messages" in doc:
            messages: Messages = tuple(
                {"role": str(m["role"]), "content": str(m["content"])} for m in doc["messages"]
            )
        elif "prompt" in doc:
            messages = ({"role": "user", "content": str(doc["prompt"])},)
        else:
            raise ValueError(f"{path}:{n}: a question needs 'messages' or 'prompt'")
        gold = doc.get("answer")
        items.append(Item(messages=messages, gold=None if gold is None else str(gold)))
    return items


def save_pools(path: Path, records: Sequence[PoolRecord], *, append: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        for r in records:
            doc = {
                "messages": list(r.item.messages),
                "gold": r.item.gold,
                "answers": list(r.answers),
                "completion_tokens": list(r.completion_tokens),
            }
            f.write(json.dumps(doc) + "\n")


def load_pools(path: Path) -> list[PoolRecord]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            doc = json.loads(line)
            item = Item(messages=tuple(doc["messages"]), gold=doc.get("gold"))
            out.append(
                PoolRecord(
                    item=item,
                    answers=tuple(doc["answers"]),
                    completion_tokens=tuple(doc["completion_tokens"]),
                )
            )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampling:
    pool: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 400
    seed: int = 0


def draw_local(
    model: str,
    items: Sequence[Item],
    sampling: Sampling,
    *,
    chunk: int = 8,
    on_chunk: Callable[[list[PoolRecord]], None] | None = None,
) -> list[PoolRecord]:
    """Pools through an in-process vLLM engine (CPU-sized settings; starts in ~40 s).

    Questions go to the engine ``chunk`` at a time (``chunk * pool`` sequences, enough
    to fill its batch) and ``on_chunk`` receives each chunk's records, so a caller can
    save progress. Call under ``if __name__ == "__main__":`` (vLLM spawns processes).
    """
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import SamplingParams

    from kernels.offline_engine import cpu_llm

    llm = cpu_llm(model, seed=sampling.seed)
    tokenizer = llm.get_tokenizer()
    think_end = tokenizer.convert_tokens_to_ids("</think>")

    def params(index: int) -> SamplingParams:
        # One seed per question, children j get seed + j: independent, reproducible.
        return SamplingParams(
            n=sampling.pool,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed + index * sampling.pool,
        )

    records: list[PoolRecord] = []
    bar = tqdm(total=len(items), desc="pools", unit="question")
    for lo in range(0, len(items), chunk):
        part = items[lo : lo + chunk]
        prompts = [
            tokenizer.apply_chat_template(
                list(it.messages), tokenize=False, add_generation_prompt=True
            )
            for it in part
        ]
        per_prompt = [params(lo + i) for i in range(len(part))]
        outputs = llm.generate(prompts, per_prompt, use_tqdm=False)
        done = [
            _record(item, out, tokenizer, think_end)
            for item, out in zip(part, outputs, strict=True)
        ]
        records += done
        if on_chunk is not None:
            on_chunk(done)
        bar.update(len(part))
    bar.close()
    return records


def _record(item: Item, out: Any, tokenizer: Any, think_end: int) -> PoolRecord:
    """One question's pool from a vLLM ``RequestOutput``."""
    answers: list[str | None] = []
    for o in out.outputs:
        ids = list(o.token_ids)
        if think_end in ids:
            content = tokenizer.decode(ids[ids.index(think_end) + 1 :], skip_special_tokens=True)
            answers.append(extract_answer(content))
        else:
            answers.append(None)
    return PoolRecord(
        item=item,
        answers=tuple(answers),
        completion_tokens=tuple(len(o.token_ids) for o in out.outputs),
    )


async def _draw_http_async(
    url: str,
    items: Sequence[Item],
    sampling: Sampling,
    concurrency: int,
    api_key: str | None,
    max_n: int,
) -> list[PoolRecord]:
    import httpx
    from tqdm import tqdm

    headers = {"X-Strategy": "plain"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    gate = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(items), desc="pools", unit="question")

    async def part(
        client: httpx.AsyncClient, model: str, item: Item, seed: int, n: int
    ) -> tuple[list[str | None], int]:
        body = {
            "model": model,
            "messages": list(item.messages),
            "n": n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": seed,  # children get seed + j
        }
        async with gate:
            resp = await client.post("/v1/chat/completions", json=body, headers=headers)
        resp.raise_for_status()
        doc = resp.json()
        answers: list[str | None] = []
        for choice in sorted(doc["choices"], key=lambda c: c["index"]):
            content = choice["message"].get("content") or ""
            # A cut-off trajectory never reached its answer: no answer, not a guess.
            answers.append(extract_answer(content) if choice["finish_reason"] == "stop" else None)
        return answers, int(doc.get("usage", {}).get("completion_tokens", 0))

    async def one(client: httpx.AsyncClient, model: str, i: int, item: Item) -> PoolRecord:
        # A server caps n (`--max-n`, 16 by default): a pool is several requests whose
        # seeds continue where the previous one's children stopped, as one n=pool call.
        first = sampling.seed + i * sampling.pool
        sizes = [min(max_n, sampling.pool - lo) for lo in range(0, sampling.pool, max_n)]
        starts = range(0, sampling.pool, max_n)
        parts = await asyncio.gather(
            *(part(client, model, item, first + lo, n) for lo, n in zip(starts, sizes, strict=True))
        )
        bar.update(1)
        answers = [a for got, _ in parts for a in got]
        tokens = sum(t for _, t in parts)
        per = tokens // max(1, len(answers))  # the API reports a sum only
        return PoolRecord(
            item=item, answers=tuple(answers), completion_tokens=(per,) * len(answers)
        )

    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=600.0) as client:
        listing = await client.get("/v1/models", headers=headers)
        listing.raise_for_status()
        model = str(listing.json()["data"][0]["id"])
        results = await asyncio.gather(*(one(client, model, i, it) for i, it in enumerate(items)))
    bar.close()
    return list(results)


def draw_http(
    url: str,
    items: Sequence[Item],
    sampling: Sampling,
    *,
    concurrency: int = 4,
    api_key: str | None = None,
    max_n: int = 16,
) -> list[PoolRecord]:
    """Pools through a running thinkgate server at ``url`` (strategy ``plain``), in
    requests of at most ``max_n`` samples (the server's ``--max-n``)."""
    return asyncio.run(_draw_http_async(url, items, sampling, concurrency, api_key, max_n))
