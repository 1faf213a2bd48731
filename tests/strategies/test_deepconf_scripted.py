"""DeepConf (online strategy, offline votes) over HTTP without vLLM: the real app in
process and a scripted engine that behaves as the confidence processor does (it ends a
trace with EOS where its window mean first falls below the request's threshold). The
processor itself is tested in ``tests/kernels/test_confidence_processor.py``, and the
whole path on the real engine in ``test_deepconf_api.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample
from core.token_confidence import group_confidences, lowest_group, percentile
from kernels.confidence import args as conf_args
from strategies.voting import DEFAULT_TOP_K

QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]
WINDOW = 4


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": QUESTION, **extra}


def _trace(tokens: Any, answer: int, confs: Sequence[float], index: int = 0) -> Sample:
    """A trace thinking a few tokens then answering \\boxed{answer}, EOS; its token
    confidences are ``confs`` stretched/padded to its length (last value repeated)."""
    ids = (*tokens.encode(f"{answer}+0={answer}\n"), tokens.think_end_id)
    ids = (*ids, *tokens.encode(f"\\boxed{{{answer}}}"), tokens.eos_token_ids[0])
    c = list(confs)[: len(ids)]
    c += [c[-1]] * (len(ids) - len(c))
    return Sample(index=index, token_ids=ids, finish_reason="stop", confidences=tuple(c))


def _processor_cut(tokens: Any, s: Sample, threshold: float, window: int) -> Sample:
    """What the processor does to ``s``: EOS at the first full window below threshold."""
    confs = list(s.confidences or ())
    for end in range(window, len(confs) + 1):
        if group_confidences(confs[end - window : end], window)[0] < threshold:
            ids = (*s.token_ids[: end - 1], tokens.eos_token_ids[0])
            return Sample(
                index=s.index, token_ids=ids, finish_reason="stop", confidences=tuple(confs[:end])
            )
    return s


def _model(tokens: Any, warm: list[tuple[int, float]], online: list[tuple[int, float]]) -> Any:
    """Warm-up traces (answer, confidence) for the first call, then the online ones in
    order, each online call (a round) taking the next ``n``."""
    cursor = 0

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        nonlocal cursor
        extra = request.sampling.extra_args
        assert request.sampling.top_logprobs == DEFAULT_TOP_K
        if conf_args.THRESHOLD not in extra:
            assert request.request_id.endswith("-warmup")
            n = request.sampling.n
            return [_trace(tokens, a, [c], i) for i, (a, c) in enumerate(warm[:n])]
        assert extra[conf_args.WINDOW] == WINDOW and extra[conf_args.TOP_K] == DEFAULT_TOP_K
        assert extra[conf_args.EOS_ID] == tokens.eos_token_ids[0]
        thr = float(extra[conf_args.THRESHOLD])
        taken = online[cursor : cursor + request.sampling.n]
        cursor += request.sampling.n
        # Online traces start confident then drift to ``c`` (a low c gets them cut).
        return [
            _processor_cut(tokens, _trace(tokens, a, [9.0, 9.0, c, c], i), thr, WINDOW)
            for i, (a, c) in enumerate(taken)
        ]

    return handler


DEEPCONF = frozenset({"confidence", "elastic"})


async def test_online_threshold_stop_and_weighted_vote(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    warm = [(7, 5.0), (3, 2.0)]
    # 6 online traces: three unsure 3s (cut by the low threshold), three sure 7s.
    online = [(3, 1.0), (7, 8.0), (3, 1.5), (7, 9.0), (3, 1.0), (7, 8.5)]
    async with scripted_app(_model(tokens, warm, online), processors=DEEPCONF) as app:
        body = _chat(
            app.model,
            confidence_window=WINDOW,
            consensus=1.0,
            variant="low",
            warmup=2,
            round_size=2,
        )
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
    tg = out["thinkgate"]
    warm_confs = [lowest_group(_trace(tokens, a, [c]).confidences or (), WINDOW) for a, c in warm]
    assert tg["warmup"] == 2
    # The variant "low" keeps the top 10%: the 90th percentile of the warm-up.
    assert tg["threshold"] == pytest.approx(percentile(warm_confs[:2], 90.0), abs=1e-6)
    # No consensus (1.0 is out of reach): the budget is spent in rounds of 2, one engine
    # request each.
    calls = app.engine.calls
    assert [c.sampling.n for c in calls] == [2, 2, 2, 2]
    assert [c.request_id.rsplit("-", 2)[-2:] for c in calls[1:]] == [
        ["online", "0"],
        ["online", "1"],
        ["online", "2"],
    ]
    assert tg["samples"] == 8 and tg["engine_requests"] == 4 and tg["rounds"] == 3
    voted = tg["sample_voted"]
    assert len(voted) == 8 and voted[:2] == [True, True]
    assert tg["stopped_early"] == voted.count(False) > 0
    # Usage: every token generated, stopped traces included.
    assert out["usage"]["completion_tokens"] == sum(tg["sample_tokens"])
    assert tg["rule"] == "weighted-majority"
    assert out["choices"][0]["message"]["content"] == "\\boxed{7}"


async def test_consensus_in_the_warm_up_draws_nothing_more(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    warm = [(7, 5.0)] * 4
    async with scripted_app(_model(tokens, warm, []), processors=DEEPCONF) as app:
        body = _chat(app.model, confidence_window=WINDOW, warmup=4)
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "16"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        tg = r.json()["thinkgate"]
    assert len(app.engine.calls) == 1
    assert tg["samples"] == 4 and tg["consensus"] == 1.0
    # 12 traces never drawn, each worth the mean finished length.
    mean = tg["mean_full_trace_tokens"]
    assert tg["tokens_saved_estimate"] == round(12 * mean)


async def test_consensus_while_drawing_aborts_the_rest_and_counts_their_tokens(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    warm = [(7, 5.0), (3, 5.0)]
    # The first online trace to finish is the shortest (one-digit answers are all one
    # length, so make the rest longer): 7 reaches 0.95 only with many confident votes.
    online = [(7, 100.0)] + [(123456, 6.0)] * 5
    async with scripted_app(_model(tokens, warm, online), processors=DEEPCONF) as app:
        body = _chat(
            app.model,
            confidence_window=WINDOW,
            variant="high",
            consensus=0.9,
            warmup=2,
            round_size=6,
        )
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
    tg = out["thinkgate"]
    assert tg["aborted_at_consensus"] == 5
    assert tg["samples"] == 8
    assert out["usage"]["completion_tokens"] == sum(tg["sample_tokens"])
    # The aborted traces were cut mid-way: fewer tokens than the full 123456 trace.
    full = len(_trace(tokens, 123456, [6.0]).token_ids)
    assert all(0 < t < full for t in tg["sample_tokens"][3:])
    assert out["choices"][0]["message"]["content"] == "\\boxed{7}"


async def test_a_consensus_after_a_round_draws_no_further_round(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    warm = [(7, 5.0), (3, 5.0)]
    online = [(7, 9.0)] * 6  # confident 7s: two of them make 7 hold 0.8 of the weight
    async with scripted_app(_model(tokens, warm, online), processors=DEEPCONF) as app:
        body = _chat(
            app.model,
            confidence_window=WINDOW,
            variant="high",
            consensus=0.8,
            warmup=2,
            round_size=2,
            seed=11,
        )
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
    tg = out["thinkgate"]
    calls = app.engine.calls
    assert [c.sampling.n for c in calls] == [2, 2]
    # Child j of a seeded request samples with seed + j: the round starts after the
    # warm-up's seeds, or it would redraw the warm-up's traces.
    assert [c.sampling.seed for c in calls] == [11, 13]
    assert (tg["rounds"], tg["round_size"], tg["samples"]) == (1, 2, 4)
    assert tg["consensus"] >= 0.8 and tg["aborted_at_consensus"] == 0
    assert tg["tokens_saved_estimate"] == round(4 * tg["mean_full_trace_tokens"])
    assert out["usage"]["completion_tokens"] == sum(tg["sample_tokens"])
    assert out["choices"][0]["message"]["content"] == "\\boxed{7}"


async def test_the_defaults_draw_trace_by_trace_until_a_consensus_of_0_6(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    """variant high, a warm-up of at least 4, rounds of 1 when the engine has no rows to
    spare (here: its load is unknown), consensus 0.6: the settings
    benchmarks/confidence_grid.py chose on validation questions."""
    tokens = testbed_tokens
    warm = [(7, 5.0), (3, 5.0), (7, 5.0), (3, 5.0)]  # a split warm-up: share 0.5
    online = [(7, 9.0)] * 4  # one confident 7 lifts 7 to 19 / 29 of the weight
    async with scripted_app(_model(tokens, warm, online), processors=DEEPCONF) as app:
        body = _chat(app.model, confidence_window=WINDOW)
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
    tg = out["thinkgate"]
    assert (tg["variant"], tg["warmup"], tg["round_size"]) == ("high", 4, None)
    assert (tg["schedule"], tg["round_sizes"], tg["loads_seen"]) == ("load", [1], [None])
    assert tg["consensus_target"] == 0.6
    warm_confs = tg["sample_confidences"][:4]
    assert tg["threshold"] == pytest.approx(percentile(warm_confs, 10.0), abs=1e-6)
    assert [c.sampling.n for c in app.engine.calls] == [4, 1]
    assert tg["samples"] == 5 and tg["consensus"] == pytest.approx(19 / 29, abs=1e-3)
    assert out["choices"][0]["message"]["content"] == "\\boxed{7}"


async def test_without_the_processor_it_is_a_503(scripted_app: Any, testbed_tokens: Any) -> None:
    async with scripted_app(_model(testbed_tokens, [], []), processors=frozenset()) as app:
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "8"}
        r = await app.client.post("/v1/chat/completions", json=_chat(app.model), headers=headers)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "resource_unavailable"
    assert "confidence" in r.json()["error"]["message"]
    assert app.engine.calls == []


@pytest.mark.parametrize(
    ("strategy", "fields", "samples", "param"),
    [
        ("deepconf", {"variant": "mid"}, 8, "variant"),
        ("deepconf", {"warmup": 0}, 8, "warmup"),
        ("deepconf", {"warmup": 9}, 8, "warmup"),
        ("deepconf", {"consensus": 1.5}, 8, "consensus"),
        ("deepconf", {"round_size": 0}, 8, "round_size"),
        ("deepconf", {"round_size": "2"}, 8, "round_size"),
        ("deepconf", {"vote": "majority"}, 8, "vote"),
        ("deepconf", {"vote_filter": 0.5}, 8, "vote_filter"),
        ("deepconf", {"confidence_window": 0}, 8, "confidence_window"),
        ("deepconf", {"confidence_top_k": 21}, 8, "confidence_top_k"),
        ("deepconf", {}, 1, "samples"),
        ("self-consistency", {"vote": "loudest"}, 4, "vote"),
        ("best-of-majority", {"vote": "most"}, 4, "vote"),
        ("pets", {"vote": "confidence-top", "vote_filter": 0}, 4, "vote_filter"),
        ("best-of-n", {"confidence_window": 8}, 4, "confidence_window"),
    ],
)
async def test_bad_options_are_400s_naming_the_field(
    scripted_app: Any,
    testbed_tokens: Any,
    strategy: str,
    fields: dict[str, Any],
    samples: int,
    param: str,
) -> None:
    async with scripted_app(_model(testbed_tokens, [], []), processors=DEEPCONF) as app:
        headers = {"X-Strategy": strategy, "X-Budget-Samples": str(samples)}
        r = await app.client.post(
            "/v1/chat/completions", json=_chat(app.model, **fields), headers=headers
        )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert app.engine.calls == []


def _pool_model(tokens: Any, pool: list[tuple[int, float]]) -> Any:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        assert request.sampling.top_logprobs == (
            DEFAULT_TOP_K if request.sampling.n == len(pool) else 0
        )
        return [_trace(tokens, a, [c], i) for i, (a, c) in enumerate(pool)]

    return handler


@pytest.mark.parametrize(
    ("vote", "extra", "want"),
    [
        ("majority", {}, "3"),  # three 3s outvote two 7s
        ("confidence", {}, "7"),  # 2 x 9.0 > 3 x 2.0
        ("confidence-top", {"vote_filter": 0.4}, "7"),  # the two most confident: 7s
    ],
)
async def test_self_consistency_votes(
    scripted_app: Any, testbed_tokens: Any, vote: str, extra: dict[str, Any], want: str
) -> None:
    pool = [(3, 2.0), (7, 9.0), (3, 2.0), (7, 9.0), (3, 2.0)]
    tokens = testbed_tokens
    handler = _pool_model(tokens, pool) if vote != "majority" else None

    def plain(request: GenerateRequest) -> Sequence[Sample]:
        assert request.sampling.top_logprobs == 0
        return [_trace(tokens, a, [c], i) for i, (a, c) in enumerate(pool)]

    async with scripted_app(handler or plain) as app:
        headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": "5"}
        body = _chat(app.model, vote=vote, **extra)
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        out = r.json()
    assert out["choices"][0]["message"]["content"] == f"\\boxed{{{want}}}"
    tg = out["thinkgate"]
    if vote == "majority":
        assert tg["rule"] == "majority" and "vote" not in tg
    else:
        assert tg["rule"] == "weighted-majority" and tg["vote"] == vote
        assert tg["sample_rewards"] == [c for _, c in pool]


async def test_best_of_majority_filters_by_confidence_share(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    """Count shares keep both classes and the scorer prefers 3; confidence shares drop
    the unsure 3s (1.5 of 19.5 < alpha) and 7 wins."""
    tokens = testbed_tokens
    pool = [(3, 0.5), (7, 9.0), (3, 0.5), (7, 9.0), (3, 0.5)]

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        out = []
        for i, (a, c) in enumerate(pool):
            s = _trace(tokens, a, [c], i)
            # The logprob scorer: 3s look likelier per token than 7s.
            lp = (-0.1 if a == 3 else -2.0) * len(s.token_ids)
            conf = s.confidences if request.sampling.top_logprobs else None
            out.append(
                Sample(
                    index=i,
                    token_ids=s.token_ids,
                    finish_reason="stop",
                    cumulative_logprob=lp,
                    confidences=conf,
                )
            )
        return out

    chosen = {}
    async with scripted_app(handler) as app:
        headers = {"X-Strategy": "best-of-majority", "X-Budget-Samples": "5"}
        for vote in ("majority", "confidence"):
            body = _chat(app.model, scorer="logprob", alpha=0.2, vote=vote)
            r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
            assert r.status_code == 200, r.text
            chosen[vote] = r.json()["choices"][0]["message"]["content"]
    assert chosen == {"majority": "\\boxed{3}", "confidence": "\\boxed{7}"}


async def test_pets_final_vote_by_confidence(scripted_app: Any, testbed_tokens: Any) -> None:
    """Buckets still read the warm-up counts; only the final answer is weighted."""
    tokens = testbed_tokens

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        k = request.sampling.top_logprobs
        out = []
        for i in range(request.sampling.n):
            s = _trace(tokens, 7 if i == 0 else 3, [50.0 if i == 0 else 1.0], i)
            out.append(
                Sample(
                    index=i,
                    token_ids=s.token_ids,
                    finish_reason="stop",
                    confidences=s.confidences if k else None,
                )
            )
        return out

    got = {}
    async with scripted_app(handler) as app:
        for vote in ("majority", "confidence"):
            r = await app.client.post(
                "/v1/chat/completions",
                json=_chat(app.model, vote=vote, cap=8),
                headers={"X-Strategy": "pets", "X-Budget-Samples": "6"},
            )
            assert r.status_code == 200, r.text
            tg = r.json()["thinkgate"]
            assert tg["bucket"] == "3+1"
            got[vote] = (tg["answer"], tg["rule"])
        assert all(c.sampling.top_logprobs == DEFAULT_TOP_K for c in app.engine.calls[-2:])
    assert got["majority"] == ("3", "majority")
    assert got["confidence"][1] == "weighted-majority" and got["confidence"][0] == "7"


async def test_round_sizes_follow_the_engines_free_rows(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    """Each round takes the rows the engine has free (at least one trace, at most what is
    left); the ``thinkgate`` object shows each round's size and the load it saw."""
    from core.engine import EngineLoad

    warm = [(7, 5.0), (3, 5.0), (7, 5.0), (3, 5.0)]
    online = [(7, 5.0), (3, 5.0)] * 6  # never a consensus of 0.9: the budget is spent
    async with scripted_app(_model(testbed_tokens, warm, online), processors=DEEPCONF) as app:
        app.engine.loads = [
            EngineLoad(rows=8, busy=5),  # 3 free
            EngineLoad(rows=8, busy=8),  # full: one trace
            EngineLoad(rows=8, busy=10, waiting=2),  # queueing: one trace
            EngineLoad(rows=64, busy=0),  # idle: everything left
        ]
        body = _chat(app.model, confidence_window=WINDOW, consensus=0.9)
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "16"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        tg = r.json()["thinkgate"]
        calls = [c.sampling.n for c in app.engine.calls]
    assert tg["round_sizes"] == [3, 1, 1, 7] and calls == [4, 3, 1, 1, 7]
    assert tg["loads_seen"][0] == {"rows": 8, "busy": 5, "waiting": 0}
    assert tg["loads_seen"][2]["waiting"] == 2 and tg["samples"] == 16


