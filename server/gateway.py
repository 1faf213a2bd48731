"""What one app holds while it runs (``app.state.gateway``), built in the lifespan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from core.allowance import DecodeSpeed
from core.base import Resources
from core.engine import Engine
from core.errors import BackendUnavailable
from core.registry import Registry
from server.admission import Admission
from server.batch_api.service import Batches
from server.lifecycle import Lifecycle
from server.metrics import Metrics
from server.presets import BUILT_IN, Preset
from server.reasoning_seal import Seal
from server.response_store import ResponseStore
from server.settings import Settings
from server.tenants import Keyring


@dataclass(frozen=True, slots=True, kw_only=True)
class Gateway:
    settings: Settings
    engine: Engine
    registry: Registry
    resources: Resources
    metrics: Metrics
    admission: Admission
    lifecycle: Lifecycle
    started_at: int  # unix time, for /v1/models
    # The API keys and their tenants (server.tenants); default: no keys, one tenant.
    keys: Keyring = field(default_factory=Keyring)
    # Decode speed per row measured on this server's calls: what a deadline leaves the
    # answer (core.allowance).
    speed: DecodeSpeed = field(default_factory=DecodeSpeed)
    # Seals the reasoning clients carry across turns (server.reasoning_seal); None: the
    # server was built without one (scripted tests that never give reasoning back).
    seal: Seal | None = None
    # Stored Responses answers (server.response_store); None: none are kept.
    responses: ResponseStore | None = None
    # The OpenAI Batch API's files, batches and their runner (server.batch_api).
    batches: Batches | None = None
    # Strategy presets chosen by model name (server.presets).
    presets: Mapping[str, Preset] = field(default_factory=lambda: dict(BUILT_IN))
    # The length reasoning efforts are shares of (server.effort); 0: the engine's context.
    effort_context: int = 0


def gateway(conn: HTTPConnection) -> Gateway:
    gw = getattr(conn.app.state, "gateway", None)
    if not isinstance(gw, Gateway):
        raise BackendUnavailable("the server is starting or stopping")
    return gw
