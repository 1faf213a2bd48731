"""The testbed process reward model (PRM): the probability that each thinking step is right.

Trained on trajectories SAMPLED from `base` at temperature 1 (the distribution a step
search sees), labeled per step by exact arithmetic (`testbed.prm_labels`). The layout is
vLLM's `Qwen2ForProcessRewardModel` (the Qwen2.5-Math-PRM one): `model.*` (a Qwen2
backbone, initialised from `base`'s), `score.0` Linear(h, h) + ReLU + `score.2`
Linear(h, 2), label 1 = right; vLLM's STEP pooling returns the two-label softmax at every
occurrence of the step tag, here the newline token that closes each thinking line (and
the one after `</think>`, labeled "the thinking reached the true answer"). transformers
has no class for it, so the module is built here and its weights written under vLLM's
names. Validation is the step-level AUROC on validation-split trajectories; the weights
of its best evaluation are kept (`testbed.reward.BestWeights`).
"""

from __future__ import annotations

import gc
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Final

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm
from transformers import Qwen2Config, Qwen2ForCausalLM

from testbed.engine import Completion, to_completion
from testbed.metrics import auroc
from testbed.prm_labels import expected_ops, question_ops, remaining_ops, step_labels
from testbed.reward import BestWeights, RewardSettings, sample_hf, sample_vllm
from testbed.task import Question, apply_op, make_questions
from testbed.tokenizer import CharCodec, chat_prompt, save_tokenizer
from testbed.traces import classify_line

ARCHITECTURE: Final = "Qwen2ForProcessRewardModel"
STEP_TAG: Final = "\n"  # the character tokenizer's newline closes every thinking line
MAX_REMAINING: Final = 16  # classes of the operations-left probe: 0-16 (more: 16)
EXPORT_RESERVE_S: Final = 20.0  # the last evaluation and the export, inside total_minutes


@dataclass(frozen=True, slots=True)
class PrmSettings:
    base: str
    seed: int = 0
    minutes: float = 55.0  # of training
    total_minutes: float = 60.0  # the whole run: training stops early to stay inside it
    max_steps: int = 5000
    train_questions: int = 1200
    val_questions: int = 120
    samples_per_question: int = 4
    # Past `base`'s own range (4-12): its skipped and repeated operations are commonest
    # on the longest questions, where a search needs them caught.
    min_ops: int = 6
    max_ops: int = 14
    temperature: float = 1.0
    batch_size: int = 32
    lr: float = 1e-3
    wrong_weight: float = 1.0  # loss weight of wrong steps (the corrupted copies balance them)
    # Share of each batch drawn from trajectories with a wrong step (about 1 in 5 has one).
    error_share: float = 0.0
    # Share of each batch that is a sampled trajectory with one line's result digit
    # replaced by another digit (labels again by exact arithmetic: that line and all after
    # it wrong). `base` samples few wrong lines, and mostly where it merges two operations:
    # a PRM trained on its samples alone learns where `base` errs instead of checking the
    # arithmetic (the first PRM scored `3+8=2` 0.99, like `3+8=1`).
    corrupt_share: float = 0.5
    # Of those copies, the share whose changed line keeps true arithmetic but takes the
    # wrong operation: the operand of a later operation of the question (a skipped one)
    # or another digit, the result recomputed. Most of `base`'s first errors on long
    # questions are such lines (113 of 212 at 12-13 operations, T=1: a skipped `-0`);
    # a PRM that only checks a line's arithmetic scores them right.
    operand_share: float = 0.5
    # Of those copies, the share closed early instead: a trajectory cut after a right
    # computing line one or two before its last, `</think>` straight after, so every line
    # is right and the end tag is not (the question's last operations never done). On
    # the search bench's long questions such endings were 32 of the 74 wrong samples the
    # first PRMs scored best among eight (their lines all right, and fewer of them); only
    # the end tag can tell, and a served sample's score includes it.
    early_end_share: float = 0.0
    # Share of the other rows kept whole (their end tag included) where truncation would
    # cut them: without it the end tag of a right trajectory is seen once in ~17 rows.
    whole_share: float = 0.0
    # Layers added on top of `base`'s (which stay frozen, embeddings included): the base
    # layers compute the running value, as they do when `base` writes it; the added ones
    # (initialised as the identity: zero output projections) learn to compare it with
    # the value a line states. With 0, `base`'s layers are trained instead and never
    # learned to check a digit (probe AUROC 0.50 after 300 steps, models/prm/README.md).
    extra_layers: int = 2
    # Training-only signal that teaches the added layers the comparison: at every tag
    # after a line's result digit, a linear probe of the hidden state regresses `base`'s
    # own log-probability of that digit (dense, every line, where the labels mark 1 line
    # in 40). The probe is not exported; the reward is the score head's.
    aux_weight: float = 1.0
    # The same dense target for a computing line's last operation: `base`'s
    # log-probability of its operator and operand where it wrote them (teaches the added
    # layers to compare a line's operand with the question's next one).
    operand_aux_weight: float = 1.0
    # An exact dense target in place of `base`'s belief: at every tag after a computing
    # line (while the lines before it are right), a 20-way probe names the question's
    # operation the line must end with. `base`'s own log-probability (above) is high
    # exactly where `base` errs by habit (a skipped `-0`), so regressing it teaches the
    # PRM `base`'s blind spots; the question's operation does not. Alone (without the
    # operand target) it lost the arithmetic check on hand-made pairs; with both targets
    # beside the digit one it catches the skipped operation and keeps the check
    # (models/prm/README.md).
    expected_op_weight: float = 1.0
    # One more exact dense target: at every tag while the lines so far are right, a
    # 17-way probe names how many of the question's operations are left (0-16; the end
    # tag's included). The end tag must tell a thinking closed after its last operation
    # from one closed a line or two early (32 of the 74 wrong best-of-eight picks of the
    # first PRMs), which its label alone trains on few rows; counting what is left is
    # that skill on every line.
    remaining_weight: float = 0.0
    # Each training row cut after a random step (after its first wrong step 0 or 1 lines
    # on, 7 times in 10, when it has one): the steps after an error teach nothing new and
    # short rows make a step about twice as cheap.
    truncate: bool = True
    eval_every: int = 50
    sampler: str = "vllm"  # "hf" (transformers generate) keeps smoke tests free of vLLM
    threads: int = 2
    # An exported PRM of the same shape (`base` + `extra_layers`) to start from instead of
    # `base` with identity layers: a recipe change (longer questions, another rate) then
    # continues a trained model rather than repeating its hour.
    init: str | None = None


