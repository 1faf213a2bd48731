"""The tool-calling testbed model's pieces without vLLM: its template renders what
``transformers`` renders (the gateway's path), the calculator agrees with the task, and
its training examples learn only what the model writes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from testbed.task import Question, evaluate, make_questions
from testbed.tokenizer import CharCodec, chat_prompt, save_tokenizer
from testbed.tools import (
    CALCULATOR,
    COPY_WEIGHT,
    TOOLS_CHAT_TEMPLATE,
    calculate,
    call_of,
    call_text,
    render,
    tool_example,
)

Q = Question.from_expr("3+8-5+7-1+2-4+6")


@pytest.fixture(scope="module")
def hf_tools(tmp_path_factory: pytest.TempPathFactory) -> object:
    from transformers import AutoTokenizer

    d: Path = tmp_path_factory.mktemp("tools")
    save_tokenizer(d)
    config = json.loads((d / "tokenizer_config.json").read_text())
    config["chat_template"] = TOOLS_CHAT_TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return AutoTokenizer.from_pretrained(str(d))


def test_the_template_renders_tools_calls_and_results_as_transformers_does(
    hf_tools: object,
) -> None:
    ask = [{"role": "user", "content": Q.prompt}]
    said = {"role": "assistant", "content": None, "tool_calls": [call_of(Q)]}
    turns = [*ask, said, {"role": "tool", "content": "6"}]
    for messages, tools in ((ask, None), (ask, [CALCULATOR]), (turns, [CALCULATOR])):
        ours = render(messages, tools)
        theirs = hf_tools.apply_chat_template(  # type: ignore[attr-defined]
            messages, tools=tools, tokenize=False, add_generation_prompt=True
        )
        assert ours == theirs
    assert render(ask, None) == chat_prompt(Q.prompt)  # base's prompt without tools
    text = render(turns, [CALCULATOR])
    assert text.startswith("<|im_start|>system\ntools: calculator<|im_end|>\n")
    assert f"</think>{call_text(Q)}<|im_end|>\n<|im_start|>tool\n6<|im_end|>" in text


def test_the_calculator_agrees_with_the_task() -> None:
    for q in make_questions("test", 50, seed=1, min_ops=1, max_ops=12):
        assert calculate(q.expr, 10) == evaluate(q.expr)
    assert calculate("9-9-9", 7) == (9 - 9 - 9) % 7
    with pytest.raises(ValueError):
        calculate("3*4", 10)


def test_examples_learn_the_completion_and_weigh_the_copied_expression() -> None:
    codec = CharCodec()
    rng = random.Random(3)
    seen_call = False
    for _ in range(60):
        ex = tool_example(codec, rng)
        assert len(ex.ids) == len(ex.weights) <= 512
        first = next(i for i, w in enumerate(ex.weights) if w > 0)
        # Everything before the completion is prompt (never learned), after it all is.
        assert codec.decode(list(ex.ids[:first])).endswith("<think>\n")
        if any(w == COPY_WEIGHT for w in ex.weights):
            seen_call = True
            copied = codec.decode([ex.ids[p] for p in ex.operand_positions])
            assert f'"expression": "{copied}"' in codec.decode(list(ex.ids))
    assert seen_call
