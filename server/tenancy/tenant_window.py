"""One tenant's rates over the last minute: requests admitted, completion tokens spent
and reserved (mutated on the event loop only: no lock).

Tokens are reserved at admission from the request's worst case and settled from its
real usage at its end: what a request may still spend counts against the rate while it
runs, what it did spend counts for a minute after it ends.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Final

WINDOW_S: Final = 60.0


@dataclass(slots=True)
class TenantWindow:
    admitted: deque[float] = field(default_factory=deque)  # admission times
    spent: deque[tuple[float, int]] = field(default_factory=deque)  # (end time, tokens)
    spent_sum: int = 0
    reserved: int = 0  # tokens reserved by requests in flight

    def expire(self, now: float) -> None:
        while self.admitted and self.admitted[0] <= now - WINDOW_S:
            self.admitted.popleft()
        while self.spent and self.spent[0][0] <= now - WINDOW_S:
            self.spent_sum -= self.spent.popleft()[1]

    def requests_wait(self, limit: int, now: float) -> int | None:
        """Seconds until one more request fits ``limit`` per minute (None: it fits)."""
        self.expire(now)
        if len(self.admitted) < limit:
            return None
        return _seconds(self.admitted[len(self.admitted) - limit] + WINDOW_S - now)

    def tokens_wait(self, limit: int, need: int, now: float) -> int | None:
        """Seconds until ``need`` more tokens fit ``limit`` per minute (None: they fit
        now); when only requests in flight hold the room, 0: the caller's own default."""
        self.expire(now)
        over = self.spent_sum + self.reserved + need - limit
        if over <= 0:
            return None
        freed = 0
        for ended, tokens in self.spent:
            freed += tokens
            if freed >= over:
                return _seconds(ended + WINDOW_S - now)
        return 0

    def admit(self, reserve: int, now: float) -> None:
        self.admitted.append(now)
        self.reserved += reserve

    def settle(self, reserved: int, spent: int, now: float) -> None:
        self.reserved -= reserved
        if spent > 0:
            self.spent.append((now, spent))
            self.spent_sum += spent


def _seconds(value: float) -> int:
    return max(1, math.ceil(value))