@dataclass(frozen=True, slots=True)
class PrmResult:
    settings: PrmSettings
    steps: int
    wall_s: float
    sampling_s: float
    train_trajectories: int
    train_steps_labeled: int
    train_steps_wrong: int
    train_with_error: int  # trajectories with a wrong step
    val_trajectories: int
    # Of the kept weights (the best evaluation): steps up to and including each
    # trajectory's first wrong one, on the validation trajectories and a copy of each
    # with one result digit changed: what a search asks (which next step from the same
    # prefix is right), where a step AUROC over every step mostly asks where `base` errs.
    val_first_error_auroc: float
    val_step_auroc: float  # every step of the sampled validation trajectories
    best_step: int = 0
    val_curve: tuple[tuple[int, float], ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["wall_s"] = round(self.wall_s, 1)
        d["sampling_s"] = round(self.sampling_s, 1)
        d["val_step_auroc"] = round(self.val_step_auroc, 4)
        d["val_first_error_auroc"] = round(self.val_first_error_auroc, 4)
        d["val_curve"] = [[s, round(a, 4)] for s, a in self.val_curve]
        return d


@dataclass(frozen=True, slots=True)
class Example:
    """One trajectory as the PRM reads it: token ids, the step-tag positions after the
    prompt (thinking lines, then the one after `</think>` when there is one) and their
    labels."""

    ids: tuple[int, ...]
    positions: tuple[int, ...]
    labels: tuple[bool, ...]
    lines: int  # how many of the positions close thinking lines (the rest: the end tag)
    # Per position, the class (``op_class``) of the question's operation the line must
    # end with (``prm_labels.expected_ops``), -1 where there is none: a training target.
    expected: tuple[int, ...] = ()
    # Per position, the operations left after it (``prm_labels.remaining_ops``, capped at
    # ``MAX_REMAINING``), -1 where there is no target: a training target.
    remaining: tuple[int, ...] = ()


def op_class(op: tuple[str, int] | None) -> int:
    """One of 20 classes (operator x operand digit), -1 for None."""
    return -1 if op is None else (0 if op[0] == "+" else 10) + op[1]


def example(codec: CharCodec, completion: Completion) -> Example:
    """Prompt + the generated ids (up to EOS), with a label at every step tag after the
    prompt. Lines are the thinking text split at the tag; a last line without a tag
    (thinking cut mid-line) has no reward to label."""
    tag = codec.encode(STEP_TAG)[0]
    prompt = codec.encode(chat_prompt(completion.question.prompt))
    gen = list(completion.token_ids)
    if codec.eos_id in gen:
        gen = gen[: gen.index(codec.eos_id)]
    think_end = gen.index(codec.think_end_id) if codec.think_end_id in gen else len(gen)
    thinking = gen[:think_end]
    lines = codec.decode(thinking).split(STEP_TAG)[:-1]
    labels = step_labels(completion.question, lines)
    positions = [len(prompt) + i for i, t in enumerate(thinking) if t == tag]
    out_labels = list(labels.lines)
    expected = [op_class(op) for op in expected_ops(completion.question, lines)]
    left, left_at_end = remaining_ops(completion.question, lines)
    remaining = [_remaining_class(r) for r in left]
    after = think_end + 1
    if after < len(gen) and gen[after] == tag:
        positions.append(len(prompt) + after)
        out_labels.append(labels.complete)
        expected.append(-1)
        remaining.append(_remaining_class(left_at_end))
    return Example(
        ids=tuple(prompt + gen),
        positions=tuple(positions),
        labels=tuple(out_labels),
        lines=len(labels.lines),
        expected=tuple(expected),
        remaining=tuple(remaining),
    )


def _remaining_class(left: int | None) -> int:
    return -1 if left is None else min(left, MAX_REMAINING)


def corrupt(codec: CharCodec, completion: Completion, rng: random.Random) -> Completion | None:
    """``completion`` with one thinking line's result digit (its last character) replaced
    by another digit; None when no line ends in a digit. Only the thinking changes (the
    answer after `</think>` is kept: the labels read the thinking)."""
    thinking = completion.thinking
    lines = thinking.split(STEP_TAG)
    closed = lines[:-1]  # a line cut mid-way has no tag
    candidates = [i for i, line in enumerate(closed) if line[-1:].isdigit()]
    if not candidates:
        return None
    k = rng.choice(candidates)
    digit = int(closed[k][-1])
    lines[k] = closed[k][:-1] + str((digit + rng.randint(1, 9)) % 10)
    return _rewritten(codec, completion, lines)


def corrupt_operand(
    codec: CharCodec, completion: Completion, rng: random.Random
) -> Completion | None:
    """``completion`` with one right computing line's last operation replaced, its
    arithmetic kept true: half the time by the question's operation after the right one
    (a skipped operation, `base`'s commonest error), else by another operand digit; None
    when no right computing line has one to take."""
    thinking = completion.thinking
    lines = thinking.split(STEP_TAG)
    closed = lines[:-1]
    labels = step_labels(completion.question, closed).lines
    ops = question_ops(completion.question)
    consumed = 0
    candidates: list[tuple[int, int]] = []  # (line, index of its last operation)
    for i, (line, right) in enumerate(zip(closed, labels, strict=True)):
        if not right:
            break
        if classify_line(line) in ("step", "merged"):
            consumed += sum(1 for ch in line.partition("=")[0] if ch in "+-")
            candidates.append((i, consumed - 1))
    if not candidates:
        return None
    k, at = rng.choice(candidates)
    left, _, _ = closed[k].partition("=")
    op, operand = left[-2], int(left[-1])
    if rng.random() < 0.5 and at + 1 < len(ops) and ops[at + 1] != (op, operand):
        op, new = ops[at + 1]
    else:
        new = (operand + rng.randint(1, 9)) % 10
    body = left[:-2] + op + str(new)
    value = int(body[0])
    for i in range(1, len(body), 2):
        value = apply_op(value, body[i], int(body[i + 1]))
    lines[k] = f"{body}={value}"
    return _rewritten(codec, completion, lines)


def corrupt_early_end(
    codec: CharCodec, completion: Completion, rng: random.Random
) -> Completion | None:
    """``completion`` with its thinking closed after a right computing line one or two
    before its last right one (and whatever followed dropped): every line stays right,
    the thinking no longer reaches the answer. None without a closed thinking or with
    fewer than two right computing lines."""
    if "</think>" not in completion.text:
        return None
    closed = completion.thinking.split(STEP_TAG)[:-1]
    labels = step_labels(completion.question, closed).lines
    computing = [
        i
        for i, (line, right) in enumerate(zip(closed, labels, strict=True))
        if right and classify_line(line) in ("step", "merged")
    ]
    if len(computing) < 2:
        return None
    keep = computing[-1 - rng.randint(1, min(2, len(computing) - 1))]
    return _rewritten(codec, completion, [*closed[: keep + 1], ""])


def _rewritten(codec: CharCodec, completion: Completion, lines: list[str]) -> Completion:
    rest = completion.text[len(completion.thinking) :]
    ids = codec.encode(STEP_TAG.join(lines) + rest)
    return to_completion(codec, completion.question, ids)


class ProcessRewardNet(torch.nn.Module):
    """`Qwen2ForProcessRewardModel` in torch: its state dict has vLLM's weight names."""

    def __init__(self, causal: Qwen2ForCausalLM) -> None:
        super().__init__()
        self.config = causal.config
        self.model = causal.model
        h = causal.config.hidden_size
        self.score = torch.nn.Sequential(
            torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, 2)
        )

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits of (wrong, right) at every position: [batch, length, 2]."""
        out: torch.Tensor = self.score(self.hidden(ids, mask))
        return out

    def hidden(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        return out


def load_net(
    base: str, *, seed: int, extra_layers: int = 0, init: str | None = None
) -> ProcessRewardNet:
    """`base`'s backbone with ``extra_layers`` more layers on top, each the identity at
    first (zero output projections: the residual stream passes through unchanged); with
    ``init``, every weight read from that exported PRM instead (the shapes must match)."""
    torch.manual_seed(seed)
    causal = Qwen2ForCausalLM.from_pretrained(base, dtype=torch.float32)
    if extra_layers == 0:
        net = ProcessRewardNet(causal)
    else:
        net = ProcessRewardNet(_grown(causal, extra_layers))
    if init is not None:
        exported = load_file(str(Path(init) / "model.safetensors"))
        net.load_state_dict(exported, strict=True)
    return net


def _grown(causal: Qwen2ForCausalLM, extra_layers: int) -> Qwen2ForCausalLM:
    layers = causal.config.num_hidden_layers + extra_layers
    config = Qwen2Config.from_dict(
        {
            **causal.config.to_dict(),
            "num_hidden_layers": layers,
            "layer_types": ["full_attention"] * layers,
        }
    )
    grown = Qwen2ForCausalLM(config)  # type: ignore[no-untyped-call]
    missing, unexpected = grown.load_state_dict(causal.state_dict(), strict=False)
    assert not unexpected and all(".layers." in k for k in missing), (missing, unexpected)
    for layer in grown.model.layers[causal.config.num_hidden_layers :]:
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    return grown


def _cut(row: Example, rng: random.Random, whole_share: float = 0.0) -> Example:
    """``row`` up to a random step: after its first wrong step (0 or 1 lines on) 7 times
    in 10 when it has one, else anywhere; a row without a wrong step is kept whole
    ``whole_share`` of the time."""
    if len(row.positions) < 2:
        return row
    wrong = [i for i, y in enumerate(row.labels) if not y]
    if not wrong and rng.random() < whole_share:
        return row
    if wrong and rng.random() < 0.7:
        k = min(len(row.positions) - 1, wrong[0] + rng.randint(0, 1))
    else:
        k = rng.randrange(len(row.positions))
    return replace(
        row,
        positions=row.positions[: k + 1],
        labels=row.labels[: k + 1],
        expected=row.expected[: k + 1],
        remaining=row.remaining[: k + 1],
    )


def _digit_logprobs(
    base_logp: torch.Tensor,
    digits: torch.Tensor,
    ids: torch.Tensor,
    rows: Sequence[Example],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(which labeled positions close a line ending in a digit, `base`'s log-probability
    of that digit where it wrote it): the auxiliary regression target, clipped at -10."""
    b = torch.tensor([i for i, r in enumerate(rows) for _ in r.positions], dtype=torch.long)
    t = torch.tensor([p for r in rows for p in r.positions], dtype=torch.long)
    stated = ids[b, t - 1]
    is_digit = torch.isin(stated, digits)
    target = base_logp[b, (t - 2).clamp(min=0), stated].clamp(min=-10.0)
    return is_digit, target[is_digit]


