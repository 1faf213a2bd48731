"""Tenants: who a request's API key belongs to, and what that tenant may do.

A keys file (``--keys-file``, TOML) names tenants, each with hashed keys, a weight and
limits (all optional)::

    [defaults]                      # every tenant's limits, unless it sets its own
    requests_per_minute = 600

    [tenants.research]
    keys = ["sha256:9f86d081884c7d65..."]   # thinkgate keys hash < key
    weight = 2                              # its share of the engine under contention
    max_inflight_samples = 128
    tokens_per_minute = 400000
    budget_samples = 32                     # the largest X-Budget-Samples it may ask

Only digests are kept: a leaked file grants nothing. The file is read again whenever it
changes on disk (checked on every request: one ``stat``), so a revoked key is refused
and a new key admitted at once, without a restart; a file that no longer parses keeps
the last good table (logged). The plain ``--api-key`` list keeps working: each key is a
tenant of its own (``key-<first 8 hex digits of its digest>``), without limits. With no
keys at all every request is the tenant ``anonymous``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Final

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import Unauthorized

log = structlog.get_logger("thinkgate.tenants")

ANONYMOUS: Final = "anonymous"
DIGEST_PREFIX: Final = "sha256:"


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantLimits:
    """What one tenant may do; None: not limited (the server's own caps still hold)."""

    # Rates and concurrency: over one, a 429 with Retry-After from the tenant's window.
    max_inflight_samples: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # completion tokens, reserved at admission
    # The largest budget a request may ask for: over one, a 400 naming the field. A
    # request that asks for no ceiling or deadline gets the tenant's.
    budget_samples: int | None = None
    budget_thinking: int | None = None
    budget_tokens: int | None = None
    budget_deadline_ms: int | None = None
    # The request itself: 413 for the body, 400 for the prompt and the messages.
    max_body_bytes: int | None = None
    max_prompt_tokens: int | None = None
    max_messages: int | None = None

    def over(self, defaults: TenantLimits) -> TenantLimits:
        """These limits, each unset one taken from ``defaults``."""
        return TenantLimits(
            **{
                f.name: getattr(self, f.name)
                if getattr(self, f.name) is not None
                else getattr(defaults, f.name)
                for f in fields(self)
            }
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Tenant:
    name: str
    weight: float = 1.0
    limits: TenantLimits = field(default_factory=TenantLimits)


class _LimitsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_inflight_samples: int | None = Field(default=None, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    budget_samples: int | None = Field(default=None, ge=1)
    budget_thinking: int | None = Field(default=None, ge=0)
    budget_tokens: int | None = Field(default=None, ge=1)
    budget_deadline_ms: int | None = Field(default=None, ge=1)
    max_body_bytes: int | None = Field(default=None, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    max_messages: int | None = Field(default=None, ge=1)

    def value(self) -> TenantLimits:
        return TenantLimits(**self.model_dump())


class _TenantModel(_LimitsModel):
    keys: tuple[str, ...] = ()
    weight: float = Field(default=1.0, gt=0)

    @field_validator("keys")
    @classmethod
    def _digests(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        for key in keys:
            digest = key.removeprefix(DIGEST_PREFIX)
            if not key.startswith(DIGEST_PREFIX) or len(digest) != 64 or not _is_hex(digest):
                raise ValueError(
                    "a key is 'sha256:' and 64 hex digits (thinkgate keys hash < key), "
                    "never the key itself"
                )
        return keys

    def value(self) -> TenantLimits:
        return TenantLimits(**self.model_dump(exclude={"keys", "weight"}))


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    defaults: _LimitsModel = _LimitsModel()
    tenants: dict[str, _TenantModel] = {}


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def digest(key: str) -> bytes:
    """A key's SHA-256 digest (what a keys file holds, in hex)."""
    return hashlib.sha256(key.encode()).digest()


def hashed(key: str) -> str:
    """A key as a keys file names it: ``sha256:<hex>``."""
    return DIGEST_PREFIX + digest(key).hex()


@dataclass(frozen=True, slots=True)
class KeyTable:
    """Every key's digest and its tenant; empty: no authentication."""

    entries: tuple[tuple[bytes, Tenant], ...] = ()

    def tenant_of(self, key: str) -> Tenant | None:
        """The key's tenant, found in time that does not depend on which key matched
        (every digest is compared, each in constant time)."""
        presented = digest(key)
        found: Tenant | None = None
        for known, tenant in self.entries:
            if hmac.compare_digest(presented, known) and found is None:
                found = tenant
        return found

    def tenants(self) -> tuple[Tenant, ...]:
        seen: dict[str, Tenant] = {}
        for _, tenant in self.entries:
            seen.setdefault(tenant.name, tenant)
        return tuple(seen.values())


class KeysFileError(ValueError):
    """A keys file that cannot be used (its path and what is wrong in it)."""


def parse_keys_file(text: str, source: str = "keys file") -> KeyTable:
    """The table a keys file describes; raises ``KeysFileError`` naming what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeysFileError(f"{source}: not TOML: {exc}") from None
    try:
        model = _FileModel.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise KeysFileError(f"{source}: {problems}") from None
    defaults = model.defaults.value()
    entries: list[tuple[bytes, Tenant]] = []
    owners: dict[str, str] = {}
    for name, spec in model.tenants.items():
        tenant = Tenant(name=name, weight=spec.weight, limits=spec.value().over(defaults))
        for key in spec.keys:
            if key in owners:
                raise KeysFileError(f"{source}: one key is listed by {owners[key]!r} and {name!r}")
            owners[key] = name
            entries.append((bytes.fromhex(key.removeprefix(DIGEST_PREFIX)), tenant))
    return KeyTable(tuple(entries))


def plain_keys(keys: tuple[str, ...]) -> KeyTable:
    """The ``--api-key`` list: each key a tenant of its own, without limits."""
    return KeyTable(tuple((digest(k), Tenant(name=f"key-{digest(k).hex()[:8]}")) for k in keys))


class Keyring:
    """The server's keys: the plain list and the keys file, the file read again when it
    changes on disk (``identify`` checks, one ``stat`` per request). Deleting the file
    revokes its keys; a file that does not parse keeps the last good table."""

    def __init__(self, *, plain: tuple[str, ...] = (), path: Path | None = None) -> None:
        self._plain = plain_keys(plain)
        self._path = path
        self._stamp: tuple[int, int, int] | None = None
        self._file = KeyTable()
        self.reload_failures = 0
        if path is not None:
            self._file = parse_keys_file(path.read_text(), str(path))  # start-up: fail loud
            self._stamp = _stamp(path)

    @property
    def enabled(self) -> bool:
        return self._path is not None or bool(self._plain.entries)

    def tenants(self) -> tuple[Tenant, ...]:
        self._refresh()
        if not self.enabled:
            return (Tenant(name=ANONYMOUS),)
        return self._plain.tenants() + self._file.tenants()

    def named(self, name: str) -> Tenant | None:
        """The tenant called ``name`` as the keys describe it now (None: no longer)."""
        return next((t for t in self.tenants() if t.name == name), None)

    def identify(self, key: str) -> Tenant:
        """The tenant of ``key`` (the key the request presented, "" for none); raises
        ``Unauthorized`` when keys are configured and it is none of them."""
        if not self.enabled:
            return Tenant(name=ANONYMOUS)
        if not key:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        self._refresh()
        tenant = self._plain.tenant_of(key) or self._file.tenant_of(key)
        if tenant is None:
            raise Unauthorized("invalid API key")
        return tenant

    def _refresh(self) -> None:
        if self._path is None:
            return
        try:
            stamp = _stamp(self._path)
        except OSError as exc:
            if self._stamp is not None:  # logged once, not on every request
                self._stamp = None
                self._failed(f"cannot read: {exc.strerror}")
                if isinstance(exc, FileNotFoundError):
                    # Deleted: its keys are revoked (failing closed). A file that is only
                    # unreadable for a moment keeps its last table instead.
                    self._file = KeyTable()
                    log.warning("keys.revoked", path=str(self._path), why="file deleted")
            return
        if stamp == self._stamp:
            return
        try:
            table = parse_keys_file(self._path.read_text(), str(self._path))
        except (OSError, KeysFileError) as exc:
            # A half-written or broken file must not lock every client out: the last
            # good table stays until the file is right again.
            self._stamp = stamp
            self._failed(str(exc))
            return
        self._stamp, self._file = stamp, table
        log.info("keys.reloaded", path=str(self._path), tenants=len(table.tenants()))

    def _failed(self, why: str) -> None:
        self.reload_failures += 1
        log.error("keys.reload_failed", path=str(self._path), error=why)


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)
