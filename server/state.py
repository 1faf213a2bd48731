"""What one app holds while it runs (``app.state.gateway``), built in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import HTTPConnection

from server.admission import Admission
from server.lifecycle import Lifecycle
from server.metrics import Metrics
from server.settings import Settings
from strategies.base import Resources
from strategies.engine import Engine
from strategies.errors import BackendUnavailable
from strategies.registry import Registry


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


def gateway(conn: HTTPConnection) -> Gateway:
    gw = getattr(conn.app.state, "gateway", None)
    if not isinstance(gw, Gateway):
        raise BackendUnavailable("the server is starting or stopping")
    return gw
