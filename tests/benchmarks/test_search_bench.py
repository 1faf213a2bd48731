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
    headers, body = request_of("step-rejection-adaptive", 8, parse([]))
    assert headers == {"X-Strategy": "step-rejection", "X-Budget-Samples": "8"}
    assert body == {"adaptive": True}


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


def test_a_results_prefix_with_a_dot_keeps_it(tmp_path: Path) -> None:
    search = tmp_path / "results" / "search"
    assert beside(search / "temperature-0.5", ".json") == search / "temperature-0.5.json"
    assert beside(search / "search", ".md") == search / "search.md"


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


def test_the_adaptive_vote_is_best_of_n_with_adaptive_and_is_judged_by_its_tokens() -> None:
    args = parse([])
    headers, body = request_of("best-of-n-prm-adaptive", 16, args)
    assert headers == {"X-Strategy": "best-of-n", "X-Budget-Samples": "16"}
    assert body == {"scorer": "prm", "select": "vote", "adaptive": True}
    assert request_of("pets", 8, args) == ({"X-Strategy": "pets", "X-Budget-Samples": "8"}, {})
    cells = [
        Cell("self-consistency", 16, 70.0, 2400.0, 0.0, 30.0, 0, samples=16.0),
        Cell("best-of-n-prm-adaptive", 16, 71.0, 1150.0, 0.0, 20.0, 0, samples=7.5),
    ]
    text = report(cells, args, 1.0)
    assert "| best-of-n-prm-adaptive | 7.5 |" in text  # samples drawn, under a cap of 16
    assert "best-of-n-prm-adaptive@16: accuracy 71.0% with 1150 tokens = 0.48x" in text
    assert "(met: at most 0.5x)" in text


def test_adaptive_stop_replays_rounds_until_the_rule_settles() -> None:
    from benchmarks.adaptive_stop import Drawn, Rule, replay

    right, wrong = Drawn(6, True, 0.9, 10), Drawn(5, False, 0.2, 10)
    settles = [right] * 4 + [wrong] * 12  # round one: 6 holds all 3.6
    never = [right, wrong] * 8  # 6 holds 0.9 / 1.1 of it, and 5 is the majority of 2
    prm = Rule(weighted=True, round=4, share=0.9, weight=0.5)
    assert replay([settles], prm) == (100.0, 40.0, 4.0)
    assert replay([never], prm) == (100.0, 160.0, 16.0)  # to the cap, then the PRM picks 6
    count = Rule(weighted=False, round=4, share=0.9, weight=3.0)
    assert replay([never], count) == (100.0, 160.0, 16.0)  # a tie: the first seen, 6
    assert replay([[wrong] * 4 + [right] * 12], count) == (0.0, 40.0, 4.0)
