"""The budget predictor: a Gamma over log(1 + remaining thinking length), per next token.

Given the model's final hidden state ``h`` at a position, the predictor outputs for
every vocabulary token ``v`` a Gamma(shape ``alpha_v``, rate ``lambda_v``) over
``x = log(1 + L)``, where ``L`` is the number of thinking tokens still to come if ``v``
is emitted next (docs/specs.md §2).

Shape (where we differ from the paper, and why, is in docs/budget-guidance.md):
``h -> LayerNorm -> Linear(d, w) -> GELU -> Linear(w, w) -> GELU`` then two low-rank
heads ``Linear(w, r, no bias) -> Linear(r, |V|)`` and softplus. The paper reads all
layers through a 12-layer BERT encoder and uses full-rank heads; inside vLLM the
predictor runs in the sampling step of every guided row, so it must cost little next
to the model: the final hidden state is what ``compute_logits`` receives for free, and
a rank-r head keeps the parameter count at ``2 r |V|`` instead of ``2 w |V|``.

Targets: a trace ``g_0 .. g_T`` with ``g_T = </think>`` gets ``L_t = T - t + 1`` at the
position that predicts ``g_t``: ``</think>`` itself counts as the last thinking step
(L = 1). The spec's convention (the final thinking token has L = 1) would leave
``</think>`` with L = 0, which a Gamma over ``log(1 + L)`` cannot represent; with the
shift ``</think>`` gets a learned (alpha, lambda) that passes through the same
reliability mask as every other token.

Files: ``DIR/bg_predictor/predictor.safetensors`` and ``DIR/bg_predictor/config.json``
beside a model in ``DIR`` (vLLM globs only the root ``*.safetensors``, so the directory
still loads as the plain architecture).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

import torch
from torch import nn
from torch.nn import functional as F

PREDICTOR_DIR: Final = "bg_predictor"
WEIGHTS_FILE: Final = "predictor.safetensors"
CONFIG_FILE: Final = "config.json"
FORMAT_VERSION: Final = 1

# Added after softplus so that alpha, lambda > 0 even when softplus underflows.
EPS: Final = 1e-4


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictorConfig:
    """What a saved predictor is, and the token facts the processors need.

    ``think_end_id`` and ``boundary_token_ids`` (every token whose text contains a
    newline) were resolved from the model's tokenizer at training time; the
    processors read them from here instead of hard-coding them.
    """

    hidden_size: int
    vocab_size: int
    width: int = 128
    rank: int = 32
    think_end_id: int
    boundary_token_ids: tuple[int, ...]
    # The whole closing sequence when ``</think>`` is several tokens; empty: one token.
    think_end_ids: tuple[int, ...] = ()
    scale: str = "log"  # x = log(1 + L); the only scale implemented
    version: int = FORMAT_VERSION
    # Free-form record of how it was trained (data, steps, held-out metrics).
    training: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        data["boundary_token_ids"] = list(self.boundary_token_ids)
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PredictorConfig:
        data = json.loads(text)
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"unsupported predictor format version {data.get('version')!r}")
        if data.get("scale") != "log":
            raise ValueError(f"unsupported length scale {data.get('scale')!r}")
        data["boundary_token_ids"] = tuple(int(t) for t in data["boundary_token_ids"])
        data["think_end_ids"] = tuple(int(t) for t in data.get("think_end_ids", ()))
        return cls(**data)


class BudgetPredictor(nn.Module):
    """``[N, d]`` hidden states -> ``[N, |V|]`` Gamma shape and rate (fp32)."""

    def __init__(self, config: PredictorConfig) -> None:
        super().__init__()
        self.config = config
        d, w, r, v = config.hidden_size, config.width, config.rank, config.vocab_size
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, w)
        self.fc2 = nn.Linear(w, w)
        self.alpha_down = nn.Linear(w, r, bias=False)
        self.alpha_up = nn.Linear(r, v)
        self.rate_down = nn.Linear(w, r, bias=False)
        self.rate_up = nn.Linear(r, v)

    def raw(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-softplus head outputs ``(a, l)``; the serving ops fuse the softplus."""
        z = F.gelu(self.fc1(self.norm(h.to(self.fc1.weight.dtype))))
        z = F.gelu(self.fc2(z))
        return self.alpha_up(self.alpha_down(z)), self.rate_up(self.rate_down(z))

    def raw_at(self, h: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, l)`` of token ``tokens[i]`` only, for row ``i``: ``[N]`` each.

        Training needs one column per row; this reads ``N`` rows of the up-projections
        instead of computing all ``|V|`` outputs (same numbers as ``raw(h)[i, tokens[i]]``).
        """
        z = F.gelu(self.fc1(self.norm(h.to(self.fc1.weight.dtype))))
        z = F.gelu(self.fc2(z))
        a = (self.alpha_down(z) * self.alpha_up.weight[tokens]).sum(-1) + self.alpha_up.bias[tokens]
        l_ = (self.rate_down(z) * self.rate_up.weight[tokens]).sum(-1) + self.rate_up.bias[tokens]
        return a, l_

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, l_ = self.raw(h)
        return activate(a), activate(l_)

    def init_from_targets(self, x: torch.Tensor) -> None:
        """Start every token at the moment-matched Gamma of the targets ``x``.

        Training then only has to learn the deviations; from a random start the NLL
        spends its first steps on the marginal alone.
        """
        mean, var = float(x.mean()), float(x.var().clamp_min(1e-6))
        alpha, rate = mean * mean / var, mean / var
        with torch.no_grad():
            self.alpha_up.bias.fill_(inverse_softplus(alpha))
            self.rate_up.bias.fill_(inverse_softplus(rate))
            # Small heads: the start is the marginal, not noise around it.
            self.alpha_up.weight.mul_(0.1)
            self.rate_up.weight.mul_(0.1)


def activate(raw: torch.Tensor) -> torch.Tensor:
    """The positive parameter from a head output (softplus + EPS), as the ops compute it."""
    return F.softplus(raw.float()) + EPS


def inverse_softplus(y: float) -> float:
    """``a`` with ``softplus(a) + EPS == y`` (for building heads and test inputs)."""
    t = torch.tensor(max(y - EPS, 1e-12), dtype=torch.float64)
    return float(t + torch.log(-torch.expm1(-t)))


def encode_length(length: torch.Tensor) -> torch.Tensor:
    """``x = log(1 + L)``: the predictor's length scale."""
    return torch.log1p(length.float())


