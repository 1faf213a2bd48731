"""Each engine maps its own foreign errors onto the error tree, at its boundary.

There is deliberately no shared table of "foreign exception -> client error": whether a
``ValueError`` is the client's fault depends on which library raised it and where.
An engine passes its own ``convert`` to :func:`mapped`; whatever a ``convert`` does not
recognise is :func:`unexpected`, a 500 that says it was not expected.

``GatewayError`` and cancellation pass through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.errors import BackendError, GatewayError

Convert = Callable[[Exception], GatewayError]


@contextmanager
def mapped(convert: Convert) -> Iterator[None]:
    """Re-raise any non-gateway exception from the block as ``convert`` maps it."""
    try:
        yield
    except GatewayError:
        raise
    except Exception as exc:
        raise convert(exc) from exc


def unexpected(exc: BaseException) -> BackendError:
    """A 500 for an exception no engine table knows: a thinkgate bug or an unknown fault."""
    return BackendError(f"unexpected engine error: {type(exc).__name__}: {exc}")
