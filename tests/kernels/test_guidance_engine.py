"""Budget guidance inside the real vLLM engine (CPU, V1 runner, testbed ``base``).

* The wrapper architecture loads through ``hf_overrides`` (general plugin registered by
  the entry point) and the predictor comes from ``bg_predictor/``.
* The stashed hidden states are exactly the rows the sampler sees: a checking processor
  placed before ours recomputes ``lm_head(stash)`` and compares it with the logits of
  the same step, and compares the first step's hidden state with ``transformers``'.
* No budget means bit-identical decoding: greedy ids of the wrapper engine with the
  processor loaded equal those of the plain architecture without any processor (run
  in a child process, started before the wrapper engine and read after).
* Guided greedy decoding differs and thinks less; the share of guided steps matches the
  step rule (first step and after newlines only).

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the checking
processor's records are readable here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "testbed" / "models" / "base"

PLAIN_SCRIPT = """
import json, os, sys
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
prompts = json.loads(sys.argv[2])
llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=512, enforce_eager=True,
          enable_chunked_prefill=False, max_num_batched_tokens=512 * 16, max_num_seqs=16,
          distributed_executor_backend="uni")
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                    SamplingParams(temperature=0, max_tokens=300), use_tqdm=False)
print("IDS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]))
"""


class StashCheck:
    """A V1 processor (runs before ours) that audits the stash against the logits."""

    records: ClassVar[list[tuple[int, float]]] = []  # (rows, max |lm_head(h) - logits|)
    first_hidden: ClassVar[list[torch.Tensor]] = []
    rolled: ClassVar[list[float]] = []  # max error with the stash rows shifted by one

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        return None

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        from safetensors.torch import load_file

        self._w = load_file(str(MODEL / "model.safetensors"))["lm_head.weight"].float()

    def is_argmax_invariant(self) -> bool:
        # False, or greedy batches would skip it (vLLM applies only the others there).
        return False

    def update_state(self, batch_update: Any) -> None:
        return None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        from kernels.guidance.stash import STASH

        hidden = STASH._hidden
        if hidden is None:
            StashCheck.records.append((-1, float("inf")))
            return logits
        err = float((hidden.float() @ self._w.T - logits).abs().max())
        StashCheck.records.append((int(hidden.shape[0]), err))
        if hidden.shape[0] > 1:  # negative control: rows shifted by one must not match
            rolled = hidden.roll(1, dims=0).float() @ self._w.T
            StashCheck.rolled.append(float((rolled - logits).abs().max()))
        if len(StashCheck.first_hidden) < 1:
            StashCheck.first_hidden.append(hidden[0].detach().clone())
        return logits


def _make_check_class() -> type[Any]:
    from vllm.v1.sample.logits_processor import LogitsProcessor

    return type("StashCheckLP", (StashCheck, LogitsProcessor), {})


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    from testbed.task import make_questions
    from testbed.tokenizer import CharCodec, chat_prompt

    codec = CharCodec()
    qs = make_questions("test", 4, seed=31, min_ops=6, max_ops=10)
    qs += make_questions("test", 2, seed=32, min_ops=1, max_ops=2)
    return [codec.encode(chat_prompt(q.prompt)) for q in qs]


@pytest.fixture(scope="module")
def plain_run(prompts: list[list[int]]) -> Iterator[subprocess.Popen[str]]:
    """Greedy ids from the plain architecture, no processors, in a child process started
    first: it loads and decodes while this process starts the wrapper engine (the two
    engines share nothing, and each decodes with its own single thread)."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(ROOT)}
    # The engine in the child itself, as the wrapper's is here: no third interpreter.
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    proc = subprocess.Popen(
        [sys.executable, "-c", PLAIN_SCRIPT, str(MODEL), json.dumps(prompts)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield proc
    if proc.poll() is None:  # never read (the tests that would were deselected)
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def plain_ids(plain_run: subprocess.Popen[str]) -> list[list[int]]:
    out, err = plain_run.communicate(timeout=900)
    assert plain_run.returncode == 0, err[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("IDS "))
    ids: list[list[int]] = json.loads(line[4:])
    return ids


@pytest.fixture(scope="module")
def guided_llm(plain_run: subprocess.Popen[str]) -> Iterator[Any]:
    """The wrapper engine, in process; started once the plain one's child is under way."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    from kernels.guidance.plugin import hf_overrides
    from kernels.guidance.vllm_v1 import BudgetGuidanceLogitsProcessor
    from kernels.offline_engine import in_process_engine

    with in_process_engine() as where:  # the worker in this process too
        llm = LLM(
            model=str(MODEL),
            hf_overrides=hf_overrides(),
            logits_processors=[_make_check_class(), BudgetGuidanceLogitsProcessor],
            dtype="float32",
            max_model_len=512,
            enforce_eager=True,
            enable_chunked_prefill=False,
            max_num_batched_tokens=512 * 16,
            max_num_seqs=16,
            **where,
        )
    yield llm
    del llm


def _greedy(llm: Any, prompts: list[list[int]], extra: dict[str, int] | None) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts],
        SamplingParams(temperature=0, max_tokens=300, extra_args=extra),
        use_tqdm=False,
    )
    return [list(o.outputs[0].token_ids) for o in outs]


def test_wrapper_loaded_through_hf_overrides(guided_llm: Any) -> None:
    from kernels.guidance.model import ARCHITECTURE
    from kernels.guidance.stash import STASH

    config = guided_llm.llm_engine.vllm_config.model_config
    assert config.architectures == [ARCHITECTURE]
    assert STASH.model is not None and STASH.model.think_end_id == 4


def test_no_budget_is_bit_identical_to_the_plain_engine(
    guided_llm: Any, prompts: list[list[int]], plain_ids: list[list[int]]
) -> None:
    from kernels.guidance import args as guidance_args

    assert _greedy(guided_llm, prompts, None) == plain_ids
    assert _greedy(guided_llm, prompts, {guidance_args.BUDGET: 0}) == plain_ids
    assert _greedy(guided_llm, prompts, {guidance_args.BUDGET: -5}) == plain_ids


def test_stash_rows_are_the_sampled_rows(guided_llm: Any, prompts: list[list[int]]) -> None:
    from kernels.guidance import args as guidance_args

    StashCheck.records.clear()
    StashCheck.first_hidden.clear()
    StashCheck.rolled.clear()
    _greedy(guided_llm, prompts[:1], {guidance_args.BUDGET: 40})
    _greedy(guided_llm, prompts, {guidance_args.BUDGET: 40})  # a batch of 6 rows
    records = list(StashCheck.records)
    assert len(records) > 50
    assert all(rows >= 1 for rows, _ in records), "a step without stashed hidden states"
    assert max(err for _, err in records) < 1e-3
    assert max(rows for rows, _ in records) == len(prompts)
    assert StashCheck.rolled and min(StashCheck.rolled) > 1e-2  # the check can fail
    # The first step's hidden state is the one transformers computes at the prompt end.
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32)
    with torch.no_grad():
        ref = hf.model(input_ids=torch.tensor([prompts[0]])).last_hidden_state[0, -1]
    torch.testing.assert_close(StashCheck.first_hidden[0].float(), ref, atol=1e-4, rtol=1e-4)


def test_guidance_changes_decoding_only_at_boundaries(
    guided_llm: Any, prompts: list[list[int]], plain_ids: list[list[int]]
) -> None:
    from kernels.guidance import args as guidance_args
    from testbed.tokenizer import CharCodec

    codec = CharCodec()
    newline = codec.encode("\n")[0]
    guided = _greedy(guided_llm, prompts, {guidance_args.BUDGET: 24})
    assert guided != plain_ids
    for g, p in zip(guided, plain_ids, strict=True):
        # The first difference sits at a boundary: position 0 or right after a newline.
        diff = next((i for i, (a, b) in enumerate(zip(g, p, strict=False)) if a != b), None)
        if diff is not None:
            assert diff == 0 or g[diff - 1] == newline, (diff, codec.decode(g[: diff + 1]))
    think = [g.index(codec.think_end_id) if codec.think_end_id in g else len(g) for g in guided]
    free = [p.index(codec.think_end_id) if codec.think_end_id in p else len(p) for p in plain_ids]
    assert sum(think) < sum(free)
