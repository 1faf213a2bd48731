"""Async helpers: closing strategy event streams however they are typed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TypeVar

T = TypeVar("T")


@asynccontextmanager
async def closing(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close ``stream`` (an async generator) on exit, so that its engine requests abort
    now rather than when the garbage collector finds it."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def aclose_quietly(stream: AsyncIterator[T]) -> None:
    """Close ``stream``, ignoring what it raises (an earlier error is the one to report)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with suppress(Exception):
            await aclose()
