"""A PETS job's draws admitted as its tenant's requests are (``server.tenancy.admission``):
each draw holds its samples against the server's cap and the tenant's fair share and
in-flight limit, reserves its worst case of the tenant's token rate, and is billed what
it generated. A draw the admission cannot take now waits and tries again (a background
job queues, it is not refused wholesale); a tenant gone from the keys fails the job."""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

from core.errors import BackendError, Overloaded
from server.tenancy.admission import Admission, Slot
from server.tenancy.tenants import ANONYMOUS, Keyring, Tenant

RETRY_FLOOR_S: Final = 0.05


class Release(Protocol):
    def __call__(self, tokens: int) -> None: ...


class Gate(Protocol):
    """What a job's draw passes before it reaches the engine."""

    async def enter(self, tenant: str, samples: int, reserve: int) -> Release: ...


class TenantGate:
    def __init__(self, admission: Admission, keys: Keyring) -> None:
        self._admission = admission
        self._keys = keys

    def tenant(self, name: str) -> Tenant:
        """The job's tenant as the keys describe it now (a job from before tenants, or
        on a server without keys, is the anonymous one)."""
        if not self._keys.enabled or name in ("", ANONYMOUS):
            return Tenant(name=ANONYMOUS)
        found = self._keys.named(name)
        if found is None:
            raise BackendError(f"tenant {name!r} is no longer in the keys")
        return found

    async def enter(self, tenant: str, samples: int, reserve: int) -> Release:
        while True:
            who = self.tenant(tenant)
            cap = who.limits.max_inflight_samples
            if cap is not None and samples > cap:
                raise BackendError(
                    f"a draw of {samples} samples exceeds tenant {who.name!r}'s "
                    f"max_inflight_samples of {cap}"
                )
            try:
                return _releasing(await self._admission.acquire(who, samples, reserve))
            except Overloaded as exc:
                await asyncio.sleep(max(RETRY_FLOOR_S, float(exc.retry_after_s)))


def _releasing(slot: Slot) -> Release:
    """Release ``slot``, billing the tenant the tokens the draw generated."""

    def release(tokens: int) -> None:
        slot.spent = lambda: tokens
        slot.release()

    return release
