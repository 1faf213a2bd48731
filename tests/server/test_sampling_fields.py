"""OpenAI's sampling fields (``presence_penalty``, ``frequency_penalty``, ``logit_bias``)
as the gateway checks them before any engine: ranges, token-id keys, and the step searches
that cannot honour a penalty (each step is its own engine request). Their effect on the
real engine is in tests/server/test_body_fields.py."""

from __future__ import annotations

import pytest

from core.budget import Budget
from core.engine import SamplingConfig
from core.errors import InvalidRequest
from server.apis.openai.protocol import ChatCompletionRequest, parse_body
from server.batches.pets.store import sampling_from_json, sampling_json
from strategies.search_options import check_budgets

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]'


def _parse(extra: str) -> ChatCompletionRequest:
    return parse_body(ChatCompletionRequest, BODY + b", " + extra.encode() + b"}")


def test_penalties_and_bias_parse_with_neutral_defaults() -> None:
    plain = parse_body(ChatCompletionRequest, BODY + b"}")
    assert plain.presence_penalty is None and plain.frequency_penalty is None
    assert plain.logit_bias_ids() == {}
    body = _parse('"presence_penalty": 1.5, "frequency_penalty": -2, "logit_bias": {"17": -100}')
    assert (body.presence_penalty, body.frequency_penalty) == (1.5, -2.0)
    assert body.logit_bias_ids() == {17: -100.0}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ('"presence_penalty": 2.5', "presence_penalty"),
        ('"frequency_penalty": -3', "frequency_penalty"),
        ('"presence_penalty": "1"', "presence_penalty"),
        ('"logit_bias": {"17": 101}', "logit_bias"),
        ('"logit_bias": {"17": "x"}', "logit_bias"),
        ('"logit_bias": [1, 2]', "logit_bias"),
    ],
)
def test_out_of_range_values_are_a_400_naming_the_field(extra: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        _parse(extra)
    assert err.value.param is not None and err.value.param.startswith(param)


@pytest.mark.parametrize("key", ["hello", "-3", "1.5", "", "\u00b2", "\u0663", "9" * 5000])
def test_a_logit_bias_key_that_is_no_token_id_is_a_400(key: str) -> None:
    body = _parse(f'"logit_bias": {{"{key}": 5}}')
    with pytest.raises(InvalidRequest) as err:
        body.logit_bias_ids()
    assert err.value.param == "logit_bias"


class _Req:
    """The fields of a StrategyRequest ``check_budgets`` reads."""

    def __init__(self, sampling: SamplingConfig) -> None:
        self.sampling = sampling
        self.budget = Budget()
        self.n = 1


@pytest.mark.parametrize("name", ["presence_penalty", "frequency_penalty"])
def test_step_searches_refuse_a_penalty_naming_it_and_them(name: str) -> None:
    check_budgets(_Req(SamplingConfig(logit_bias={3: 2.0})))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest) as err:
        check_budgets(_Req(SamplingConfig(**{name: 0.5})))  # type: ignore[arg-type]
    assert err.value.param == name and "beam-search" in str(err.value)


def test_a_stored_batch_keeps_its_logit_bias_ids() -> None:
    sampling = SamplingConfig(presence_penalty=0.3, logit_bias={17: -5.0, 3: 1.0})
    assert sampling_from_json(sampling_json(sampling)) == sampling
