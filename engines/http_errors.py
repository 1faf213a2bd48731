"""HTTP failures of the services the gateway calls (vLLM servers, a PRM or reward server,
a verifier) mapped onto the error tree in one place.

A connection that cannot open (refused, DNS, a connect timeout) or breaks off is a 503
(the service is unavailable: retry, or another server); a read that runs past its time
is a 504; an error status the service answers, or an answer that is not JSON, is a 502
(``BackendError``). Callers name the service in ``source`` so the message says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import orjson

from core.errors import BackendError, BackendTimeout, BackendUnavailable, GatewayError
from engines.calls import CallFailed, Calls


def transport_error(source: str, exc: CallFailed) -> GatewayError:
    """The error a call to ``source`` that got no answer is, for the client."""
    if exc.kind == "timeout":
        return BackendTimeout(f"{source} timed out ({exc})")
    return BackendUnavailable(f"{source} could not be reached or dropped the connection ({exc})")


JSON_HEADERS: Final = {"content-type": "application/json"}


async def post_json(calls: Calls, url: str, body: Mapping[str, object], source: str) -> object:
    """POST ``body`` to ``url`` and read the JSON answer; failures as ``transport_error``."""
    try:
        answer = await calls.post(url, orjson.dumps(body), JSON_HEADERS)
    except CallFailed as exc:
        raise transport_error(source, exc) from exc
    if not 200 <= answer.status < 300:
        raise BackendError(f"{source} answered HTTP {answer.status}")
    try:
        return orjson.loads(answer.content)
    except ValueError as exc:
        raise BackendError(f"{source} answered with invalid JSON") from exc
