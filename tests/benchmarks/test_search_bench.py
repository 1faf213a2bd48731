"""The search bench's command line: what each cell's request carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.out_paths import beside
from benchmarks.search import Cell, parse, question_seed, report, request_of


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


def test_a_sample_seed_gives_each_question_its_own_seed_shared_by_every_cell() -> None:
    assert question_seed(parse([]), 3) is None
    args = parse(["--sample-seed", "100"])
    assert [question_seed(args, i) for i in range(3)] == [100, 101, 102]
    cell = Cell("self-consistency", 4, 50.0, 600.0, 0.0, 1.0, 0)
    assert "seed 100 + i" in report([cell], args, 1.0)
    assert "unseeded" in report([cell], parse([]), 1.0)


def test_serve_args_reach_the_started_server_command() -> None:
    args = parse(["--serve-arg=--prm-model=/some/prm"])
    assert args.serve_args == ["--prm-model=/some/prm"]


def test_a_results_prefix_with_a_dot_keeps_it() -> None:
    assert beside(Path("results/search-temperature-0.5"), ".json") == Path(
        "results/search-temperature-0.5.json"
    )
    assert beside(Path("results/search"), ".md") == Path("results/search.md")


def test_best_of_n_prm_is_best_of_n_with_the_prm_vote_and_reports_its_paired_majority() -> None:
    args = parse([])
    headers, body = request_of("best-of-n-prm", 8, args)
    assert headers == {"X-Strategy": "best-of-n", "X-Budget-Samples": "8"}
    assert body == {"scorer": "prm", "select": "vote"}
    assert request_of("best-of-n-prm", 8, parse(["--prm-select", "best"]))[1]["select"] == "best"
    cells = [
        Cell("self-consistency", 16, 70.0, 2400.0, 0.0, 30.0, 0),
        Cell("best-of-n-prm", 4, 65.0, 600.0, 0.0, 10.0, 0, 57.5, 80.0, 5, 2),
    ]
    text = report(cells, args, 1.0)
    assert "| best-of-n-prm | 65.0 / 57.5 / 80.0 (+5 -2) |" in text
    assert "best-of-n-prm: no N reached 70.0%." in text
    assert "dvts" not in text.split("## Goal")[1]  # not run, not judged
