"""What a PETS batch job is asked: its questions and its options.

Both are validated before any engine work (``server/batches/pets_wire.py`` parses them from
the request), so bad input is a 400 and never a failed job. The values are frozen: a
job's store keeps them as they were submitted (a resumed job runs on exactly these).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engine import SamplingConfig
from strategies.pets.okg import OkgConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchQuestion:
    custom_id: str
    prompt_token_ids: tuple[int, ...]
    thinking_open: bool
    sampling: SamplingConfig  # n is set per engine request


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchOptions:
    """One job's allocation knobs (query parameters of the endpoint)."""

    total_budget: int
    cap: int = 64
    round_size: int = 16
    warm_up: int = 1
    max_options: int = 16
    draws: int = 500
    seed: int = 0
    max_in_flight: int = 64

    def okg(self) -> OkgConfig:
        return OkgConfig(
            total_budget=self.total_budget,
            cap=self.cap,
            max_options=self.max_options,
            draws=self.draws,
            warm_up=self.warm_up,
            batch=self.round_size,
            seed=self.seed,
        )


MAX_TOTAL_BUDGET = 10**9  # samples; far past any real batch, well inside 64 bits
