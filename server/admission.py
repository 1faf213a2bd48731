"""Admission control: bounded requests and samples in flight; overload is a 429.

A request is admitted whole or refused at once (``Overloaded`` with Retry-After),
never queued without bound. Single event loop: no lock needed.
"""

from __future__ import annotations

from core.errors import Overloaded
from server.metrics import Metrics


class Admission:
    def __init__(
        self, *, max_requests: int, max_samples: int, retry_after_s: int, metrics: Metrics
    ) -> None:
        self.max_requests = max_requests
        self.max_samples = max_samples
        self.retry_after_s = retry_after_s
        self.requests = 0
        self.samples = 0
        self._metrics = metrics

    def in_flight(self) -> int:
        """Requests admitted and not yet released (``auto`` plans for this crowd)."""
        return self.requests

    def check_room(self) -> None:
        """Refuse at once (429) when every request slot is taken, before the request's
        body is parsed or tokenised: under overload the refused requests' parsing
        competed for the CPU with the admitted ones (a 2-core box at 10x the cap
        answered about 80 refusals a second). ``acquire`` still decides."""
        if self.requests >= self.max_requests:
            raise self._refused()

    def acquire(self, samples: int) -> Slot:
        """One request slot and ``samples`` sample slots, until ``Slot.release()``."""
        if self.requests + 1 > self.max_requests or self.samples + samples > self.max_samples:
            raise self._refused()
        self.requests += 1
        self.samples += samples
        self._sync()
        return Slot(self, samples)

    def _refused(self) -> Overloaded:
        self._metrics.rejected.inc()
        return Overloaded(
            f"server busy: {self.requests} requests and {self.samples} samples in flight "
            f"(caps {self.max_requests} and {self.max_samples}); retry later",
            retry_after_s=self.retry_after_s,
        )

    def _release(self, samples: int) -> None:
        self.requests -= 1
        self.samples -= samples
        self._sync()

    def _sync(self) -> None:
        self._metrics.inflight_requests.set(self.requests)
        self._metrics.inflight_samples.set(self.samples)


class Slot:
    """An admitted request; ``release`` is idempotent (streams release at their end)."""

    def __init__(self, admission: Admission, samples: int) -> None:
        self._admission = admission
        self._samples = samples
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission._release(self._samples)
