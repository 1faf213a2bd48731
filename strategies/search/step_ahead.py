"""A step search's next step drawn while the PRM scores this one (particle filtering's
``speculate`` option).

A step waits on the generator, then on the PRM, one after the other. The draw of a
path's next step is a sample of the model given the path: it does not depend on what
the PRM will say of the path's last step. So the next step of every live candidate can
be drawn (one engine round) while the PRM scores them; once the rule has chosen, the
first copy of each candidate it kept takes the step drawn for it, further copies
(resampled duplicates) get steps drawn then (one more round of the same step), and the
steps drawn for candidates the rule dropped are generated for nothing. Those are still
counted (usage bills every generated token): the price of hiding the PRM's wait.
Seeds are given out as rounds are built (the step ahead before the PRM answers, the
extra copies after), so a seeded request draws alike from run to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from core.engine import Sample
from strategies.search.paths import Path, Round, grow_round, plan_round, send_round

if TYPE_CHECKING:
    from strategies.search.step_search import Search


@dataclass(slots=True)
class Ahead:
    """The next step of this step's live candidates, being drawn."""

    search: Search
    round_: Round
    positions: tuple[int, ...]  # where each drawn-for candidate sits in the step's list
    task: asyncio.Future[list[list[Sample]]]
    index: dict[int, int] = field(default_factory=dict)  # id(scored candidate) -> draw
    keep: Sequence[Path] = ()  # the scored candidates (their ids key ``index``)

    @classmethod
    def start(cls, search: Search, candidates: Sequence[Path]) -> Ahead | None:
        """Send the next step of every live one of ``candidates`` (unscored); None when
        none is live."""
        positions = tuple(i for i, c in enumerate(candidates) if c.live)
        if not positions:
            return None
        round_ = plan_round(
            search.ctx,
            search.plan,
            search.options,
            [candidates[i] for i in positions],
            1,
            search.ledger,
        )
        task = asyncio.ensure_future(send_round(search.ctx, round_))
        return cls(search=search, round_=round_, positions=positions, task=task)

    def scored(self, scored: Sequence[Path]) -> None:
        """The step's candidates as the PRM scored them (new objects, in the same order):
        the rule returns these, so their identity says whose draw is whose."""
        self.keep = scored
        self.index = {id(scored[pos]): k for k, pos in enumerate(self.positions)}

    async def children(self, live: Sequence[Path]) -> list[list[Path]]:
        """One next step for each of ``live`` (the rule's survivors, in order). Empty
        ``live``: the search ended; the drawn steps are counted into its last step."""
        s = self.search
        ctx, ledger = s.ctx, s.ledger
        taken: set[int] = set()
        picks: list[int | None] = []
        fresh: list[Path] = []
        for p in live:
            k = self.index.get(id(p))
            if k is not None and k not in taken:
                taken.add(k)
                picks.append(k)
            else:
                picks.append(None)
                fresh.append(p)
        extra_round = plan_round(ctx, s.plan, s.options, fresh, 1, ledger) if fresh else None
        extra_task = asyncio.ensure_future(send_round(ctx, extra_round)) if extra_round else None
        t0 = time.perf_counter()
        try:
            drawn_samples = await self.task
            extra_samples = await extra_task if extra_task is not None else None
        except BaseException:
            if extra_task is not None:
                _settle(extra_task)
            raise
        ledger.engine_s += time.perf_counter() - t0
        drawn = grow_round(ctx, s.plan, self.round_, drawn_samples, ledger, same_step=not live)
        extra: list[list[Path]] = []
        if extra_round is not None and extra_samples is not None:
            extra = grow_round(ctx, s.plan, extra_round, extra_samples, ledger, same_step=True)
        ledger.ahead_used += len(taken)
        ledger.ahead_dropped += len(self.positions) - len(taken)
        out: list[list[Path]] = []
        rest = iter(extra)
        for p, k in zip(live, picks, strict=True):
            if k is None:
                out.append(next(rest))
            else:
                # Drawn from the unscored candidate: the path's rewards are the scored one's.
                out.append([replace(child, rewards=p.rewards) for child in drawn[k]])
        return out

    async def cancel(self) -> None:
        """Cancel the step drawn ahead and wait until the engine has let it go."""
        _settle(self.task)
        with contextlib.suppress(BaseException):
            await self.task


def _settle(task: asyncio.Future[list[list[Sample]]]) -> None:
    """Cancel a round still running; read the failure of one that already failed (so
    asyncio does not report it as never retrieved)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()