def gamma_nll(alpha: torch.Tensor, rate: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Elementwise NLL of Gamma(alpha, rate) at ``x > 0`` (the spec's loss).

    ``-[alpha log(rate) - lgamma(alpha) + (alpha - 1) log(x) - rate x]``.
    """
    return -(
        alpha * torch.log(rate) - torch.lgamma(alpha) + (alpha - 1.0) * torch.log(x) - rate * x
    )


def remaining_lengths(think_len: int) -> torch.Tensor:
    """``[think_len + 1]`` targets ``L_t = T - t + 1`` for ``g_0 .. g_T = </think>``.

    ``think_len`` is T, the number of thinking tokens before ``</think>``.
    """
    return torch.arange(think_len + 1, 0, -1, dtype=torch.float32)


def boundary_token_ids(decoded: Sequence[str]) -> tuple[int, ...]:
    """Ids whose text contains a newline: after one of them the next step is a line start.

    ``decoded[i]`` is the text of token ``i`` alone.
    """
    return tuple(i for i, text in enumerate(decoded) if "\n" in text)


def predictor_dir(model_dir: str | Path) -> Path:
    return Path(model_dir) / PREDICTOR_DIR


def has_predictor(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` ships a predictor (weights and config)."""
    d = predictor_dir(model_dir)
    return (d / WEIGHTS_FILE).is_file() and (d / CONFIG_FILE).is_file()


def save_predictor(model_dir: str | Path, predictor: BudgetPredictor) -> Path:
    """Write ``bg_predictor/{predictor.safetensors,config.json}`` under ``model_dir``."""
    from safetensors.torch import save_file

    out = predictor_dir(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().contiguous().cpu() for k, v in predictor.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE), metadata={"format": "thinkgate-bg-predictor"})
    (out / CONFIG_FILE).write_text(predictor.config.to_json() + "\n")
    return out


def load_config(model_dir: str | Path) -> PredictorConfig:
    return PredictorConfig.from_json((predictor_dir(model_dir) / CONFIG_FILE).read_text())


def load_predictor(model_dir: str | Path, device: torch.device | str = "cpu") -> BudgetPredictor:
    """The saved predictor of ``model_dir``, fp32, in eval mode.

    Raises FileNotFoundError when the model has none, ValueError when the files do not
    match each other.
    """
    from safetensors.torch import load_file

    config = load_config(model_dir)
    predictor = BudgetPredictor(config)
    state = load_file(str(predictor_dir(model_dir) / WEIGHTS_FILE))
    missing, unexpected = predictor.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"predictor weights do not match config: {missing=} {unexpected=}")
    return predictor.to(device=device, dtype=torch.float32).eval()
