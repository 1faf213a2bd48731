"""The testbed reward model: scores a full response as right or wrong, noisily on purpose.

Trained on responses SAMPLED from `base` (temperature 1), labeled by their answer. It
starts from `base`'s backbone with a fresh one-label head (`Qwen2ForSequenceClassification`,
which vLLM serves through `classify`) and stops as soon as its validation AUROC reaches
`target_auroc`: Best-of-N needs a verifier that is informative but imperfect. It keeps
the weights of its best validation AUROC: the curve rises within a few dozen steps and
then wanders (one run: 0.77 at step 60, 0.746 at the 537-step cap), so the last weights
are a worse reward model than the best ones for no extra time.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification

from testbed.engine import Completion, reward_text, to_completion
from testbed.metrics import auroc
from testbed.model import export
from testbed.task import Question, make_questions
from testbed.tokenizer import CharCodec, chat_prompt


@dataclass(frozen=True, slots=True)
class RewardSettings:
    base: str
    seed: int = 0
    minutes: float = 3.0
    max_steps: int = 3000
    train_questions: int = 700
    val_questions: int = 150
    samples_per_question: int = 4
    min_ops: int = 3
    max_ops: int = 12
    temperature: float = 1.0
    batch_size: int = 32
    lr: float = 5e-4
    eval_every: int = 20
    target_auroc: float = 0.85
    sampler: str = "vllm"  # "hf" (transformers generate) keeps smoke tests free of vLLM
    threads: int = 2


@dataclass(frozen=True, slots=True)
class RewardResult:
    settings: RewardSettings
    steps: int
    wall_s: float
    sampling_s: float
    train_responses: int
    train_right: int
    val_responses: int
    val_auroc: float  # of the kept weights (the best evaluation)
    best_step: int = 0
    val_curve: tuple[tuple[int, float], ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["wall_s"] = round(self.wall_s, 1)
        d["sampling_s"] = round(self.sampling_s, 1)
        d["val_auroc"] = round(self.val_auroc, 4)
        d["val_curve"] = [[s, round(a, 4)] for s, a in self.val_curve]
        return d


def sample_vllm(
    base: str, questions: Sequence[Question], settings: RewardSettings
) -> list[Completion]:
    from testbed.engine import generate, load_llm

    llm = load_llm(base, seed=settings.seed)
    groups = generate(
        llm, questions, n=settings.samples_per_question, temperature=settings.temperature
    )
    del llm
    gc.collect()
    return [c for g in groups for c in g]


def sample_hf(
    base: str, questions: Sequence[Question], settings: RewardSettings
) -> list[Completion]:
    codec = CharCodec()
    model = Qwen2ForCausalLM.from_pretrained(base, dtype=torch.float32).train(False)
    out: list[Completion] = []
    torch.manual_seed(settings.seed)
    for q in questions:
        prompt = torch.tensor([codec.encode(chat_prompt(q.prompt))])
        with torch.no_grad():
            gen = model.generate(
                prompt,
                do_sample=True,
                temperature=settings.temperature,
                max_new_tokens=64,
                num_return_sequences=settings.samples_per_question,
                pad_token_id=codec.pad_id,
                eos_token_id=codec.eos_id,
            )
        for row in gen[:, prompt.shape[1] :].tolist():
            ids = row[: row.index(codec.eos_id) + 1] if codec.eos_id in row else row
            out.append(to_completion(codec, q, ids))
    return out


def _encode(codec: CharCodec, completions: Sequence[Completion]) -> list[list[int]]:
    return [codec.encode(reward_text(c.question, c.text)) for c in completions]


def _batch(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def score(
    model: Qwen2ForSequenceClassification, rows: Sequence[Sequence[int]], pad_id: int
) -> list[float]:
    out: list[float] = []
    model.train(False)
    with torch.no_grad():
        for i in range(0, len(rows), 64):
            ids, mask = _batch(rows[i : i + 64], pad_id)
            out += model(input_ids=ids, attention_mask=mask).logits[:, 0].tolist()
    model.train()
    return out


class BestWeights:
    """The weights of the best validation AUROC seen so far (a NaN AUROC never wins)."""

    def __init__(self) -> None:
        self.step = 0
        self.auroc = float("nan")
        self._state: dict[str, torch.Tensor] | None = None

    def offer(self, step: int, auroc: float, model: torch.nn.Module) -> None:
        better = not math.isnan(auroc) and (math.isnan(self.auroc) or auroc > self.auroc)
        if self._state is None or better:
            self.step, self.auroc = step, auroc
            # A copy, not a view: training goes on updating the parameters in place.
            self._state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def restore(self, model: torch.nn.Module) -> None:
        if self._state is not None:
            model.load_state_dict(self._state)


def train_reward(settings: RewardSettings, out: Path, *, progress_bar: bool = True) -> RewardResult:
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    codec = CharCodec()
    train_q = make_questions(
        "train",
        settings.train_questions,
        seed=settings.seed,
        min_ops=settings.min_ops,
        max_ops=settings.max_ops,
    )
    val_q = make_questions(
        "validation",
        settings.val_questions,
        seed=settings.seed,
        min_ops=settings.min_ops,
        max_ops=settings.max_ops,
    )
    sampler = sample_vllm if settings.sampler == "vllm" else sample_hf
    t0 = time.monotonic()
    sampled = sampler(settings.base, [*train_q, *val_q], settings)
    sampling_s = time.monotonic() - t0
    n_train = len(train_q) * settings.samples_per_question
    train_c, val_c = sampled[:n_train], sampled[n_train:]
    train_rows, val_rows = _encode(codec, train_c), _encode(codec, val_c)
    train_y = [float(c.correct) for c in train_c]
    val_y = [c.correct for c in val_c]

    model = Qwen2ForSequenceClassification.from_pretrained(
        settings.base, num_labels=1, dtype=torch.float32
    )
    model.config.architectures = ["Qwen2ForSequenceClassification"]
    model.config.pad_token_id = codec.pad_id
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    rng = random.Random(settings.seed)
    order: list[int] = []
    curve: list[tuple[int, float]] = []
    val_auc = auroc(score(model, val_rows, codec.pad_id), val_y)
    curve.append((0, val_auc))
    best = BestWeights()
    best.offer(0, val_auc, model)
    start = time.monotonic()
    step = 0
    bar = tqdm(total=settings.max_steps, disable=not progress_bar, desc="reward")
    while step < settings.max_steps and time.monotonic() - start < settings.minutes * 60:
        if val_auc >= settings.target_auroc:
            break
        if len(order) < settings.batch_size:
            order = list(range(len(train_rows)))
            rng.shuffle(order)
        pick, order = order[: settings.batch_size], order[settings.batch_size :]
        ids, mask = _batch([train_rows[i] for i in pick], codec.pad_id)
        target = torch.tensor([train_y[i] for i in pick])
        loss = loss_fn(model(input_ids=ids, attention_mask=mask).logits[:, 0], target)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        step += 1
        bar.update(1)
        if step % settings.eval_every == 0:
            val_auc = auroc(score(model, val_rows, codec.pad_id), val_y)
            curve.append((step, val_auc))
            best.offer(step, val_auc, model)
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", val_auroc=f"{val_auc:.3f}")
    bar.close()
    wall = time.monotonic() - start + sampling_s
    best.restore(model)
    model.train(False)
    export(model, codec, out)
    return RewardResult(
        settings=settings,
        steps=step,
        wall_s=wall,
        sampling_s=sampling_s,
        train_responses=len(train_rows),
        train_right=int(sum(train_y)),
        val_responses=len(val_rows),
        val_auroc=best.auroc,
        best_step=best.step,
        val_curve=tuple(curve),
    )
