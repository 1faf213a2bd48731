"""GET /ui: the live view, static files served from ``server/ui`` (no build step), and
``/ui/config.json``, what its form offers (the model, the installed strategies, every
budget field). Off with ``--no-ui``; behind ``--api-keys`` like /v1/*, where a 401 asks
a browser for the key (HTTP Basic, the key as the password)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import orjson
from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from core.errors import NotFound
from server.errors import response_headers
from server.gateway import gateway
from server.pipeline.budgets import HEADERS
from server.routes.guard import AUTHORIZED

router = APIRouter(include_in_schema=False)

STATIC: Final = Path(__file__).resolve().parent.parent / "ui"
FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}


async def _live_view_on(request: Request) -> None:
    if not gateway(request).settings.ui:
        raise NotFound("the live view is off on this server (--no-ui)")


async def _known_file(name: str) -> None:
    if name not in FILES:
        raise NotFound(f"no such file of the live view: {name}")


# In this order: a live view that is off is a 404 before any key is asked for; a 401
# (AUTHORIZED) asks a browser for the key (errors.py).
_GUARDS: Final = [Depends(_live_view_on), AUTHORIZED]


def _file(request: Request, name: str) -> Response:
    headers = {**response_headers(request), "Cache-Control": "no-cache"}
    return Response((STATIC / name).read_bytes(), media_type=FILES[name], headers=headers)


@router.get("/ui", dependencies=_GUARDS)
@router.get("/ui/", dependencies=_GUARDS)
async def page(request: Request) -> Response:
    return _file(request, "index.html")


@router.get("/ui/config.json", dependencies=_GUARDS)
async def config(request: Request) -> Response:
    gw = gateway(request)
    strategies = gw.registry.names()
    body = {
        "model": gw.engine.model_name,
        "max_model_len": gw.engine.max_model_len,
        "strategies": strategies,
        "default_strategy": "self-consistency" if "self-consistency" in strategies else None,
        "budget_fields": [{"name": name, "header": header} for name, header in HEADERS.items()],
    }
    headers = response_headers(request)
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)


# An unknown file is a 404 before the live view's guards (as it always was).
@router.get("/ui/{name}", dependencies=[Depends(_known_file), *_GUARDS])
async def asset(request: Request, name: str) -> Response:
    return _file(request, name)
