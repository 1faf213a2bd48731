"""Reasoning a client carries across turns without a store: sealed by this server, read
back and verified when it returns.

A Responses request with ``include: ["reasoning.encrypted_content"]`` gets each reasoning
item's text sealed into ``encrypted_content``; an Anthropic thinking block's
``signature`` is the same seal of its thinking. Given back in a later request's input,
the seal is opened and its text is the reasoning the model sees (what the chat template
does with earlier turns' reasoning is the template's). A seal that does not open
(changed, truncated, or made by a server with another key) is a 400 naming the field;
an Anthropic block whose visible thinking differs from its sealed thinking is too.

AES-256-GCM (``cryptography``): the blob is confidential and authenticated; the kind of
blob (a Responses item, an Anthropic block) is its associated data, so one cannot stand
in for the other. The key is SHA-256 of ``--reasoning-key`` when set (every replica of a
fleet sets the same), else 32 random bytes kept in ``<state dir>/reasoning.key`` (mode
0600), made at the first start: one server's seals open after its restart.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Final, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core.errors import InvalidRequest

Kind = Literal["responses.reasoning", "messages.thinking"]
VERSION: Final = b"tg1"  # a blob's first bytes: the format, for a later change of it
KEY_FILE: Final = "reasoning.key"


class Seal:
    """Seals and opens reasoning text with one server key."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a reasoning seal key is 32 bytes")
        self._aead = AESGCM(key)

    @classmethod
    def from_secret(cls, secret: str) -> Seal:
        return cls(hashlib.sha256(secret.encode()).digest())

    @classmethod
    def from_state_dir(cls, directory: Path) -> Seal:
        """The key kept in ``directory`` (made there, private, at the first call)."""
        path = directory / KEY_FILE
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
            # Written whole under a private name, then linked into place: a link fails
            # when the name exists, so of two processes starting on one state directory
            # one key wins, and neither ever reads a key half written.
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".reasoning-key-")
            try:
                with os.fdopen(fd, "wb") as f:  # mkstemp's file is 0600
                    f.write(secrets.token_bytes(32))
                    f.flush()
                    os.fsync(f.fileno())
                # Another process made it first: its key is the key.
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, path)
            finally:
                os.unlink(tmp)
        key = path.read_bytes()
        if len(key) != 32:
            raise ValueError(f"{path} holds {len(key)} bytes, a reasoning key is 32")
        return cls(key)

    def seal(self, text: str, kind: Kind) -> str:
        nonce = secrets.token_bytes(12)
        plain = json.dumps({"text": text}, ensure_ascii=False).encode()
        blob = VERSION + nonce + self._aead.encrypt(nonce, plain, kind.encode())
        return base64.urlsafe_b64encode(blob).decode().rstrip("=")

    def open(self, blob: str, kind: Kind, *, param: str) -> str:
        """The text sealed in ``blob``; a 400 naming ``param`` when it does not open."""
        try:
            raw = base64.urlsafe_b64decode(blob + "=" * (-len(blob) % 4))
            if not raw.startswith(VERSION) or len(raw) < len(VERSION) + 12 + 16:
                raise ValueError("not a thinkgate seal")
            nonce = raw[len(VERSION) : len(VERSION) + 12]
            plain = self._aead.decrypt(nonce, raw[len(VERSION) + 12 :], kind.encode())
            text = json.loads(plain)["text"]
            if not isinstance(text, str):
                raise ValueError("no text")
            return text
        except (InvalidTag, ValueError, KeyError, TypeError):
            raise InvalidRequest(
                f"{param}: the sealed reasoning does not open on this server (changed, "
                "cut, or sealed by a server with another key): give back what this server "
                "returned, or leave the reasoning out",
                param=param,
            ) from None
