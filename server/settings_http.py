"""The HTTP settings of the gateway (where it listens, its keys, body and head limits,
its logs, the live view): the first group of ``server.settings.Settings``, which extends
this base, so that the reference page (docs/settings.md) and ``--help`` still list them
first.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from server.settings_values import StrList


class HttpSettings(BaseSettings):
    """The HTTP group of ``Settings`` (its config, env prefix included, is Settings')."""

    model_config = SettingsConfigDict(
        use_attribute_docstrings=True,  # the docstrings below are the --help texts
    )

    host: str = "127.0.0.1"
    """Interface to listen on."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port."""
    api_keys: StrList = ()
    """Keys accepted on /v1/* and /ui (``Authorization: Bearer <key>``, or HTTP Basic with
    the key as the password, which a browser asks for on /ui); empty: no authentication."""
    allow_unauthenticated_network: bool = False
    """Serve without keys on an interface other than loopback: every caller is then the one
    tenant and reads every file, batch and stored response. Off, ``thinkgate serve``
    refuses such a bind without ``--api-keys`` or ``--keys-file``."""
    allowed_hosts: StrList = ()
    """``Host`` names served (``*.example.com`` for a domain's names); others are a 400.
    Empty: on a loopback bind its loopback names only (so DNS rebinding cannot reach it),
    on another bind any."""
    allowed_origins: StrList = ()
    """Browser origins (``https://app.example.com``) that may call state-changing routes
    and the live view from another page; empty: same origin only (a page elsewhere
    cannot spend compute or cancel batches on this server)."""
    keys_file: str | None = None
    """TOML file of tenants: each with hashed API keys, a weight and optional limits
    (rates, budgets, body and prompt sizes); read again when it changes, so keys are
    added and revoked without a restart (docs/tenants.md). The plain ``api_keys`` keep
    working, each key a tenant of its own."""
    metrics_key: str | None = Field(default=None, repr=False)
    """A key that reads ``/metrics`` only (a Prometheus scraper's ``authorization``
    credentials). With API keys set, ``/metrics`` (which names tenants and their usage)
    answers a tenant's key or this one, else 401; without keys it is open."""
    log_content: bool = False
    """Put prompt and answer text in the logs (debugging only); off, no prompt, answer
    or key text is ever logged."""
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    """Larger request bodies are a 413."""
    body_read_timeout_s: float = Field(default=30.0, gt=0)
    """A request body not fully received this long after the handler starts reading it is
    a 408 (``code: request_timeout``) and the connection is closed."""
    header_read_timeout_s: float = Field(default=10.0, gt=0)
    """Time a client has to send a request's head (request line and headers), from the
    connection's opening or from the first byte of a later request on a kept-alive
    connection; then the connection is closed (after a 408 if part of a head came)."""
    log_level: str = "info"
    """debug, info, warning or error."""
    log_json: bool = True
    """JSON log lines (structlog); false: console format."""
    ui: bool = True
    """Serve the live view at /ui (a page that runs one request and draws its samples,
    search steps, votes and usage as they stream); false: /ui is a 404."""
