"""A misspelling of one of thinkgate's names is found (and refused by the registry);
anything farther away is a client's own field."""

from __future__ import annotations

import pytest

from core.near_names import has_our_prefix, nearest

NAMES = ("fork_depth", "vote_stop", "alpha", "budget", "top_k", "warmup")


@pytest.mark.parametrize(
    ("field", "meant"),
    [
        ("fork_dpeth", "fork_depth"),  # two letters swapped: two edits
        ("forkDepth", "fork_depth"),  # camelCase
        ("vote-stop", "vote_stop"),
        ("alhpa", "alpha"),
        ("budgets", "budget"),
        ("top_kk", "top_k"),
        ("warmpu", "warmup"),
    ],
)
def test_near_misses_name_what_was_meant(field: str, meant: str) -> None:
    assert nearest(field, NAMES) == meant


@pytest.mark.parametrize(
    "field", ["client_metadata", "providerOptions", "colour", "top_p2x", "x", "trace_id"]
)
def test_a_clients_own_fields_are_nobodys(field: str) -> None:
    assert nearest(field, NAMES) is None


def test_the_closest_name_wins() -> None:
    assert nearest("alpah", ("alpha", "alphas")) == "alpha"


def test_thinkgates_prefix() -> None:
    assert has_our_prefix("thinkgate_mode") and has_our_prefix("X-Thinkgate-Foo")
    assert not has_our_prefix("client_metadata")
