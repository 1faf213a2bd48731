"""What every vLLM adapter of ours shares, on both runner interfaces (V1 and Model Runner
V2): the processor's name, how a request's ``extra_args`` become its row's arguments, and
how a failure inside the engine is reported.

An adapter is ``class X(RowArgs[ItsArgs], <vLLM's LogitsProcessor>)`` with
``parse_args`` (its ``args.parse``) and, when it forces tokens, ``forced_ids``. Then

* ``validate_params`` (vLLM calls it at admission, in the frontend) refuses a bad request
  with a 400 naming the key;
* :meth:`RowArgs.row_args` gives a row's arguments inside the engine, or None: absent,
  or unusable here (logged, never raised: raising there kills every request);
* :meth:`RowArgs.report_failure` logs a failure once per processor instance.

What a row means (its table columns, host tracking) stays in each adapter; the V1 batch
moves are :mod:`kernels.batch_moves`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from kernels.extra_args import usable_args

if TYPE_CHECKING:
    from vllm import SamplingParams

logger = logging.getLogger(__name__)
P = TypeVar("P")


class RowArgs(Generic[P]):
    """The shared skeleton (a mixin placed before vLLM's ``LogitsProcessor``)."""

    name: ClassVar[str]  # as reported in Engine.processors
    label: ClassVar[str]  # in log lines ("elastic", "budget guidance" ...)
    _failed: bool = False

    @staticmethod
    def parse_args(extra_args: Mapping[str, object] | None) -> P | None:
        raise NotImplementedError

    @staticmethod
    def forced_ids(args: P) -> Iterable[int]:
        """Token ids the processor may force (checked against the vocabulary)."""
        return ()

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """At admission (frontend process): a ValueError becomes an HTTP 400."""
        cls.parse_args(sampling_params.extra_args)

    def row_args(self, params: SamplingParams, vocab_size: int | None) -> P | None:
        cls = type(self)
        return usable_args(
            cls.parse_args,
            params.extra_args,
            processor=cls.label,
            vocab_size=vocab_size,
            token_ids=cls.forced_ids,
        )

    def report_failure(self, where: str, effect: str) -> None:
        """Log the first failure with its traceback (call inside ``except``)."""
        if not self._failed:
            logger.exception("thinkgate %s: %s failed; %s", type(self).label, where, effect)
            self._failed = True
