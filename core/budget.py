"""The per-request budget, as applied (a value; resolution lives in server/pipeline/budgets.py)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """What one request may spend. ``None`` means "not limited by a budget"."""

    thinking: int | None = None  # tokens inside <think>...</think>, per sample
    solution: int | None = None  # answer tokens after </think>, per sample
    samples: int | None = None  # trajectories drawn (a cap for adaptive strategies)
    k: int | None = None  # answers returned (pass@k), best first
    # The request as a whole (every sample, step, redraw and answer): its completion
    # tokens, and the wall time from its arrival to its last byte (core.allowance).
    tokens: int | None = None
    deadline_ms: int | None = None
    # Thinking tokens spent before thinking may end, per sample (s1's budget forcing).
    thinking_min: int | None = None

    def header(self) -> str:
        """The ``X-Budget-Applied`` header value: ``thinking=64;solution=32;samples=8;k=1``
        (then ``tokens``, ``deadline_ms``, ``thinking_min`` when set).

        Unset fields are left out; an empty budget is ``none``.
        """
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        parts = [f"{name}={value}" for name, value in values if value is not None]
        return ";".join(parts) if parts else "none"

    def as_dict(self) -> dict[str, int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
