"""uvicorn's server, except that the first SIGTERM/SIGINT drains instead of stopping.

uvicorn closes its listener on the first signal, so clients of a stopping server see
refused connections. Here the first signal asks ``Lifecycle.request_drain``: the
listener stays open, new requests get a 503 with Retry-After while those in flight
finish (up to ``drain_timeout_s``), then the lifecycle stops the server. A second
signal stops at once (uvicorn's own handling).
"""

from __future__ import annotations

import types

import uvicorn

from server.process.lifecycle import Lifecycle


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self._lifecycle = lifecycle
        lifecycle.bind_stop(self._stop)

    def _stop(self) -> None:
        self.should_exit = True

    def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
        if self.started and not self.should_exit and self._lifecycle.request_drain():
            return
        super().handle_exit(sig, frame)
