"""DeepConf end to end: the openai SDK against the live server (the real vLLM engine with
the confidence processor inside it: in process for ``local``, in ``thinkgate replica``
servers for ``remote``), on hard testbed questions at temperature 1.

Audited from outside through the ``thinkgate`` object: usage is the exact sum over every
trace drawn (stopped ones included); the threshold is the variant's percentile of the
warm-up's confidences; traces the engine stopped are shorter than the ones that ran to
their end and never carry an answer to the vote; budgets still apply to every trace.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.token_confidence import percentile
from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote", "router")]

HARD = make_questions("test", 5, seed=33, min_ops=9, max_ops=12)
WINDOW = 16


def _ask(client: Any, prompt: str, headers: dict[str, str], **body: Any) -> tuple[Any, Any]:
    r = client.chat.completions.create(
        model="testbed-base",
        messages=[{"role": "user", "content": prompt}],
        extra_headers=headers,
        extra_body=body,
        temperature=1.0,
        seed=7,
    )
    return r, r.model_extra["thinkgate"]


def test_online_stops_traces_in_the_engine_and_counts_every_token(openai_client: Any) -> None:
    headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "12"}
    online = 0
    for q in HARD:
        # consensus 1.0: only a unanimous vote ends the draw early; the paper's low
        # variant (not the default) so that the engine stops most online traces.
        r, tg = _ask(
            openai_client,
            q.prompt,
            headers,
            confidence_window=WINDOW,
            consensus=1.0,
            variant="low",
            warmup=3,
            round_size=3,
        )
        warmup = tg["warmup"]
        assert warmup == 3
        confs, voted = tg["sample_confidences"], tg["sample_voted"]
        # The "low" threshold: the 90th percentile of the warm-up's trace confidences.
        assert tg["threshold"] == pytest.approx(percentile(confs[:warmup], 90.0), abs=1e-4)
        assert all(voted[:warmup])
        # Usage is every token generated, stopped traces included.
        assert r.usage.completion_tokens == sum(tg["sample_tokens"])
        assert tg["rule"] == "weighted-majority" and r.choices[0].message.content
        if tg["samples"] == warmup:
            # A unanimous warm-up: nothing more drawn, the rest of the budget saved.
            assert tg["consensus"] == 1.0 and tg["engine_requests"] == 1
            assert tg["tokens_saved_estimate"] > 0
            continue
        # No unanimity reachable once the warm-up disagrees: 9 traces in rounds of 3.
        assert tg["samples"] == 12 and (tg["rounds"], tg["engine_requests"]) == (3, 4)
        stopped = [i for i in range(warmup, 12) if not voted[i]]
        assert tg["stopped_early"] == len(stopped) and tg["aborted_at_consensus"] == 0
        for i in stopped:  # stopped where its window mean fell below the threshold
            assert confs[i] < tg["threshold"]
        for i in range(warmup, 12):
            if voted[i]:
                assert confs[i] >= tg["threshold"] or tg["sample_tokens"][i] < WINDOW
        # With the threshold at the warm-up's 90th percentile most online traces fall
        # below it, and the engine ends them early: shorter than the traces that ran.
        assert len(stopped) >= 3
        if len(stopped) < 12 - warmup:
            ran = [tg["sample_tokens"][i] for i in range(12) if voted[i]]
            cut = [tg["sample_tokens"][i] for i in stopped]
            assert sum(cut) / len(cut) < sum(ran) / len(ran)
        online += 1
        break
    assert online, "every warm-up was unanimous: no online phase to check"


def test_the_defaults_on_the_engine(openai_client: Any) -> None:
    """No option: variant high, a warm-up of 4 at N=8, then rounds sized by the engine's
    free rows (this otherwise idle server: every trace left at once) until the leader
    holds 0.6 of the weight (the rest aborted) or the budget is spent."""
    headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
    r, tg = _ask(openai_client, HARD[1].prompt, headers)
    assert (tg["variant"], tg["warmup"], tg["round_size"]) == ("high", 4, None)
    assert tg["schedule"] == "load"
    assert tg["threshold"] == pytest.approx(
        percentile(tg["sample_confidences"][:4], 10.0), abs=1e-4
    )
    if tg["rounds"] == 0:  # the warm-up agreed: no online round
        assert tg["samples"] == 4 and tg["consensus"] >= 0.6
    else:
        assert tg["round_sizes"] == [4] and tg["engine_requests"] == 2
        assert tg["loads_seen"][0]["waiting"] == 0 and tg["loads_seen"][0]["rows"] >= 4
        assert tg["samples"] == 8  # aborted traces of the round count (and are billed)
        if tg["aborted_at_consensus"]:
            assert tg["consensus"] >= 0.6
    assert r.usage.completion_tokens == sum(tg["sample_tokens"])


def test_on_an_idle_engine_one_round_draws_every_trace_left(openai_client: Any) -> None:
    """The load schedule on the live engine: this server runs nothing else, so the first
    online round takes every trace left (the engine's free rows are more), and the
    ``thinkgate`` object says what load it saw."""
    headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
    for q in HARD:  # a question whose 2-trace warm-up disagrees has an online phase
        r, tg = _ask(openai_client, q.prompt, headers, warmup=2, consensus=1.0)
        if tg["rounds"]:
            break
    else:
        pytest.fail("every warm-up was unanimous: no online phase to check")
    assert tg["schedule"] == "load" and tg["round_sizes"][0] == 6
    seen = tg["loads_seen"][0]
    assert seen["waiting"] == 0 and seen["rows"] - seen["busy"] >= 6
    assert r.usage.completion_tokens == sum(tg["sample_tokens"])


def test_high_variant_and_budgets_compose(openai_client: Any) -> None:
    headers = {
        "X-Strategy": "deepconf",
        "X-Budget-Samples": "6",
        "X-Budget-Thinking": "40",
        "X-Budget-Solution": "16",
    }
    r, tg = _ask(openai_client, HARD[0].prompt, headers, variant="high", warmup=2)
    assert tg["variant"] == "high" and tg["warmup"] == 2
    confs = tg["sample_confidences"]
    assert tg["threshold"] == pytest.approx(percentile(confs[:2], 10.0), abs=1e-4)
    assert tg["per_sample_budget"]["thinking"] == 40
    assert all(t <= 40 for t in tg["sample_reasoning_tokens"])
    assert all(t <= 40 + 1 + 16 + 1 for t in tg["sample_tokens"])
    assert r.usage.completion_tokens == sum(tg["sample_tokens"])


def test_self_consistency_confidence_vote(openai_client: Any) -> None:
    headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": "6"}
    r, tg = _ask(openai_client, HARD[-1].prompt, headers, vote="confidence-top", vote_filter=0.5)
    assert tg["rule"] == "weighted-majority" and tg["vote"] == "confidence-top"
    weights = tg["sample_rewards"]
    assert len(weights) == 6 and all(w > 0 for w in weights)
    # Only the 3 most confident samples vote: the chosen class holds one of them.
    top = sorted(range(6), key=lambda i: (-weights[i], i))[:3]
    chosen = r.choices[0].model_extra["thinkgate"]["sample_index"]
    assert chosen in top
    assert r.usage.completion_tokens == sum(tg["sample_tokens"])
