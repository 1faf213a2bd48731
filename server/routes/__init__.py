"""One small module per endpoint; ``ROUTERS`` is what the app mounts. The routes behind
the API keys declare ``guard.AUTHORIZED``, the one authorization of a request."""

from __future__ import annotations

from fastapi import APIRouter

from server.routes import (
    batch_api,
    chat,
    completions,
    health,
    messages,
    metrics,
    models,
    responses,
    responses_socket,
    token_counts,
    ui,
)
from server.routes import pets_batches as batches
from server.routes.openapi_batch_api import document

ROUTERS: tuple[APIRouter, ...] = (
    chat.router,
    completions.router,
    responses.router,
    responses_socket.router,
    messages.router,
    token_counts.router,
    models.router,
    health.router,
    metrics.router,
    batches.router,
    document(batch_api.router),  # its schemas: openapi_batch_api
    ui.router,
)
