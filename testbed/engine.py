"""Thin helpers over the vLLM engine (CPU) for evaluating and sampling testbed models.

Importing this module does not import vLLM; the functions do. Callers that start an
engine must run under an `if __name__ == "__main__":` guard (vLLM spawns processes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kernels.offline_engine import MAX_MODEL_LEN, cpu_llm
from testbed.task import Question, parse_answer_for_eval
from testbed.tokenizer import IM_END, CharCodec, chat_prompt

if TYPE_CHECKING:
    from vllm import LLM


@dataclass(frozen=True, slots=True)
class Completion:
    """One generated response, read from token ids (vLLM's text drops special tokens)."""

    question: Question
    token_ids: tuple[int, ...]
    text: str  # decoded with special tokens kept
    thinking_tokens: int  # tokens before `</think>` (all of them if it never closed)
    answer: int | None  # from the part after `</think>` only

    @property
    def correct(self) -> bool:
        return self.answer == self.question.answer

    @property
    def thinking(self) -> str:
        return self.text.split("</think>", 1)[0]


def load_llm(
    model: Path | str,
    *,
    runner: Literal["generate", "pooling"] = "generate",
    seed: int = 0,
    in_process: bool = False,
) -> LLM:
    """A CPU engine sized for the testbed (kernels.offline_engine.cpu_llm)."""
    return cpu_llm(
        model, runner=runner, seed=seed, max_model_len=MAX_MODEL_LEN, in_process=in_process
    )


def to_completion(codec: CharCodec, question: Question, token_ids: Sequence[int]) -> Completion:
    ids = tuple(token_ids)
    text = codec.decode(list(ids))
    if codec.think_end_id in ids:
        cut = ids.index(codec.think_end_id)
        answer = parse_answer_for_eval(codec.decode(list(ids[cut + 1 :])))
    else:
        cut = len(ids) - (1 if ids and ids[-1] == codec.eos_id else 0)
        answer = None
    return Completion(
        question=question, token_ids=ids, text=text, thinking_tokens=cut, answer=answer
    )


def generate(
    llm: LLM,
    questions: Sequence[Question],
    *,
    n: int = 1,
    temperature: float = 0.0,
    max_tokens: int = 420,
    seed: int | None = None,
) -> list[list[Completion]]:
    """`n` completions per question (greedy when temperature is 0), in question order;
    ``seed`` makes sampled completions repeatable."""
    from vllm import SamplingParams

    codec = CharCodec()
    params = SamplingParams(
        n=n, temperature=temperature, max_tokens=max_tokens, skip_special_tokens=False, seed=seed
    )
    prompts = [chat_prompt(q.prompt) for q in questions]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [
        [to_completion(codec, q, o.token_ids) for o in out.outputs]
        for q, out in zip(questions, outputs, strict=True)
    ]


def generate_with_cut(
    llm: LLM, questions: Sequence[Question], *, tokens_per_op: int, answer_tokens: int = 16
) -> list[Completion]:
    """Greedy, with thinking forced closed after `tokens_per_op * ops` tokens.

    Two engine calls: think until the cut (or a natural `</think>`), then append
    `</think>` and let the model answer, as a budget-forcing logits processor would.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    codec = CharCodec()
    prompt_ids = [codec.encode(chat_prompt(q.prompt)) for q in questions]
    think_params = [
        SamplingParams(
            temperature=0.0,
            max_tokens=max(1, tokens_per_op * q.ops),
            stop_token_ids=[codec.think_end_id],
            skip_special_tokens=False,
        )
        for q in questions
    ]
    first = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompt_ids], think_params, use_tqdm=False
    )
    thoughts: list[list[int]] = []
    for out in first:
        ids = list(out.outputs[0].token_ids)
        if codec.think_end_id in ids:
            ids = ids[: ids.index(codec.think_end_id)]
        if codec.eos_id in ids:  # a model that skipped `</think>` and ended: keep what it said
            ids = ids[: ids.index(codec.eos_id)]
        thoughts.append(ids)
    answer_params = SamplingParams(
        temperature=0.0, max_tokens=answer_tokens, skip_special_tokens=False
    )
    second = llm.generate(
        [
            TokensPrompt(prompt_token_ids=[*p, *t, codec.think_end_id])
            for p, t in zip(prompt_ids, thoughts, strict=True)
        ],
        answer_params,
        use_tqdm=False,
    )
    return [
        to_completion(codec, q, [*t, codec.think_end_id, *out.outputs[0].token_ids])
        for q, t, out in zip(questions, thoughts, second, strict=True)
    ]


def reward_text(question: Question, completion_text: str) -> str:
    """What the reward model scores: the chat-template rendering of the user turn and the
    assistant turn given as the raw completion (`...</think>\\n\\boxed{d}`), i.e.
    `apply_chat_template([user, {"role": "assistant", "content": completion}])`."""
    body = completion_text.removesuffix(IM_END).removesuffix("<|endoftext|>")
    return f"{chat_prompt(question.prompt)}{body}{IM_END}\n"


def classify(rm: LLM, texts: Sequence[str]) -> list[float]:
    """Raw reward logits (higher = more likely right) from a pooling engine."""
    from vllm import PoolingParams

    outs = rm.classify(
        list(texts), pooling_params=PoolingParams(use_activation=False), use_tqdm=False
    )
    return [float(o.outputs.probs[0]) for o in outs]
