"""Admission control: bounded requests and samples in flight, shared fairly between
tenants; what cannot be admitted is a 429 with Retry-After, never an unbounded queue.

Each request is admitted whole (one request slot, its samples, its tokens reserved) or
refused. In order:

1. The tenant's own limits (``server.tenancy.tenants``): samples in flight, requests and
   completion tokens per minute. Over one: a 429 (``rate_limit_exceeded``) whose
   Retry-After comes from the tenant's own window (``server.tenancy.tenant_window``).
2. Fair share: while several tenants are active (a request in flight or waiting, or one
   ended within ``idle_s``), each may hold at most its weight's share of the server's
   requests and samples; a tenant alone has all of it. A tenant's first request always
   fits its share (a request larger than the share still runs, one at a time).
3. Room: a request within its share that finds the server full (another tenant took
   the room while it was alone) waits up to ``wait_s`` for room; freed room goes to the
   waiting tenant furthest below its share. A request over its share, or one whose wait
   runs out, is a 429 (``overloaded``).

So one tenant's flood of 64-sample requests cannot take the room another tenant's plain
requests need: the flood is held to its share, and the plain requests neither queue
behind it nor are refused. Single event loop: no lock.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.base import Result
from core.errors import Overloaded
from server.process.metrics import Metrics
from server.tenancy.tenant_window import TenantWindow
from server.tenancy.tenants import Tenant

Clock = Callable[[], float]


@dataclass(slots=True)
class Account:
    """One tenant's requests and samples in flight, and its rates."""

    tenant: Tenant
    requests: int = 0
    samples: int = 0
    waiting: int = 0
    last_active: float = float("-inf")
    window: TenantWindow = field(default_factory=TenantWindow)


@dataclass(slots=True)
class _Waiter:
    account: Account
    samples: int
    reserve: int
    seq: int
    future: asyncio.Future[Slot]


