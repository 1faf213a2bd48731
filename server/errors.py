"""The one error handler: every failure leaves as the OpenAI envelope, except on
``/v1/messages``, whose errors use Anthropic's (``server.apis.messages.errors``).

``GatewayError`` carries its own status and envelope; FastAPI's request validation
errors become a 400 naming the field; unknown routes a 404; anything unexpected a 500.
Every error response carries ``X-Request-Id`` and, when the budget was already
resolved, ``X-Budget-Applied``; a 429 (and a 503 when waiting helps) ``Retry-After``.
"""

from __future__ import annotations

import uuid

import orjson
import structlog
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from core.budget import Budget
from core.errors import (
    BackendError,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    OverTenantLimit,
    PayloadTooLarge,
    RequestTimeout,
    Unauthorized,
)
from server.apis.messages import errors as messages_errors
from server.apis.openai import sdk_fields
from server.process.metrics import record_end, route_label

log = structlog.get_logger("thinkgate.http")


class ClientGone(Exception):
    """The client disconnected; the work was cancelled and nobody reads the answer."""


def request_id(request: Request) -> str:
    """This request's id: the client's ``X-Request-Id`` if sane, else a new one."""
    rid = getattr(request.state, "request_id", None)
    if isinstance(rid, str):
        return rid
    given = request.headers.get("x-request-id", "")
    rid = given if 0 < len(given) <= 128 and given.isascii() and given.isprintable() else ""
    rid = rid or uuid.uuid4().hex
    request.state.request_id = rid
    return rid


def response_headers(request: Request) -> dict[str, str]:
    headers = {"X-Request-Id": request_id(request)}
    budget = getattr(request.state, "budget", None)
    if isinstance(budget, Budget):
        headers["X-Budget-Applied"] = budget.header()
    ignored = getattr(request.state, "ignored", None)
    # The platform fields this request set that change nothing here (names of ours or
    # checked tool types; printable ASCII kept as a guard: a header must encode).
    listed = [f for f in ignored or () if f.isascii() and f.isprintable()]
    if listed:
        headers[sdk_fields.HEADER] = ", ".join(listed)
    return headers


def error_response(request: Request, err: GatewayError) -> Response:
    headers = response_headers(request)
    retry_after = getattr(err, "retry_after_s", None)  # Overloaded, a draining server
    if isinstance(retry_after, int):
        headers["Retry-After"] = str(retry_after)
    if err.retry is not None:
        headers["x-should-retry"] = "true" if err.retry else "false"
        if err.retry:
            headers.setdefault("Retry-After", "1")
    if isinstance(err, RequestTimeout):
        # The rest of the slow body may still arrive: never read it as the next request.
        headers["Connection"] = "close"
    if isinstance(err, Unauthorized) and request.url.path.startswith("/ui"):
        # A browser answers this with its own prompt, then sends the key (HTTP Basic, the
        # key as the password) with the page and its requests to this server.
        headers["WWW-Authenticate"] = 'Basic realm="thinkgate", charset="UTF-8"'
    tenant = getattr(request.state, "tenant", None)
    gw = getattr(request.app.state, "gateway", None)
    if isinstance(err, OverTenantLimit) and err.limit and tenant is not None and gw is not None:
        gw.metrics.tenant_rejected(tenant, err.limit)
    _record(
        request,
        str(err.status),
        error=isinstance(err, BackendError),
        path=request.url.path,
        type=type(err).__name__,
        param=err.param,
        message=loggable(err, gw is not None and gw.settings.log_content),
    )
    if request.url.path.startswith(messages_errors.PATH):  # and /v1/messages/count_tokens
        body: object = messages_errors.envelope(err, request_id(request))
    else:
        body = err.envelope()
    return Response(
        orjson.dumps(body),
        status_code=err.status,
        headers=headers,
        media_type="application/json",
    )


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return error_response(request, exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid request"))
    return error_response(request, InvalidRequest(f"{param}: {msg}" if param else msg, param=param))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    err: GatewayError
    if exc.status_code == 404:
        err = NotFound(f"no route {request.method} {request.url.path}")
    elif exc.status_code == 413:
        err = PayloadTooLarge(str(exc.detail))
    elif exc.status_code == 405:
        err = MethodNotAllowed(f"method {request.method} not allowed on {request.url.path}")
    elif exc.status_code < 500:
        err = InvalidRequest(str(exc.detail))
    else:
        err = BackendError(str(exc.detail))
    response = error_response(request, err)
    if exc.status_code == 405 and exc.headers and "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response


async def _client_gone(request: Request, exc: Exception) -> Response:
    # Nobody reads this; 499 (nginx's "client closed request") keeps the logs honest, and
    # it is counted as streams that lose their client are: status 499.
    _record(request, "499", path=request.url.path, reason="client_gone")
    return Response(status_code=499, headers=response_headers(request))


def loggable(err: GatewayError, log_content: bool) -> str:
    """What the log keeps of an error's message. A refusal of the request (4xx) may quote
    it (a field's value, a tool's text, a file's line): only with ``log_content``; a
    server error (5xx) is the server's own words."""
    if err.status >= 500 or log_content:
        return err.message
    return f"({len(err.message)} characters: logged with --log-content)"


def _record(request: Request, status: str, *, error: bool = False, **detail: object) -> None:
    gw = getattr(request.app.state, "gateway", None)
    strategy = getattr(request.state, "strategy", "")
    if gw is None:  # before start-up finished: nothing to count in yet
        log.info("request.end", request_id=request_id(request), status=status, **detail)
        return
    record_end(
        gw.metrics,
        route=route_label(request),
        strategy=strategy,
        status=status,
        request_id=request_id(request),
        error=error,
        detail=detail,
        tenant=getattr(request.state, "tenant", None),
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("request.crash", request_id=request_id(request), path=request.url.path)
    return error_response(request, BackendError(f"internal error: {type(exc).__name__}"))


def install(app: FastAPI) -> None:
    """Register the handlers (framework, domain, then everything else)."""
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(ClientGone, _client_gone)
    app.add_exception_handler(Exception, _unexpected)
