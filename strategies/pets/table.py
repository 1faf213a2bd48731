"""The online allocation table: what calibration writes and the server loads.

A versioned JSON document (``format: "thinkgate.pets-table"``, ``version: 1``)::

    {"format": "thinkgate.pets-table", "version": 1,
     "k0": 4, "b_max": 64, "average_budget": 16,
     "buckets": [{"pattern": "4", "budget": 4, "pi": 0.71, "a": 0.0, "b": 3.7}, ...],
     "calibration": {"questions": 64, "pool": 64, ...}}

``budget`` is ``B_t``: the total samples (warm-up included) a question whose warm-up
shows ``pattern`` gets. A reader refuses another format or a newer version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Final

from strategies.pets.allocation import allocate
from strategies.pets.calibration.curves import BucketParams
from strategies.pets.labels import K0, PATTERNS

FORMAT: Final = "thinkgate.pets-table"
VERSION: Final = 1

Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Bucket:
    pattern: str
    budget: int
    pi: float
    a: float
    b: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PetsTable:
    """Bucket budgets for the online rule, plus the fit they came from."""

    k0: int
    b_max: int
    average_budget: float
    buckets: tuple[Bucket, ...]
    calibration: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        patterns = tuple(bk.pattern for bk in self.buckets)
        if self.k0 == K0 and patterns != PATTERNS:
            raise ValueError(f"buckets must be {PATTERNS}, got {patterns}")
        for bk in self.buckets:
            if not self.k0 <= bk.budget <= self.b_max:
                raise ValueError(f"bucket {bk.pattern!r}: budget {bk.budget} out of range")

    def budget(self, pattern: str) -> int:
        """``B_t`` of a warm-up pattern (raises ``KeyError`` for an unknown one)."""
        for bk in self.buckets:
            if bk.pattern == pattern:
                return bk.budget
        raise KeyError(pattern)

    @property
    def expected_budget(self) -> float:
        """``sum_t pi_t B_t``: the average samples per question on calibration data."""
        return sum(bk.pi * bk.budget for bk in self.buckets)

    @classmethod
    def build(
        cls,
        params: BucketParams,
        *,
        average_budget: float,
        b_max: int,
        k0: int = K0,
        calibration: Mapping[str, Scalar] | None = None,
    ) -> PetsTable:
        """Solve the bucket plan for ``average_budget`` (see ``allocation.allocate``)."""
        budgets = allocate(
            params.pi, params.a, params.b, average_budget=average_budget, k0=k0, b_max=b_max
        )
        buckets = tuple(
            Bucket(pattern=p, budget=n, pi=pi, a=a, b=b)
            for p, n, pi, a, b in zip(PATTERNS, budgets, params.pi, params.a, params.b, strict=True)
        )
        return cls(
            k0=k0,
            b_max=b_max,
            average_budget=average_budget,
            buckets=buckets,
            calibration=dict(calibration or {}),
        )

    def replanned(self, average_budget: float, b_max: int) -> PetsTable:
        """The same fit solved for another average budget and cap (a request's own
        plan): ``allocate`` over the stored ``pi, a, b``, memoised."""
        if average_budget == self.average_budget and b_max == self.b_max:
            return self
        budgets = _plan(
            tuple(bk.pi for bk in self.buckets),
            tuple(bk.a for bk in self.buckets),
            tuple(bk.b for bk in self.buckets),
            float(average_budget),
            self.k0,
            b_max,
        )
        buckets = tuple(
            Bucket(pattern=bk.pattern, budget=n, pi=bk.pi, a=bk.a, b=bk.b)
            for bk, n in zip(self.buckets, budgets, strict=True)
        )
        return replace(self, average_budget=float(average_budget), b_max=b_max, buckets=buckets)

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "k0": self.k0,
            "b_max": self.b_max,
            "average_budget": self.average_budget,
            "expected_budget": round(self.expected_budget, 6),
            "buckets": [
                {"pattern": bk.pattern, "budget": bk.budget, "pi": bk.pi, "a": bk.a, "b": bk.b}
                for bk in self.buckets
            ],
            "calibration": dict(self.calibration),
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> PetsTable:
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a PETS table (format {doc.get('format')!r})")
        version = doc.get("version")
        if not isinstance(version, int) or version > VERSION:
            raise ValueError(f"unsupported PETS table version {version!r} (reader: {VERSION})")
        raw = doc.get("buckets")
        if not isinstance(raw, list):
            raise ValueError("PETS table has no bucket list")
        buckets = tuple(
            Bucket(
                pattern=str(item["pattern"]),
                budget=int(item["budget"]),
                pi=float(item["pi"]),
                a=float(item["a"]),
                b=float(item["b"]),
            )
            for item in raw
        )
        calibration = doc.get("calibration", {})
        return cls(
            k0=int(doc["k0"]),  # type: ignore[call-overload]
            b_max=int(doc["b_max"]),  # type: ignore[call-overload]
            average_budget=float(doc["average_budget"]),  # type: ignore[arg-type]
            buckets=buckets,
            calibration=dict(calibration) if isinstance(calibration, Mapping) else {},
        )

    @classmethod
    def load(cls, path: Path) -> PetsTable:
        return cls.from_json(json.loads(path.read_text()))


@lru_cache(maxsize=256)
def _plan(
    pi: tuple[float, ...],
    a: tuple[float, ...],
    b: tuple[float, ...],
    average_budget: float,
    k0: int,
    b_max: int,
) -> tuple[int, ...]:
    return allocate(pi, a, b, average_budget=average_budget, k0=k0, b_max=b_max)


# The table calibrated on the testbed's base model (train split), loaded by default.
DEFAULT_TABLE: Final = Path(__file__).parent / "tables" / "testbed-base.json"
