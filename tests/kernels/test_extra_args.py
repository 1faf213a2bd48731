"""The admission rule every adapter shares (kernels/extra_args.usable_args): a bad value
or an id outside the vocabulary leaves the row alone with a warning, never raises."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from kernels.confidence import args as conf_args
from kernels.elastic import args as elastic_args
from kernels.extra_args import int_arg, usable_args


def _elastic(extra: Mapping[str, object]) -> elastic_args.ElasticArgs | None:
    return usable_args(
        elastic_args.parse,
        extra,
        processor="elastic",
        vocab_size=100,
        token_ids=lambda a: (*a.think_end_ids, a.eos_id),
    )


GOOD = {elastic_args.THINKING_BUDGET: 4, elastic_args.THINK_END_ID: 7, elastic_args.EOS_ID: 2}


def test_a_usable_request_is_parsed_and_an_absent_one_is_none() -> None:
    parsed = _elastic(GOOD)
    assert parsed is not None and parsed.thinking_budget == 4
    assert _elastic({}) is None


def test_bad_values_and_ids_past_the_vocab_are_logged_and_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="kernels.extra_args"):
        assert _elastic({**GOOD, elastic_args.THINKING_BUDGET: "4"}) is None
        assert _elastic({**GOOD, elastic_args.EOS_ID: 100}) is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("elastic: ignoring bad extra_args" in m for m in messages)
    assert any("token id outside the vocab (100)" in m for m in messages)


def test_without_a_vocab_only_the_values_are_checked() -> None:
    extra = {
        conf_args.THRESHOLD: 1.5,
        conf_args.WINDOW: 4,
        conf_args.TOP_K: 2,
        conf_args.EOS_ID: 10**6,
    }
    assert usable_args(conf_args.parse, extra, processor="confidence") is not None


def test_int_arg_is_strict() -> None:
    assert int_arg({"k": 3}, "k", 0, 5) == 3 and int_arg({}, "k", 0, 5) is None
    for bad in (True, "3", 3.0, 6):
        with pytest.raises(ValueError, match="extra_args\\['k'\\]"):
            int_arg({"k": bad}, "k", 0, 5)
