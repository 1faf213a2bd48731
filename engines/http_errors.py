"""HTTP failures of the services the gateway calls (vLLM servers, a reward server, a
verifier) mapped onto the error tree in one place.

A connection that cannot open (refused, DNS, a connect timeout) or breaks off is a 503
(the service is unavailable: retry, or another server); a read that runs past its time
is a 504; an error status the service answers, or an answer that is not JSON, is a 502
(``BackendError``). Callers name the service in ``source`` so the message says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import httpx
import orjson

from core.errors import BackendError, BackendTimeout, BackendUnavailable, GatewayError


def transport_error(source: str, exc: httpx.HTTPError) -> GatewayError:
    """The error a failed call to ``source`` is, for the client."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return BackendTimeout(f"{source} timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.HTTPStatusError):
        return BackendError(f"{source} answered HTTP {exc.response.status_code}")
    return BackendUnavailable(
        f"{source} could not be reached or dropped the connection ({type(exc).__name__}: {exc})"
    )


JSON_HEADERS: Final = {"content-type": "application/json"}


async def post_json(
    client: httpx.AsyncClient, url: str, body: Mapping[str, object], source: str
) -> object:
    """POST ``body`` to ``url`` and read the JSON answer; failures as ``transport_error``."""
    try:
        response = await client.post(url, content=orjson.dumps(body), headers=JSON_HEADERS)
        response.raise_for_status()
        return orjson.loads(response.content)
    except httpx.HTTPError as exc:
        raise transport_error(source, exc) from exc
    except ValueError as exc:
        raise BackendError(f"{source} answered with invalid JSON") from exc
