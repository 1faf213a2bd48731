"""The search bench's command line: what each cell's request carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.out_paths import beside
from benchmarks.search import parse, request_of


def test_options_go_to_every_search_request_and_to_no_sampling_one() -> None:
    args = parse(["--option", "resample_temperature=1000", "--option", "select=best"])
    headers, body = request_of("particle-filtering", 8, args)
    assert headers == {"X-Strategy": "particle-filtering", "X-Budget-Samples": "8"}
    assert body == {"resample_temperature": 1000, "select": "best"}
    assert request_of("beam-search", 4, args)[1] == {"expansions": 2, **body}
    assert request_of("self-consistency", 8, args)[1] == {}


def test_a_bad_option_is_refused_at_parse_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--option", "no-equals-sign"])
    assert "KEY=VALUE" in capsys.readouterr().err


def test_serve_args_reach_the_started_server_command() -> None:
    args = parse(["--serve-arg=--prm-model=/some/prm"])
    assert args.serve_args == ["--prm-model=/some/prm"]


def test_a_results_prefix_with_a_dot_keeps_it() -> None:
    assert beside(Path("results/search-temperature-0.5"), ".json") == Path(
        "results/search-temperature-0.5.json"
    )
    assert beside(Path("results/search"), ".md") == Path("results/search.md")
