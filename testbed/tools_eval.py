"""How well the ``tools`` model calls (``python -m testbed eval-tools``), greedy, through
vLLM: on long test questions offered the calculator, the share of exact calls (the
question's expression, modulo 10); on short ones, the share answered right without a
call; given the tool's result, the share answering it; without tools, base's accuracy.
Writes the numbers into the model's card (``eval_tools``)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed import portable_path
from testbed.engine import load_llm
from testbed.model import read_card, write_card
from testbed.task import MODULUS, Question, make_questions, parse_answer_for_eval
from testbed.tokenizer import CharCodec, chat_prompt
from testbed.tools import CALCULATOR, LONG_OPS, SHORT_OPS, calculate, call_of, render

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _calls(answer: str) -> list[Any]:
    out = []
    for body in _CALL.findall(answer):
        try:
            out.append(json.loads(body))
        except ValueError:
            out.append(None)
    return out


def _answers(llm: Any, prompts: Sequence[str]) -> list[str]:
    """The text after ``</think>`` of each greedy completion ("" if thinking never ends)."""
    from vllm import SamplingParams

    codec = CharCodec()
    params = SamplingParams(temperature=0.0, max_tokens=400, skip_special_tokens=False)
    outs = llm.generate(list(prompts), params, use_tqdm=False)
    texts = [codec.decode(list(o.outputs[0].token_ids)) for o in outs]
    return [t.split("</think>", 1)[1] if "</think>" in t else "" for t in texts]


def evaluate_tools(model: Path, n: int = 60, seed: int = 0) -> dict[str, object]:
    llm = load_llm(model, seed=seed)
    long = make_questions("test", n, seed=seed, min_ops=LONG_OPS, max_ops=12)
    short = make_questions("test", n, seed=seed, min_ops=1, max_ops=SHORT_OPS)
    ask = [[{"role": "user", "content": q.prompt}] for q in long]

    def exact(q: Question, answer: str) -> bool:
        calls = _calls(answer)
        want = {"name": "calculator", "arguments": {"expression": q.expr, "modulo": MODULUS}}
        return calls == [want]

    called = _answers(llm, [render(a, [CALCULATOR]) for a in ask])
    short_asks = [[{"role": "user", "content": q.prompt}] for q in short]
    worked = _answers(llm, [render(a, [CALCULATOR]) for a in short_asks])
    turns: list[list[dict[str, Any]]] = [
        [*a, {"role": "assistant", "content": None, "tool_calls": [call_of(q)]},
         {"role": "tool", "content": str(calculate(q.expr, MODULUS))}]
        for a, q in zip(ask, long, strict=True)
    ]  # fmt: skip
    after = _answers(llm, [render(t, [CALCULATOR]) for t in turns])
    plain = _answers(llm, [chat_prompt(q.prompt) for q in long])
    result: dict[str, object] = {
        "questions": n,
        "long_exact_call": sum(exact(q, a) for q, a in zip(long, called, strict=True)) / n,
        "long_any_call": sum(bool(_calls(a)) for a in called) / n,
        "short_no_call_right": sum(
            not _calls(a) and parse_answer_for_eval(a) == q.answer
            for q, a in zip(short, worked, strict=True)
        )
        / n,
        "after_result_right": sum(
            parse_answer_for_eval(a) == q.answer for q, a in zip(long, after, strict=True)
        )
        / n,
        "no_tools_long_right": sum(
            parse_answer_for_eval(a) == q.answer for q, a in zip(long, plain, strict=True)
        )
        / n,
        "command": f"python -m testbed eval-tools --model {portable_path(model)} --n {n}",
    }
    return result


def run(model: Path, n: int) -> int:
    result = evaluate_tools(model, n)
    card = read_card(model)
    card["eval_tools"] = result
    write_card(model, card)
    print(json.dumps(result, indent=2))
    return 0
