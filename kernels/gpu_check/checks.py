"""Correctness: each Triton kernel against its torch reference, and the Model Runner V2
adapters on hand-built batches (the adapter on ``device`` against the same adapter on
CPU, where it takes the torch ops). Every check returns a :class:`Result`; none raises
on a mismatch. Import only after :func:`kernels.gpu_check.vllm_standin.install`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from kernels.confidence import args as conf_args
from kernels.elastic import args as elastic_args
from kernels.elastic.args import ElasticArgs
from kernels.elastic.state import ElasticCol, new_state, row_values
from kernels.guidance import args as guidance_args

LARGE_VOCAB = 151936  # Qwen2/3's vocabulary
_NO_CONFIG: Any = None  # the adapters read nothing from VllmConfig


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    detail: str


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(
        a.contiguous().view(torch.int32).cpu(), b.contiguous().view(torch.int32).cpu()
    )


def elastic_table(
    rng: random.Random, capacity: int, vocab: int, device: torch.device, forced: float = 0.5
) -> torch.Tensor:
    """A random Elastic table: ~30% inactive rows, some out-of-vocab ids, some forced."""
    state = new_state(capacity, torch.device("cpu"))
    for row in range(capacity):
        if rng.random() < 0.3:
            continue
        state.write(
            row,
            row_values(
                ElasticArgs(
                    thinking_budget=rng.randint(0, 5),
                    solution_budget=rng.choice([None, 0, 2, 4]),
                    think_end_id=rng.randrange(vocab + 2)
                    if rng.random() < 0.1
                    else rng.randrange(vocab),
                    eos_id=rng.randrange(vocab),
                    thinking_open=rng.random() < 0.8,
                )
            ),
        )
        state.set_column(ElasticCol.PHASE, [row], [rng.randint(0, 1)])
        state.set_column(ElasticCol.USED, [row], [6 if rng.random() < forced else 0])
    state.flush()
    return state.device.to(device)


def check_elastic_mask(
    device: torch.device, shapes: list[tuple[int, int]], seed: int = 0
) -> Result:
    from kernels.elastic.mask import elastic_mask_ref
    from kernels.elastic.mask_triton import apply_elastic_mask_triton

    rng = random.Random(seed)
    done = []
    for rows, vocab in shapes:
        for mapped in (False, True):
            capacity = rows + 3
            table = elastic_table(rng, capacity, vocab, device)
            mapping = None
            if mapped:
                mapping = torch.tensor(rng.sample(range(capacity), rows), dtype=torch.int32).to(
                    device
                )
            logits = torch.randn(rows, vocab, device=device)
            a, b = logits.clone(), logits.clone()
            elastic_mask_ref(a, table, mapping)
            apply_elastic_mask_triton(b, table, mapping)
            if not _bits_equal(a, b):
                return Result(
                    "elastic mask", False, f"mismatch rows={rows} vocab={vocab} mapped={mapped}"
                )
            done.append(f"{rows}x{vocab}")
    return Result("elastic mask", True, f"bit-exact on {len(done)} cases ({', '.join(done[::2])})")


def check_elastic_track(
    device: torch.device,
    cases: int,
    seed: int = 0,
    *,
    max_rows: int = 64,
    lengths: tuple[int, ...] = (17, 300, 4096),
) -> Result:
    from kernels.elastic.track import elastic_track_ref
    from kernels.elastic.track_triton import apply_elastic_track_triton

    rng = random.Random(seed)
    for i in range(cases):
        capacity, max_len, end = rng.randint(1, max_rows), rng.choice(lengths), 5
        table = elastic_table(rng, capacity, 8, torch.device("cpu"))
        table[ElasticCol.THINK_END_ID] = end
        table[ElasticCol.THINK_END_POS] = torch.tensor(
            [rng.choice([-1, -1, 3]) for _ in range(capacity)], dtype=torch.int32
        )
        prompt = torch.tensor([rng.randint(1, 8) for _ in range(capacity)], dtype=torch.int32)
        total = prompt + torch.tensor(
            [rng.randint(0, max_len - 9) for _ in range(capacity)], dtype=torch.int32
        )
        table[ElasticCol.SCAN_POS] = torch.tensor(
            [rng.randint(0, int(t)) for t in total], dtype=torch.int32
        )
        tokens = torch.randint(0, 8, (capacity, max_len), dtype=torch.int32)
        mapping = torch.tensor(
            rng.sample(range(capacity), rng.randint(0, capacity)), dtype=torch.int32
        )
        m, tok, pl, tl = (t.to(device) for t in (mapping, tokens, prompt, total))
        a, b = table.to(device), table.to(device)
        elastic_track_ref(a, m, tok, pl, tl)
        apply_elastic_track_triton(b, m, tok, pl, tl)
        if not torch.equal(a.cpu(), b.cpu()):
            return Result("elastic track", False, f"case {i}: capacity={capacity} len={max_len}")
    return Result(
        "elastic track",
        True,
        f"exact on {cases} random batches (up to {max_rows} rows, {max(lengths)} tokens)",
    )


def _raw_of(value: torch.Tensor) -> torch.Tensor:
    small = torch.log(torch.expm1(value.clamp_max(20.0)).clamp_min(1e-30))
    return torch.where(value > 20.0, value, small)


def gamma_case(
    device: torch.device, gen: torch.Generator, rows: int, vocab: int, with_rows: bool
) -> tuple[bool, str]:
    """One gamma batch: Triton vs ``gamma_reweight_ref`` (tolerances of the interpret check)."""
    from kernels.guidance.gamma import gamma_reweight_ref
    from kernels.guidance.gamma_triton import gamma_reweight_triton
    from kernels.guidance.predictor import inverse_softplus

    guided = max(1, rows - 1) if with_rows else rows
    idx = torch.randperm(rows, generator=gen)[:guided] if with_rows else None
    logits = torch.randn(rows, vocab, generator=gen) * 3
    logits[torch.rand(rows, vocab, generator=gen) < 0.1] = float("-inf")
    a_raw = _raw_of(torch.empty(guided, vocab).uniform_(-2.0, 7.6, generator=gen).exp())
    l_raw = _raw_of(torch.empty(guided, vocab).uniform_(-1.0, 6.0, generator=gen).exp())
    a_raw[0] = inverse_softplus(0.5)  # row 0: the mask removes everything (greedy fallback)
    budget = torch.randint(1, 3000, (guided,), generator=gen, dtype=torch.int32)
    if guided > 1:
        budget[1] = 0  # an unguided row inside the batch
    mask = torch.randint(0, 2, (guided,), generator=gen, dtype=torch.int32)
    mask[0] = 1
    ref = logits.clone()
    gamma_reweight_ref(ref, idx, a_raw, l_raw, budget, mask)
    tri_d = logits.to(device)
    a_d, l_d, b_d, m_d = (t.to(device) for t in (a_raw, l_raw, budget, mask))
    idx_d = idx.to(device) if idx is not None else None
    gamma_reweight_triton(tri_d, idx_d, a_d, l_d, b_d, m_d)
    tri = tri_d.cpu()
    floor = -60.0
    zero_ref, zero_tri = ~(ref > floor), ~(tri > floor)
    same_inf = torch.equal(zero_ref, zero_tri)
    finite = ~zero_ref & ~zero_tri
    f_ref = torch.exp(ref[finite] - logits[finite])
    f_tri = torch.exp(tri[finite] - logits[finite])
    err = (f_ref - f_tri).abs()
    close = bool((err <= 1e-5 + 2e-3 * f_ref).all())
    p_diff = torch.nan_to_num(torch.softmax(ref, 1) - torch.softmax(tri, 1)).abs().max()
    p_close = bool(p_diff <= 1e-4)
    max_err = float(err.max()) if err.numel() else 0.0
    info = f"{rows}x{vocab} maxerr={max_err:.1e} same_inf={same_inf} p_close={p_close}"
    return same_inf and close and p_close, info


def check_gamma(device: torch.device, shapes: list[tuple[int, int]], seed: int = 0) -> Result:
    gen = torch.Generator().manual_seed(seed)
    infos = []
    for i, (rows, vocab) in enumerate(shapes):
        ok, info = gamma_case(device, gen, rows, vocab, with_rows=i % 2 == 1)
        infos.append(info)
        if not ok:
            return Result("gamma reweight", False, info)
    return Result("gamma reweight", True, f"{len(shapes)} cases within tolerance; " + infos[-1])


# --- Model Runner V2 adapters on hand-built batches -------------------------------------


def _tensor_view(t: torch.Tensor) -> SimpleNamespace:
    return SimpleNamespace(gpu=t, np=t.cpu().numpy())


def _req_states(
    device: torch.device,
    slots: int,
    vocab: int,
    tokens: torch.Tensor,
    prompt: torch.Tensor,
    total: torch.Tensor,
) -> Any:
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcRequestState

    views: Any = [_tensor_view(t.to(device)) for t in (tokens, prompt, prompt, total)]
    return LogitsProcRequestState(
        device=device,
        max_num_reqs=slots,
        vocab_size=vocab,
        all_token_ids=views[0],
        prompt_len=views[1],
        prefill_len=views[2],
        total_len=views[3],
    )


def _ctx(device: torch.device, slots: list[int], input_ids: list[int], pos: list[int]) -> Any:
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    mapping = torch.tensor(slots, dtype=torch.int32)
    p = torch.tensor(pos, dtype=torch.int64)
    return LogitsContext(
        expanded_idx_mapping=mapping.to(device),
        idx_mapping=mapping.to(device),
        idx_mapping_np=mapping.numpy(),
        expanded_local_pos=torch.zeros(len(slots), dtype=torch.int32, device=device),
        input_ids=torch.tensor(input_ids, dtype=torch.int32).to(device),
        pos=p.to(device),
        seq_lens_upper_bound_np=(p + 1).numpy(),
    )


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _params(extra: dict[str, Any] | None) -> Any:
    from vllm import SamplingParams

    return SamplingParams(extra_args=extra)


def _run_adapter(
    make: Callable[[torch.device], Any],
    device: torch.device,
    requests: list[dict[str, Any] | None],
    steps: list[tuple[Any, torch.Tensor]],
) -> tuple[list[torch.Tensor], list[bool], list[str]]:
    """Admit ``requests`` into slots 0.., run ``steps`` (ctx builder, logits); outputs on CPU."""
    handler = _Warnings()
    logging.getLogger("kernels").addHandler(handler)
    try:
        proc = make(device)
        taken = [proc.add_request(i, _params(extra)) for i, extra in enumerate(requests)]
        proc.apply_staged_writes()
        outs = []
        for ctx_of, logits in steps:
            x = logits.to(device).clone()
            outs.append(proc.apply(x, ctx_of(device)).cpu())
        if device.type == "cuda":
            torch.cuda.synchronize()
        return outs, taken, handler.messages
    finally:
        logging.getLogger("kernels").removeHandler(handler)


def check_elastic_v2(device: torch.device, vocab: int) -> Result:
    from kernels.elastic.vllm_v2 import ElasticLogitsProcessorV2

    end, eos, plen = 11, 2, 4
    k = elastic_args
    requests: list[dict[str, Any] | None] = [
        {k.THINKING_BUDGET: 3, k.THINK_END_ID: end, k.EOS_ID: eos},  # thinking, over budget
        {k.THINKING_BUDGET: 100, k.THINK_END_ID: end, k.EOS_ID: eos},  # thinking, under
        None,  # not opted in
        {k.THINKING_BUDGET: "bad"},  # bad args: dropped with a warning
        {k.THINKING_BUDGET: 1, k.SOLUTION_BUDGET: 2, k.THINK_END_ID: end, k.EOS_ID: eos},
    ]
    slots = len(requests)
    tokens = torch.full((slots, 64), 7, dtype=torch.int32)
    tokens[4, plen + 1] = end  # slot 4 closed thinking; 3 answer tokens after it
    prompt = torch.full((slots,), plen, dtype=torch.int32)
    total = torch.tensor([plen + 5, plen + 5, plen + 5, plen + 5, plen + 5], dtype=torch.int32)
    order = [4, 2, 0, 3, 1]
    logits = torch.randn(len(order), vocab)

    def make(dev: torch.device) -> Any:
        return ElasticLogitsProcessorV2(
            _NO_CONFIG, _req_states(dev, slots, vocab, tokens, prompt, total)
        )

    steps = [(lambda dev: _ctx(dev, order, [7] * 5, [plen + 4] * 5), logits)]
    got, taken, warned = _run_adapter(make, device, requests, steps)
    ref, _, _ = _run_adapter(make, torch.device("cpu"), requests, steps)
    out = got[0]
    expect_forced = {0: end, 4: eos}  # slot -> forced token
    for row, slot in enumerate(order):
        if slot in expect_forced:
            tok = expect_forced[slot]
            ok = out[row, tok] == 0.0 and bool(torch.isinf(out[row]).sum() == vocab - 1)
        else:
            ok = _bits_equal(out[row], logits[row])
        if not ok:
            return Result("elastic V2 adapter", False, f"row {row} (slot {slot}) wrong")
    if taken != [True, True, False, False, True]:
        return Result("elastic V2 adapter", False, f"add_request returned {taken}")
    if not any("bad extra_args" in m for m in warned):
        return Result("elastic V2 adapter", False, "no warning for bad extra_args")
    if not _bits_equal(out, ref[0]):
        return Result("elastic V2 adapter", False, f"{device} differs from the CPU adapter")
    return Result(
        "elastic V2 adapter", True, f"5 slots x {vocab}: forced/untouched rows, bad args warned"
    )


def check_confidence_v2(device: torch.device, vocab: int) -> Result:
    from kernels.confidence.vllm_v2 import ConfidenceLogitsProcessorV2

    c = conf_args
    eos, plen = 3, 4
    requests: list[dict[str, Any] | None] = [
        {c.THRESHOLD: 100.0, c.WINDOW: 1, c.TOP_K: 5, c.EOS_ID: eos},  # always low: stops
        {c.THRESHOLD: 0.0, c.WINDOW: 1, c.TOP_K: 5, c.EOS_ID: eos},  # never stops
        None,
        {c.THRESHOLD: "x"},  # bad args: warned, dropped
    ]
    slots = len(requests)
    tokens = torch.zeros((slots, 32), dtype=torch.int32)
    prompt = torch.full((slots,), plen, dtype=torch.int32)
    total = torch.full((slots,), plen + 3, dtype=torch.int32)
    order = [2, 0, 3, 1]
    gen = torch.Generator().manual_seed(0)
    steps = [
        (
            lambda dev: _ctx(dev, order, [0] * 4, [plen + 2] * 4),
            torch.randn(4, vocab, generator=gen),
        )
        for _ in range(3)
    ]

    def make(dev: torch.device) -> Any:
        return ConfidenceLogitsProcessorV2(
            _NO_CONFIG, _req_states(dev, slots, vocab, tokens, prompt, total)
        )

    got, taken, warned = _run_adapter(make, device, requests, steps)
    ref, _, _ = _run_adapter(make, torch.device("cpu"), requests, steps)
    if taken != [True, True, False, False]:
        return Result("confidence V2 adapter", False, f"add_request returned {taken}")
    if not any("bad extra_args" in m for m in warned):
        return Result("confidence V2 adapter", False, "no warning for bad extra_args")
    last, logits = got[-1], steps[-1][1]
    stopped = last[1, eos] == 0.0 and bool(torch.isinf(last[1]).sum() == vocab - 1)
    untouched = all(_bits_equal(last[r], logits[r]) for r in (0, 2, 3))
    if not (stopped and untouched):
        return Result("confidence V2 adapter", False, f"stopped={stopped} untouched={untouched}")
    for a, b in zip(got, ref, strict=True):
        if not torch.equal(torch.isinf(a), torch.isinf(b)):
            return Result("confidence V2 adapter", False, f"{device} differs from the CPU adapter")
    return Result(
        "confidence V2 adapter", True, f"4 slots x {vocab}, 3 steps: EOS forced, others untouched"
    )


def check_guidance_v2(device: torch.device, vocab: int) -> Result:
    from kernels.guidance.predictor import BudgetPredictor, PredictorConfig
    from kernels.guidance.stash import STASH, GuidanceModel
    from kernels.guidance.vllm_v2 import BudgetGuidanceLogitsProcessorV2

    hidden, think_end, newline, plen = 32, 4, 7, 6
    torch.manual_seed(0)
    config = PredictorConfig(
        hidden_size=hidden,
        vocab_size=vocab,
        width=16,
        rank=4,
        think_end_id=think_end,
        boundary_token_ids=(newline,),
    )
    predictor = BudgetPredictor(config)
    with torch.no_grad():
        predictor.alpha_up.bias.uniform_(20.0, 60.0)
        predictor.rate_up.bias.uniform_(10.0, 30.0)
    predictor.eval().requires_grad_(False)
    b = guidance_args
    requests: list[dict[str, Any] | None] = [{b.BUDGET: 50}, None, {b.BUDGET: "bad"}, {b.BUDGET: 8}]
    slots = len(requests)
    tokens = torch.zeros((slots, 32), dtype=torch.int32)
    prompt = torch.full((slots,), plen, dtype=torch.int32)
    total = torch.full((slots,), plen + 4, dtype=torch.int32)
    order = [3, 1, 0, 2]
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(4, hidden, generator=gen)
    logits = torch.randn(4, vocab, generator=gen)
    # Row order 3, 1, 0, 2: slot 3 at a newline after 4 tokens (b = 4), slot 0 fed a plain
    # token (no boundary), slots 1 and 2 not guided.
    steps = [(lambda dev: _ctx(dev, order, [newline, newline, 9, newline], [plen + 3] * 4), logits)]
    outs = {}
    for dev in (device, torch.device("cpu")):
        boundary = torch.zeros(vocab, dtype=torch.bool, device=dev)
        boundary[newline] = True
        model = GuidanceModel(
            predictor=predictor.to(dev),
            think_end_id=think_end,
            boundary=boundary,
            boundary_ids=frozenset({newline}),
        )
        before = STASH.model
        STASH.install(model)
        try:

            def make(d: torch.device) -> Any:
                return BudgetGuidanceLogitsProcessorV2(
                    _NO_CONFIG, _req_states(d, slots, vocab, tokens, prompt, total)
                )

            def ctx_and_stash(d: torch.device) -> Any:
                STASH.put(h.to(d))  # what the wrapper model does in the forward pass
                return steps[0][0](d)

            outs[dev.type], taken, _ = _run_adapter(make, dev, requests, [(ctx_and_stash, logits)])
        finally:
            STASH.install(before)
            STASH.take(0)
    out, ref = outs[device.type][0], outs["cpu"][0]
    if taken != [True, False, False, True]:
        return Result("guidance V2 adapter", False, f"add_request returned {taken}")
    if not all(_bits_equal(out[r], logits[r]) for r in (1, 2, 3)):
        return Result("guidance V2 adapter", False, "an unguided row changed")
    if _bits_equal(out[0], logits[0]):
        return Result("guidance V2 adapter", False, "the guided row is unchanged")
    fin = torch.isfinite(ref[0]) & torch.isfinite(out[0])
    same_inf = torch.equal(torch.isfinite(ref[0]), torch.isfinite(out[0]))
    diff = float((torch.softmax(out[0], 0) - torch.softmax(ref[0], 0)).abs().max())
    if not same_inf or diff > 1e-4 or not bool(fin.any()):
        return Result("guidance V2 adapter", False, f"vs CPU: same_inf={same_inf} pdiff={diff:.1e}")
    return Result(
        "guidance V2 adapter",
        True,
        f"4 slots x {vocab}: guided row matches CPU (p diff {diff:.1e})",
    )
