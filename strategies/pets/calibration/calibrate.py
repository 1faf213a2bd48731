"""From calibration pools to an allocation table (docs/specs.md §4, online 1-5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from strategies.pets.calibration.curves import QuestionFit, bucket_params, fit_question
from strategies.pets.calibration.simulate import Pool
from strategies.pets.labels import majority_label
from strategies.pets.table import PetsTable, Scalar


def fit_pools(
    pools: Sequence[Pool], *, k_max: int = 32, trials: int = 4000, seed: int = 0
) -> list[QuestionFit]:
    """One probit fit per pool; pools without any answer are skipped (no label)."""
    rng = np.random.default_rng(seed)
    return [
        fit_question(p.labels, k_max=k_max, trials=trials, rng=rng)
        for p in pools
        if majority_label(p.labels) is not None
    ]


def build_table(
    fits: Sequence[QuestionFit],
    *,
    average_budget: float,
    b_max: int = 64,
    calibration: Mapping[str, Scalar] | None = None,
) -> PetsTable:
    """Pool the fits per warm-up pattern and solve the plan for ``average_budget``."""
    meta: dict[str, Scalar] = {"questions": len(fits)}
    meta.update(calibration or {})
    return PetsTable.build(
        bucket_params(fits), average_budget=average_budget, b_max=b_max, calibration=meta
    )