def _base_logprobs(base: Qwen2ForCausalLM, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = torch.log_softmax(
            base(input_ids=ids, attention_mask=mask).logits, dim=-1
        )
    return out


def _operand_logprobs(
    base_logp: torch.Tensor, codec: CharCodec, ids: torch.Tensor, rows: Sequence[Example]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(which labeled positions close a line `...<op><digit>=<digit>`, `base`'s
    log-probability of that operator and operand where it wrote them, clipped at -10)."""
    b = torch.tensor([i for i, r in enumerate(rows) for _ in r.positions], dtype=torch.long)
    t = torch.tensor([p for r in rows for p in r.positions], dtype=torch.long)
    digits = torch.tensor(codec.encode("0123456789"), dtype=torch.long)
    signs = torch.tensor(codec.encode("+-"), dtype=torch.long)
    eq = codec.encode("=")[0]
    t4 = (t - 4).clamp(min=0)
    shaped = (
        (t >= 6)
        & (ids[b, (t - 2).clamp(min=0)] == eq)
        & torch.isin(ids[b, (t - 3).clamp(min=0)], digits)
        & torch.isin(ids[b, t4], signs)
    )
    op_lp = base_logp[b, (t - 5).clamp(min=0), ids[b, t4]]
    operand_lp = base_logp[b, t4, ids[b, (t - 3).clamp(min=0)]]
    return shaped, (op_lp + operand_lp).clamp(min=-10.0)[shaped]


def _batch(rows: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ids and mask, each row cut after its last tag (what follows has no label
    and, attention being causal, no effect on the tags' rewards)."""
    cut = [r.ids[: r.positions[-1] + 1] if r.positions else r.ids for r in rows]
    width = max(len(c) for c in cut)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, c in enumerate(cut):
        ids[i, : len(c)] = torch.tensor(c)
        mask[i, : len(c)] = 1
    return ids, mask


def _gather(values: torch.Tensor, rows: Sequence[Example]) -> torch.Tensor:
    """``values`` ([batch, length, ...]) at every labeled position of ``rows``, concatenated."""
    b = [i for i, r in enumerate(rows) for _ in r.positions]
    t = [p for r in rows for p in r.positions]
    return values[torch.tensor(b, dtype=torch.long), torch.tensor(t, dtype=torch.long)]


def step_scores(net: ProcessRewardNet, rows: Sequence[Example], pad_id: int) -> list[list[float]]:
    """P(right) at each labeled position of each row (what vLLM's step pooling returns)."""
    out: list[list[float]] = []
    was_training = net.training
    net.train(False)
    with torch.no_grad():
        for i in range(0, len(rows), 64):
            chunk = rows[i : i + 64]
            ids, mask = _batch(chunk, pad_id)
            probs = torch.softmax(net(ids, mask), dim=-1)[..., 1]
            out += [[float(probs[j, p]) for p in r.positions] for j, r in enumerate(chunk)]
    net.train(was_training)
    return out


def step_auroc(scores: Sequence[Sequence[float]], rows: Sequence[Example]) -> float:
    flat = [s for row in scores for s in row]
    labels = [y for r in rows for y in r.labels]
    return auroc(flat, labels)


def first_error_auroc(scores: Sequence[Sequence[float]], rows: Sequence[Example]) -> float:
    """AUROC over each row's thinking steps up to and including its first wrong one."""
    flat: list[float] = []
    labels: list[bool] = []
    for row_scores, r in zip(scores, rows, strict=True):
        for s, y in zip(row_scores[: r.lines], r.labels[: r.lines], strict=True):
            flat.append(s)
            labels.append(y)
            if not y:
                break
    return auroc(flat, labels)


def export_prm(net: ProcessRewardNet, codec: CharCodec, directory: Path) -> None:
    """A directory vLLM serves as `Qwen2ForProcessRewardModel` (runner="pooling")."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = net.config.to_dict()
    config.update(
        architectures=[ARCHITECTURE],
        num_labels=2,
        id2label={"0": "wrong", "1": "right"},
        label2id={"wrong": 0, "right": 1},
        pad_token_id=codec.pad_id,
        # Ours, not vLLM's: the token whose hidden state each step's reward is read at.
        # vLLM needs it as `pooler_config.step_tag_id` (its default is Qwen2.5-Math-PRM's
        # `<extra_0>`); engines.local.prm and `thinkgate replica --prm` pass it.
        step_tag_id=codec.encode(STEP_TAG)[0],
    )
    for stale in ("tie_word_embeddings_", "transformers_version"):
        config.pop(stale, None)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_tokenizer(directory)


def _questions(settings: PrmSettings) -> tuple[list[Question], list[Question]]:
    kw = {"seed": settings.seed, "min_ops": settings.min_ops, "max_ops": settings.max_ops}
    return (
        make_questions("train", settings.train_questions, **kw),
        make_questions("validation", settings.val_questions, **kw),
    )


def _sample(settings: PrmSettings, questions: Sequence[Question]) -> list[Completion]:
    rs = RewardSettings(
        base=settings.base,
        seed=settings.seed,
        samples_per_question=settings.samples_per_question,
        temperature=settings.temperature,
    )
    sampler = sample_vllm if settings.sampler == "vllm" else sample_hf
    out = sampler(settings.base, questions, rs)
    gc.collect()
    return out


def _class_loss(probe: torch.nn.Module, hidden: torch.Tensor, classes: list[int]) -> torch.Tensor:
    """Cross-entropy of a class probe at the tags that have a target (class >= 0); 0 when
    none has."""
    want = torch.tensor(classes, dtype=torch.long)
    has = want >= 0
    if not bool(has.any()):
        return hidden.new_zeros(())
    return torch.nn.functional.cross_entropy(probe(hidden[has]), want[has])


def train_prm(settings: PrmSettings, out: Path, *, progress_bar: bool = True) -> PrmResult:
    torch.set_num_threads(settings.threads)
    codec = CharCodec()
    train_q, val_q = _questions(settings)
    t0 = time.monotonic()
    sampled = _sample(settings, [*train_q, *val_q])
    sampling_s = time.monotonic() - t0
    n_train = len(train_q) * settings.samples_per_question
    train_rows = [e for e in (example(codec, c) for c in sampled[:n_train]) if e.positions]
    val_rows = [e for e in (example(codec, c) for c in sampled[n_train:]) if e.positions]
    labels = [y for r in train_rows for y in r.labels]

    net = load_net(
        settings.base, seed=settings.seed, extra_layers=settings.extra_layers, init=settings.init
    )
    net.train()
    base_layers = len(net.model.layers) - settings.extra_layers
    frozen = (
        [net.model.embed_tokens, *net.model.layers[:base_layers]] if settings.extra_layers else []
    )
    for module in frozen:
        module.requires_grad_(False)
    # `base` itself, frozen: the auxiliary target (its log-probability of each stated digit).
    teacher = Qwen2ForCausalLM.from_pretrained(settings.base, dtype=torch.float32)
    teacher.requires_grad_(False)
    teacher.train(False)
    digits = torch.tensor(codec.encode("0123456789"), dtype=torch.long)
    probe = torch.nn.Linear(net.config.hidden_size, 1)
    operand_probe = torch.nn.Linear(net.config.hidden_size, 1)
    expected_probe = torch.nn.Linear(net.config.hidden_size, 20)
    remaining_probe = torch.nn.Linear(net.config.hidden_size, MAX_REMAINING + 1)
    trainable = [
        *(p for p in net.parameters() if p.requires_grad),
        *probe.parameters(),
        *operand_probe.parameters(),
        *expected_probe.parameters(),
        *remaining_probe.parameters(),
    ]
    optim = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor([settings.wrong_weight, 1.0]))
    rng = random.Random(settings.seed)
    with_error = [i for i, r in enumerate(train_rows) if not all(r.labels)]

    def _corrupted(c: Completion) -> Completion | None:
        if rng.random() < settings.early_end_share:
            return corrupt_early_end(codec, c, rng) or corrupt(codec, c, rng)
        if rng.random() < settings.operand_share:
            return corrupt_operand(codec, c, rng) or corrupt(codec, c, rng)
        return corrupt(codec, c, rng)

    copies = [c for c in (_corrupted(x) for x in sampled[:n_train]) if c is not None]
    corrupted = [e for e in (example(codec, c) for c in copies) if e.positions]
    n_error = round(settings.batch_size * settings.error_share) if with_error else 0
    n_copy = round(settings.batch_size * settings.corrupt_share) if corrupted else 0
    order: list[int] = []
    error_order: list[int] = []
    copy_order: list[int] = []
    val_copies = [c for c in (_corrupted(x) for x in sampled[n_train:]) if c]
    val_hard = val_rows + [e for e in (example(codec, c) for c in val_copies) if e.positions]

    def evaluate() -> float:
        return first_error_auroc(step_scores(net, val_hard, codec.pad_id), val_hard)

    val_auc = evaluate()
    curve: list[tuple[int, float]] = [(0, val_auc)]
    best = BestWeights()
    best.offer(0, val_auc, net)
    start = time.monotonic()
    step = 0
    bar = tqdm(total=settings.max_steps, disable=not progress_bar, desc="prm")
    while (
        step < settings.max_steps
        and time.monotonic() - start < settings.minutes * 60
        and time.monotonic() - t0 < settings.total_minutes * 60 - EXPORT_RESERVE_S
    ):
        if len(order) < settings.batch_size:
            order = list(range(len(train_rows)))
            rng.shuffle(order)
        if len(error_order) < n_error:
            error_order = list(with_error)
            rng.shuffle(error_order)
        if len(copy_order) < n_copy:
            copy_order = list(range(len(corrupted)))
            rng.shuffle(copy_order)
        n_rest = settings.batch_size - n_error - n_copy
        pick = error_order[:n_error] + order[:n_rest]
        error_order, order = error_order[n_error:], order[n_rest:]
        rows = [train_rows[i] for i in pick] + [corrupted[i] for i in copy_order[:n_copy]]
        copy_order = copy_order[n_copy:]
        if settings.truncate:
            rows = [_cut(r, rng, settings.whole_share) for r in rows]
        ids, mask = _batch(rows, codec.pad_id)
        target = torch.tensor([int(y) for r in rows for y in r.labels], dtype=torch.long)
        # The head only where there are labels (the rest of the positions carry none).
        hidden = _gather(net.hidden(ids, mask), rows)
        loss = loss_fn(net.score(hidden), target)
        if settings.aux_weight > 0 or settings.operand_aux_weight > 0:
            base_logp = _base_logprobs(teacher, ids, mask)
            at_digit, logp = _digit_logprobs(base_logp, digits, ids, rows)
            if settings.aux_weight > 0 and bool(at_digit.any()):
                fit = probe(hidden[at_digit]).squeeze(-1)
                loss = loss + settings.aux_weight * torch.nn.functional.mse_loss(fit, logp)
            shaped, op_logp = _operand_logprobs(base_logp, codec, ids, rows)
            if settings.operand_aux_weight > 0 and bool(shaped.any()):
                fit = operand_probe(hidden[shaped]).squeeze(-1)
                loss = loss + settings.operand_aux_weight * torch.nn.functional.mse_loss(
                    fit, op_logp
                )
        if settings.expected_op_weight > 0:
            classes = [c for r in rows for c in r.expected]
            loss = loss + settings.expected_op_weight * _class_loss(expected_probe, hidden, classes)
        if settings.remaining_weight > 0:
            classes = [c for r in rows for c in r.remaining]
            loss = loss + settings.remaining_weight * _class_loss(remaining_probe, hidden, classes)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optim.step()
        step += 1
        bar.update(1)
        if step % settings.eval_every == 0:
            val_auc = evaluate()
            curve.append((step, val_auc))
            best.offer(step, val_auc, net)
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", val_auroc=f"{val_auc:.3f}")
    bar.close()
    if step % settings.eval_every != 0:
        val_auc = evaluate()
        curve.append((step, val_auc))
        best.offer(step, val_auc, net)
    wall = time.monotonic() - t0  # sampling, loading, training and evaluations
    best.restore(net)
    net.train(False)
    export_prm(net, codec, out)
    return PrmResult(
        settings=settings,
        steps=step,
        wall_s=wall,
        sampling_s=sampling_s,
        train_trajectories=len(train_rows),
        train_steps_labeled=len(labels),
        train_steps_wrong=sum(1 for y in labels if not y),
        train_with_error=len(with_error),
        val_trajectories=len(val_rows),
        val_first_error_auroc=best.auroc,
        val_step_auroc=step_auroc(step_scores(net, val_rows, codec.pad_id), val_rows),
        best_step=best.step,
        val_curve=tuple(curve),
    )
