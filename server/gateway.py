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
from server.apis.reasoning_seal import Seal
from server.apis.responses.store import ResponseStore
from server.batches.service import Batches
from server.presets import BUILT_IN, Preset
from server.process.lifecycle import Lifecycle
from server.process.metrics import Metrics
from server.settings import Settings
from server.tenancy.admission import Admission
from server.tenancy.tenants import Keyring


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
    # The API keys and their tenants (server.tenancy.tenants); default: no keys, one tenant.
    keys: Keyring = field(default_factory=Keyring)
    # Decode speed per row measured on this server's calls: what a deadline leaves the
    # answer (core.allowance).
    speed: DecodeSpeed = field(default_factory=DecodeSpeed)
    # Seals the reasoning clients carry across turns (server.apis.reasoning_seal); None: the
    # server was built without one (scripted tests that never give reasoning back).
    seal: Seal | None = None
    # Stored Responses answers (server.apis.responses.store); None: none are kept.
    responses: ResponseStore | None = None
    # The OpenAI Batch API's files, batches and their runner (server.batches).
    batches: Batches | None = None
    # Strategy presets chosen by model name (server.presets).
    presets: Mapping[str, Preset] = field(default_factory=lambda: dict(BUILT_IN))
    # The length reasoning efforts are shares of (server.pipeline.effort); 0: the engine's context.
    effort_context: int = 0
    # max_tokens of a request that sets none (server.pipeline.output_limit); None: the rest
    # of the context.
    default_max_tokens: int | None = None


def gateway(conn: HTTPConnection) -> Gateway:
    gw = getattr(conn.app.state, "gateway", None)
    if not isinstance(gw, Gateway):
        raise BackendUnavailable("the server is starting or stopping")
    return gw
