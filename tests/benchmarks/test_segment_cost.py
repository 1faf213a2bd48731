"""bench segment-cost's pieces (its engine runs are the benchmark): the ways it draws
the chains, the ratios per repeat, the report's figures, the arguments it refuses."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from benchmarks.segment_cost import BASE, FULL, TREES, WAYS, Way, _chain, parse, ratios, report
from core.engine import GenerateRequest, Sample


class Recorder:
    """An engine that draws ``max_tokens`` ids counting up, and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        self.requests.append(request)
        start = len(request.prompt_token_ids)
        ids = tuple(range(start, start + (request.sampling.max_tokens or 0)))
        return [Sample(index=0, token_ids=ids, finish_reason="length")]


def _run(way: Way, argv: Sequence[str] = ()) -> Recorder:
    args = parse(["--tokens", "96", "--segment", "32", *argv])
    engine = Recorder()
    made = asyncio.run(_chain(engine, [5] * 33, way, args, chain=2, run=0))  # type: ignore[arg-type]
    assert made == 96
    return engine


def test_segments_go_on_from_the_ids_so_far_one_request_each() -> None:
    got = _run(TREES).requests
    assert [len(r.prompt_token_ids) for r in got] == [33, 65, 97]  # one past a 32-id block
    assert got[1].prompt_token_ids[33:] == tuple(range(33, 65))  # the first segment's ids
    assert all(r.sampling.max_tokens == 32 and r.sampling.logprobs for r in got)
    assert all(r.sampling.ignore_eos for r in got)
    assert len({r.sampling.seed for r in got}) == 3


def test_a_whole_chain_is_one_request_without_logprobs() -> None:
    (only,) = _run(WAYS[0]).requests
    assert only.sampling.max_tokens == 96
    assert not only.sampling.logprobs


def test_ratios_pair_each_repeat_with_the_base_ways() -> None:
    rates = {BASE: [100.0, 200.0], "x": [50.0, 200.0]}
    assert ratios(rates, "x") == [0.5, 1.0]


def test_report_gives_each_way_its_ratio_and_the_product() -> None:
    args = parse(["--repeats", "2"])
    rates = {w.label: [1000.0, 1000.0] for w in WAYS}
    rates[TREES.label] = [800.0, 800.0]
    rates[FULL.label] = [2000.0, 2000.0]
    text = report(rates, args, {"seconds": 60.0, "machine": "m", "git": "g", "command": "c"})
    assert "| segments, logprobs (the tree's) | 24 | 800 (800-800) | 0.80x" in text
    assert "| whole, no logprobs, full rows (self-consistency's) | 64 | 2000" in text
    assert "0.80x the tokens a second of one request a chain, which makes 0.50x" in text
    assert "0.40x in all" in text


@pytest.mark.parametrize(
    "argv",
    [["--tokens", "100", "--segment", "32"], ["--rows", "0"], ["--repeats", "0"]],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_one_repeat_has_no_interval() -> None:
    from benchmarks.paired import ratio_interval

    mean, lo, hi = ratio_interval([0.8])
    assert mean == pytest.approx(0.8) and math.isnan(lo) and math.isnan(hi)