@pytest.mark.parametrize("fixed", [1, 3, 12])
async def test_the_same_traces_vote_the_same_under_any_schedule(
    scripted_app: Any, testbed_tokens: Any, fixed: int
) -> None:
    """The schedule decides when traces are drawn, never how they vote: the same traces
    (no consensus reachable, so all of them are drawn) give the same answer, votes and
    usage in rounds of 1, 3 or 12 as in the load schedule's single round."""
    warm = [(7, 5.0), (3, 5.0), (7, 5.0), (3, 5.0)]
    online = [(7, 6.0), (3, 5.0), (7, 6.0), (3, 1.0)] * 3

    async def run(extra: dict[str, Any]) -> dict[str, Any]:
        handler = _model(testbed_tokens, warm, online)
        async with scripted_app(handler, processors=DEEPCONF) as app:
            from core.engine import EngineLoad

            app.engine.loads = [EngineLoad(rows=64, busy=0)]
            body = _chat(app.model, confidence_window=WINDOW, consensus=1.0, **extra)
            headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "16"}
            r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
            assert r.status_code == 200, r.text
            out: dict[str, Any] = r.json()
            return out

    by_load, by_fixed = await run({}), await run({"round_size": fixed})
    assert by_load["thinkgate"]["round_sizes"] == [12]
    assert len(by_fixed["thinkgate"]["round_sizes"]) == -(-12 // fixed)

    def traces(out: dict[str, Any]) -> list[tuple[Any, ...]]:
        # A pool in finishing order: one round of 12 finishes its short (stopped) traces
        # first, rounds of one in drawing order. The same traces, whatever the order.
        tg = out["thinkgate"]
        keys = ("sample_tokens", "sample_answers", "sample_confidences", "sample_voted")
        return sorted(zip(*(tg[k] for k in keys), strict=True))

    assert traces(by_load) == traces(by_fixed)
    assert by_load["usage"] == by_fixed["usage"]
    assert by_load["choices"][0]["message"] == by_fixed["choices"][0]["message"]


async def test_a_trace_cut_before_its_first_token_weighs_nothing(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    """A deadline can end a trace before it drew a token: it has no confidences because
    it has no tokens, not because the engine failed to report them (a 500 before)."""
    tokens = testbed_tokens

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        n = request.sampling.n
        empty = Sample(index=n - 1, token_ids=(), finish_reason="length", confidences=None)
        return [*(_trace(tokens, 7, [5.0], i) for i in range(n - 1)), empty]

    async with scripted_app(handler, processors=DEEPCONF) as app:
        body = _chat(app.model, warmup=2, round_size=2)
        headers = {"X-Strategy": "deepconf", "X-Budget-Samples": "4"}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    out = r.json()
    assert "boxed{7}" in out["choices"][0]["message"]["content"]
    assert 0.0 in out["thinkgate"]["sample_confidences"]  # the empty trace
