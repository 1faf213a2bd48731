"""Admission control (429 + Retry-After, nothing queued) and API keys (401)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from core.errors import Overloaded, Unauthorized
from server.admission import Admission
from server.auth import authorize
from server.metrics import Metrics
from server.settings import Settings


def test_admission_caps_requests_and_samples() -> None:
    metrics = Metrics()
    adm = Admission(max_requests=2, max_samples=5, retry_after_s=3, metrics=metrics)
    a = adm.acquire(4)
    with pytest.raises(Overloaded) as info:
        adm.acquire(2)  # 6 samples > 5
    assert info.value.retry_after_s == 3 and info.value.status == 429
    b = adm.acquire(1)
    with pytest.raises(Overloaded):
        adm.acquire(0)  # 3 requests > 2
    a.release()
    a.release()  # idempotent
    assert (adm.requests, adm.samples) == (1, 1)
    b.release()
    assert (adm.requests, adm.samples) == (0, 0)
    assert b"thinkgate_rejected_requests_total 2.0" in metrics.render()


def _request(auth: str | None) -> Request:
    headers = [] if auth is None else [(b"authorization", auth.encode())]
    return Request({"type": "http", "method": "POST", "path": "/v1/models", "headers": headers})


def test_no_keys_configured_lets_everyone_in() -> None:
    authorize(_request(None), Settings())


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer wrong", "Basic sekrit", "sekrit"])
def test_bad_or_missing_key_is_401(auth: str | None) -> None:
    with pytest.raises(Unauthorized) as info:
        authorize(_request(auth), Settings(api_keys=("sekrit", "other")))
    assert info.value.status == 401


def test_any_configured_key_works() -> None:
    # comma-separated, as from THINKGATE_API_KEYS
    settings = Settings.model_validate({"api_keys": "sekrit,other"})
    assert settings.api_keys == ("sekrit", "other")
    authorize(_request("Bearer other"), settings)
    authorize(_request("bearer  sekrit"), settings)
