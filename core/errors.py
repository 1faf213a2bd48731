"""The one error tree of thinkgate.

Every failure a client can see is a ``GatewayError``; the server maps it to the
OpenAI error envelope ``{"error": {"message", "type", "param", "code"}}`` in one
handler. Code raises these and never returns error values.

    GatewayError                      500 server_error
    ├── InvalidRequest                400 invalid_request_error
    │   ├── InvalidBudget             400 (code invalid_budget)
    │   ├── UnknownStrategy           400 (code unknown_strategy)
    │   └── OverTenantLimit           400 (code tenant_limit_exceeded)
    ├── Unauthorized                  401 authentication_error
    ├── NotFound                      404 invalid_request_error (e.g. unknown model)
    ├── RequestTimeout                408 invalid_request_error (the body came too slowly)
    ├── PayloadTooLarge               413 invalid_request_error
    ├── Overloaded                    429 rate_limit_error (Retry-After)
    └── BackendError                  500 server_error (the engine failed)
        ├── BackendUnavailable        503 service_unavailable (Retry-After when set)
        └── BackendTimeout            504 timeout
"""

from __future__ import annotations

from typing import ClassVar


class GatewayError(Exception):
    """Base of every error a client may receive."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None
    # Whether another try of the same request can succeed (the ``x-should-retry`` header
    # the OpenAI and Anthropic SDKs obey; None: leave it to the client's own rule, which
    # retries 408, 409, 429 and 5xx). A long multi-sample request that failed for good
    # must not be sent again.
    retry: ClassVar[bool | None] = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code

    def envelope(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI error body for this error."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    retry = False


class InvalidBudget(InvalidRequest):
    default_code = "invalid_budget"


class UnknownStrategy(InvalidRequest):
    default_code = "unknown_strategy"


class OverTenantLimit(InvalidRequest):
    """A request that asks for more than its tenant may (``server.tenancy.tenants``): the field,
    the tenant and its limit are named; ``limit`` is the limit's name."""

    default_code = "tenant_limit_exceeded"

    def __init__(self, message: str, *, param: str | None = None, limit: str = "") -> None:
        super().__init__(message, param=param)
        self.limit = limit


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"
    default_code = "invalid_api_key"
    retry = False


class CrossOrigin(GatewayError):
    """A browser request from another origin to a route that changes state (or to the
    live view), which the server was not told to allow (``--allowed-origins``)."""

    status = 403
    type = "permission_error"
    default_code = "cross_origin_refused"
    retry = False


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    default_code = "not_found"
    retry = False


class MethodNotAllowed(GatewayError):
    """A route that exists, asked with a method it does not answer (``Allow`` says which)."""

    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"
    retry = False


class RequestTimeout(GatewayError):
    """The client sent its request too slowly; the connection is closed after the answer."""

    status = 408
    type = "invalid_request_error"
    default_code = "request_timeout"


class UnsupportedMediaType(GatewayError):
    """A JSON route's body sent as another type (``text/plain``, a form: what a page
    elsewhere may send without asking)."""

    status = 415
    type = "invalid_request_error"
    default_code = "unsupported_media_type"
    retry = False


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    default_code = "payload_too_large"
    retry = False


class Overloaded(GatewayError):
    status = 429
    type = "rate_limit_error"
    default_code = "overloaded"
    retry = True

    def __init__(self, message: str, *, retry_after_s: int = 1, code: str | None = None) -> None:
        # code: ``overloaded`` (the server is full), ``rate_limit_exceeded`` (a tenant's
        # own rate or concurrency), as OpenAI names its own.
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class BackendError(GatewayError):
    status = 500
    type = "server_error"
    default_code = "engine_error"


class BackendUnavailable(BackendError):
    status = 503
    type = "service_unavailable"
    default_code = "engine_unavailable"
    retry = True

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        # Set when waiting helps (the server drains, the engine restarts): Retry-After.
        self.retry_after_s = retry_after_s


class UpstreamError(BackendError):
    """A vLLM server behind the gateway failed (a 5xx answer, a broken stream) and no
    other attempt could stand in: the fault is upstream's, not the gateway's."""

    status = 502
    type = "bad_gateway"
    default_code = "upstream_error"


class BackendTimeout(BackendError):
    status = 504
    type = "timeout"
    default_code = "engine_timeout"
    retry = False  # the same request would run into the same limit


def first_error(exc: BaseException) -> BaseException:
    """The first leaf of (nested) exception groups, else ``exc`` itself.

    ``asyncio.TaskGroup`` wraps whatever its tasks raise in an ``ExceptionGroup``; the
    error handler maps ``GatewayError``s only, so an engine's 503 inside a group would
    reach the client as an unexpected 500. Unwrap before it leaves the strategy.
    """
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