class Admission:
    def __init__(
        self,
        *,
        max_requests: int,
        max_samples: int,
        retry_after_s: int,
        metrics: Metrics,
        wait_s: float = 0.0,
        idle_s: float = 5.0,
        clock: Clock = time.monotonic,
        share_samples: int | None = None,
    ) -> None:
        self.max_requests = max_requests
        self.max_samples = max_samples
        # What active tenants' fair shares divide while more than one is active (the rows
        # the engine batches): a tenant alone may hold up to ``max_samples``.
        self.share_samples = max_samples if share_samples is None else share_samples
        self.retry_after_s = retry_after_s
        self.wait_s = wait_s
        self.idle_s = idle_s
        self.requests = 0
        self.samples = 0
        self.accounts: dict[str, Account] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self._metrics = metrics
        self._clock = clock

    def in_flight(self) -> int:
        """Requests admitted and not yet released (``auto`` plans for this crowd)."""
        return self.requests

    def account(self, tenant: Tenant) -> Account:
        acct = self.accounts.get(tenant.name)
        if acct is None:
            acct = self.accounts[tenant.name] = Account(tenant)
        else:
            acct.tenant = tenant  # a reloaded keys file may have changed its limits
        return acct

    def check_room(self, tenant: Tenant) -> None:
        """Refuse at once (429) what cannot be admitted whatever its body says, before
        the body is parsed or tokenised: under overload the refused requests' parsing
        competed for the CPU with the admitted ones (a 2-core box at 10x the cap
        answered about 80 refusals a second). ``acquire`` still decides."""
        acct = self.account(tenant)
        now = self._clock()
        if (limit := acct.tenant.limits.requests_per_minute) is not None:
            wait = acct.window.requests_wait(limit, now)
            if wait is not None:
                raise self._rate_refused(acct, "requests_per_minute", limit, wait)
        if self.requests >= self.max_requests:
            _, share_requests = self._share(acct, now)
            if self.wait_s <= 0 or acct.requests + 1 > share_requests:
                raise self._busy(acct)

    async def acquire(self, tenant: Tenant, samples: int, reserve: int = 0) -> Slot:
        """One request slot, ``samples`` sample slots and ``reserve`` completion tokens
        of the tenant's rate, until ``Slot.release()``."""
        acct = self.account(tenant)
        now = self._clock()
        reserve = self._reservation(acct, reserve)
        refusal = self._over_limits(acct, samples, reserve, now)
        if refusal is not None:
            raise refusal
        acct.last_active = now
        if self._fits(acct, samples, now):
            return self._admit(acct, samples, reserve, now)
        if self.wait_s <= 0 or not self._within_share(acct, samples, now):
            raise self._busy(acct)
        future: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(acct, samples, reserve, next(self._seq), future)
        self._waiting.append(waiter)
        acct.waiting += 1
        try:
            async with asyncio.timeout(self.wait_s):
                return await future
        except BaseException as exc:
            if future.done() and not future.cancelled() and future.exception() is None:
                # Granted in the same loop turn as the wait ended (a timeout, the client
                # gone): nobody holds that slot, so it goes back.
                future.result().release()
            if isinstance(exc, TimeoutError):
                raise self._busy(acct) from None
            raise
        finally:
            acct.waiting -= 1
            if waiter in self._waiting:
                self._waiting.remove(waiter)

    def _reservation(self, acct: Account, reserve: int) -> int:
        """What a request reserves of its tenant's token rate: its worst case, but never
        more than the whole minute's (such a request runs once the minute is empty)."""
        limit = acct.tenant.limits.tokens_per_minute
        return max(0, reserve) if limit is None else min(max(0, reserve), limit)

    def _over_limits(
        self, acct: Account, samples: int, reserve: int, now: float
    ) -> Overloaded | None:
        limits = acct.tenant.limits
        if (cap := limits.max_inflight_samples) is not None and acct.samples + samples > cap:
            return self._rate_refused(
                acct, "max_inflight_samples", cap, self.retry_after_s, held=acct.samples
            )
        if (limit := limits.requests_per_minute) is not None:
            wait = acct.window.requests_wait(limit, now)
            if wait is not None:
                return self._rate_refused(acct, "requests_per_minute", limit, wait)
        if (limit := limits.tokens_per_minute) is not None:
            wait = acct.window.tokens_wait(limit, reserve, now)
            if wait is not None:
                return self._rate_refused(
                    acct, "tokens_per_minute", limit, wait or self.retry_after_s
                )
        return None

    def _active(self, now: float) -> list[Account]:
        return [
            a
            for a in self.accounts.values()
            if a.requests or a.waiting or now - a.last_active < self.idle_s
        ]

    def _share(self, acct: Account, now: float) -> tuple[float, float]:
        """The tenant's share of the server's samples and requests among the active."""
        total = sum(a.tenant.weight for a in self._active(now) if a is not acct)
        part = acct.tenant.weight / (total + acct.tenant.weight)
        samples = self.share_samples if total > 0 else self.max_samples
        return samples * part, max(1.0, self.max_requests * part)

    def _within_share(self, acct: Account, samples: int, now: float) -> bool:
        if acct.requests == 0:
            return True
        share_samples, share_requests = self._share(acct, now)
        return acct.samples + samples <= share_samples and acct.requests + 1 <= share_requests

    def _fits(self, acct: Account, samples: int, now: float) -> bool:
        room = self.requests + 1 <= self.max_requests and self.samples + samples <= self.max_samples
        return room and self._within_share(acct, samples, now)

    def _admit(self, acct: Account, samples: int, reserve: int, now: float) -> Slot:
        self.requests += 1
        self.samples += samples
        acct.requests += 1
        acct.samples += samples
        acct.last_active = now
        acct.window.admit(reserve, now)
        self._sync(acct)
        return Slot(self, acct, samples, reserve)

    def _release(self, acct: Account, samples: int, reserve: int, spent: int) -> None:
        now = self._clock()
        self.requests -= 1
        self.samples -= samples
        acct.requests -= 1
        acct.samples -= samples
        acct.last_active = now
        acct.window.settle(reserve, spent, now)
        self._sync(acct)
        self._wake(now)

    def _wake(self, now: float) -> None:
        """Admit the waiters that fit now, the tenant furthest below its share first."""
        for waiter in sorted(
            self._waiting,
            key=lambda w: (w.account.samples / w.account.tenant.weight, w.seq),
        ):
            if waiter.future.done() or not self._fits(waiter.account, waiter.samples, now):
                continue
            refusal = self._over_limits(waiter.account, waiter.samples, waiter.reserve, now)
            self._waiting.remove(waiter)
            if refusal is not None:
                waiter.future.set_exception(refusal)
            else:
                waiter.future.set_result(
                    self._admit(waiter.account, waiter.samples, waiter.reserve, now)
                )

    def _busy(self, acct: Account) -> Overloaded:
        self._metrics.rejected.inc()
        self._metrics.tenant_rejected(acct.tenant.name, "busy")
        return Overloaded(
            f"server busy: {self.requests} requests and {self.samples} samples in flight "
            f"(caps {self.max_requests} and {self.max_samples}; tenant {acct.tenant.name!r} "
            f"holds {acct.requests} and {acct.samples}); retry later",
            retry_after_s=self.retry_after_s,
        )

    def _rate_refused(
        self, acct: Account, limit_name: str, limit: int, wait_s: int, *, held: int | None = None
    ) -> Overloaded:
        self._metrics.rejected.inc()
        self._metrics.tenant_rejected(acct.tenant.name, limit_name)
        what = f" ({held} held)" if held is not None else ""
        return Overloaded(
            f"tenant {acct.tenant.name!r} is at its {limit_name} limit of {limit}{what}; "
            f"retry in {wait_s} s",
            retry_after_s=wait_s,
            code="rate_limit_exceeded",
        )

    def _sync(self, acct: Account) -> None:
        self._metrics.inflight_requests.set(self.requests)
        self._metrics.inflight_samples.set(self.samples)
        self._metrics.tenant_inflight(
            acct.tenant.name, samples=acct.samples, reserved=acct.window.reserved
        )


class Slot:
    """An admitted request; ``release`` is idempotent (streams release at their end) and
    bills the tenant: the result's completion tokens, or (a request that ended without a
    result) what ``spent`` says it generated."""

    def __init__(self, admission: Admission, account: Account, samples: int, reserve: int) -> None:
        self._admission = admission
        self._account = account
        self._samples = samples
        self._reserve = reserve
        self._held = True
        self.spent: Callable[[], int] = lambda: 0

    @property
    def tenant(self) -> str:
        return self._account.tenant.name

    def release(self, result: Result | None = None) -> None:
        if not self._held:
            return
        self._held = False
        usage = result.usage if result is not None else None
        tokens = usage.completion_tokens if usage is not None else self.spent()
        self._admission._release(self._account, self._samples, self._reserve, tokens)
        metrics = self._admission._metrics
        metrics.tenant_billed(
            self.tenant,
            prompt=usage.prompt_tokens if usage is not None else 0,
            completion=tokens,
        )
