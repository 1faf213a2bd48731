"""Structured logs: structlog, JSON lines (or console), request id bound per request."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", *, json: bool = True) -> None:
    """Configure structlog and the stdlib root logger (uvicorn, vLLM) once, at start-up."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        numeric = logging.INFO
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr)
    # httpx logs every request at INFO: the remote engine's calls and health checks
    # would drown the gateway's own lines. Its warnings still show.
    logging.getLogger("httpx").setLevel(max(numeric, logging.WARNING))
