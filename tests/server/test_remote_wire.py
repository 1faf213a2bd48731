"""The remote engine's pure parts: request bodies, answers and frames, upstream errors,
and the balancer's choices (no server needed; the live ones are in tests/server/remote)."""

from __future__ import annotations

import pytest

from core import errors as tree
from core.engine import QUIET_STREAM_INTERVAL, GenerateRequest, SamplingConfig, StructuredOutput
from engines.remote.balancer import BLOCK, PrefixIndex, block_hashes, choose
from engines.remote.wire import body, deltas, samples, upstream_error
from kernels.processors import wanted_by


def _request(**sampling: object) -> GenerateRequest:
    return GenerateRequest(
        request_id="r1",
        prompt_token_ids=(5, 6, 7),
        sampling=SamplingConfig(**sampling),  # type: ignore[arg-type]
    )


def test_generate_body_carries_sampling_params_and_extra_args() -> None:
    req = _request(
        n=3,
        temperature=0.7,
        seed=9,
        stop=("\n",),
        logprobs=True,
        extra_args={"thinkgate_thinking_budget": 8},
    )
    out = body("generate", req, max_tokens=40, upstream_model="m", stream=True)
    assert out["token_ids"] == [5, 6, 7] and out["stream"] is True
    assert out["request_id"] == "r1"
    params = out["sampling_params"]
    assert params["n"] == 3 and params["max_tokens"] == 40 and params["seed"] == 9
    assert params["extra_args"] == {"thinkgate_thinking_budget": 8}
    assert params["logprobs"] == 0 and params["stop"] == ["\n"] and params["detokenize"] is True


def test_a_stream_nobody_reads_token_by_token_asks_for_fewer_frames() -> None:
    quiet = GenerateRequest(
        request_id="r1", prompt_token_ids=(5,), sampling=SamplingConfig(), visible=False
    )
    out = body("generate", quiet, max_tokens=4, upstream_model="m", stream=True)
    assert out["sampling_params"]["stream_interval"] == QUIET_STREAM_INTERVAL
    # A visible stream goes token by token; a non-streamed call has no frames.
    seen = body("generate", _request(), max_tokens=4, upstream_model="m", stream=True)
    whole = body("generate", quiet, max_tokens=4, upstream_model="m", stream=False)
    assert "stream_interval" not in seen["sampling_params"]
    assert "stream_interval" not in whole["sampling_params"]


def test_completions_body_uses_token_prompt_and_vllm_xargs() -> None:
    req = _request(extra_args={"thinkgate_bg_budget": 5})
    out = body("completions", req, max_tokens=10, upstream_model="served", stream=False)
    assert out["model"] == "served" and out["prompt"] == [5, 6, 7]
    assert out["return_token_ids"] is True and out["vllm_xargs"] == {"thinkgate_bg_budget": 5}
    assert "seed" not in out and "extra_args" not in out and "logprobs" not in out


def test_vllm_sampling_extras_travel_only_when_set() -> None:
    for protocol in ("generate", "completions"):
        plain = body(protocol, _request(), max_tokens=4, upstream_model="m", stream=False)
        flat = {**plain, **plain.get("sampling_params", {})}
        assert not {"top_k", "min_p", "repetition_penalty", "min_tokens"} & set(flat)
        req = _request(top_k=3, min_p=0.2, repetition_penalty=1.3, min_tokens=2)
        out = body(protocol, req, max_tokens=4, upstream_model="m", stream=False)
        flat = {**out, **out.get("sampling_params", {})}
        assert (flat["top_k"], flat["min_p"]) == (3, 0.2)
        assert (flat["repetition_penalty"], flat["min_tokens"]) == (1.3, 2)


def test_openai_penalties_and_logit_bias_travel_only_when_set() -> None:
    for protocol in ("generate", "completions"):
        plain = body(protocol, _request(), max_tokens=4, upstream_model="m", stream=False)
        flat = {**plain, **plain.get("sampling_params", {})}
        assert not {"presence_penalty", "frequency_penalty", "logit_bias"} & set(flat)
        req = _request(presence_penalty=0.5, frequency_penalty=-1.0, logit_bias={7: -100.0})
        out = body(protocol, req, max_tokens=4, upstream_model="m", stream=False)
        flat = {**out, **out.get("sampling_params", {})}
        assert (flat["presence_penalty"], flat["frequency_penalty"]) == (0.5, -1.0)
        assert flat["logit_bias"] == {"7": -100.0}  # JSON keys; vLLM reads ids back


def test_a_response_format_travels_as_vllms_structured_outputs() -> None:
    schema = StructuredOutput(kind="json_schema", schema='{"type":"object"}')
    for structured, expected in (
        (None, None),
        (StructuredOutput(kind="json_object"), {"json_object": True}),
        (schema, {"json": {"type": "object"}}),
    ):
        for protocol in ("generate", "completions"):
            req = _request(structured=structured)
            out = body(protocol, req, max_tokens=4, upstream_model="m", stream=False)
            flat = {**out, **out.get("sampling_params", {})}
            assert flat.get("structured_outputs") == expected


def test_samples_from_both_protocols() -> None:
    gen = {
        "choices": [
            {
                "index": 1,
                "token_ids": [4, 2],
                "finish_reason": "stop",
                "stop_reason": None,
                "logprobs": {
                    "content": [{"token_id": 4, "logprob": -0.5}, {"token_id": 2, "logprob": -1.0}]
                },
            },
            {"index": 0, "token_ids": [9], "finish_reason": "length"},
        ]
    }
    out = samples("generate", gen, 2)
    assert [s.index for s in out] == [0, 1]
    assert out[1].token_ids == (4, 2) and out[1].cumulative_logprob == pytest.approx(-1.5)
    assert out[0].finish_reason == "length" and out[0].cumulative_logprob is None
    comp = {
        "choices": [
            {
                "index": 0,
                "text": "x",
                "token_ids": [3],
                "finish_reason": "stop",
                "logprobs": {"token_logprobs": [-0.25]},
            }
        ]
    }
    assert samples("completions", comp, 1)[0].cumulative_logprob == pytest.approx(-0.25)


def test_missing_samples_or_odd_finish_are_upstream_faults() -> None:
    with pytest.raises(tree.BackendError, match="samples"):
        samples(
            "generate", {"choices": [{"index": 0, "token_ids": [], "finish_reason": "stop"}]}, 2
        )
    with pytest.raises(tree.BackendError, match="finished a sample with 'weird'"):
        samples(
            "generate", {"choices": [{"index": 0, "token_ids": [1], "finish_reason": "weird"}]}, 1
        )


def test_stream_frames_become_deltas() -> None:
    frame = {
        "choices": [
            {"index": 0, "token_ids": [7, 8], "finish_reason": None},
            {"index": 1, "token_ids": [], "finish_reason": None},
            {"index": 2, "token_ids": [], "finish_reason": "abort"},
        ]
    }
    out = deltas("generate", frame)
    assert [(d.index, d.token_ids, d.finish_reason) for d in out] == [
        (0, (7, 8), None),
        (2, (), "abort"),
    ]
    assert deltas("generate", {"choices": [], "usage": {"prompt_tokens": 3}}) == []
    with pytest.raises(tree.BackendError, match="boom"):
        deltas("generate", {"error": {"message": "boom"}})


def test_upstream_errors_map_by_status() -> None:
    bad = upstream_error(400, {"error": {"message": "n must be 1 when using greedy", "code": 400}})
    assert type(bad) is tree.InvalidRequest and "greedy" in bad.message
    assert bad.param == "n"  # vLLM named no param: its message says which field it is
    named = upstream_error(400, {"error": {"message": "too hot", "param": "temperature"}})
    assert named.param == "temperature"
    assert upstream_error(400, {"error": {"message": "no idea", "param": None}}).param is None
    # vLLM's generate route answers 500 for checks its engine makes (found by the fuzz).
    vocab = upstream_error(500, {"error": {"message": "Token id 1378 is out of vocabulary"}})
    assert type(vocab) is tree.InvalidRequest and vocab.param == "prompt"
    assert type(upstream_error(429, {"detail": "busy"})) is tree.Overloaded
    flat = upstream_error(500, {"message": "engine died", "type": "InternalServerError"})
    assert type(flat) is tree.UpstreamError and "engine died" in flat.message  # a 502


def test_needed_processors_follow_the_arguments() -> None:
    assert wanted_by({}) == frozenset()
    assert wanted_by({"thinkgate_thinking_budget": 3}) == {"elastic"}
    assert wanted_by({"thinkgate_bg_budget": 3}) == {"guidance"}
    assert wanted_by({"thinkgate_conf_threshold": 3.5}) == {"confidence"}


def test_block_hashes_chain_the_prefix() -> None:
    a = block_hashes(list(range(40)))
    b = block_hashes([*range(32), 99, 98])
    assert len(a) == 40 // BLOCK and a[:2] == b[:2]
    c = block_hashes([1, *range(1, 40)])
    assert c[0] != a[0] and c[1] != a[1]  # a different first block changes every hash after it


def test_affinity_sends_a_follow_up_where_its_prompt_is_cached() -> None:
    index = PrefixIndex()
    question = list(range(100, 164))  # 4 blocks
    index.record(block_hashes(question), "A")
    follow_up = block_hashes([*question, *range(500, 540)])
    cached = {s: index.cached_tokens(follow_up, s) for s in ("A", "B")}
    assert cached == {"A": 64, "B": 0}
    assert choose(["A", "B"], {"A": 3, "B": 0}, cached) == "A"
    # ...unless A is far busier than B.
    assert choose(["A", "B"], {"A": 40, "B": 0}, cached) == "B"


def test_without_affinity_least_outstanding_samples_wins() -> None:
    assert choose(["A", "B", "C"], {"A": 2, "B": 0, "C": 1}, {}) == "B"
    assert choose(["A", "B"], {}, {}) == "A"
    with pytest.raises(ValueError):
        choose([], {}, {})


def test_a_restarted_server_forgets_its_cache() -> None:
    index = PrefixIndex(capacity=3)
    hashes = block_hashes(list(range(64)))
    index.record(hashes, "A")
    assert index.cached_tokens(hashes, "A") == 0  # the capacity dropped the first blocks
    index.record(hashes[:2], "A")
    assert index.cached_tokens(hashes, "A") == 32
    index.forget("A")
    assert index.cached_tokens(hashes, "A") == 0


def test_unreadable_answers_are_upstream_faults_not_crashes() -> None:
    with pytest.raises(tree.BackendError, match="unreadable answer"):
        samples("generate", {"choices": [{"token_ids": [1], "finish_reason": "stop"}]}, 1)
    with pytest.raises(tree.BackendError, match="unreadable frame"):
        deltas("generate", {"choices": [{"index": "x", "token_ids": [1]}]})


def test_top_logprobs_ask_for_the_top_k_on_both_protocols() -> None:
    for logprobs in (False, True):
        req = _request(top_logprobs=5, logprobs=logprobs)
        gen = body("generate", req, max_tokens=4, upstream_model="m", stream=False)
        # One more than k: generate lists the sampled token first, then the top k.
        assert gen["sampling_params"]["logprobs"] == 6
        comp = body("completions", req, max_tokens=4, upstream_model="m", stream=True)
        # Candidates keyed by token id: tokens that decode alike stay apart.
        assert comp["logprobs"] == 5 and comp["return_tokens_as_token_ids"] is True
    plain = body(
        "completions", _request(logprobs=True), max_tokens=4, upstream_model="m", stream=False
    )
    assert plain["logprobs"] == 0 and "return_tokens_as_token_ids" not in plain
    top = body(
        "generate", _request(top_logprobs=20), max_tokens=4, upstream_model="m", stream=False
    )
    assert top["sampling_params"]["logprobs"] == 20  # vLLM's cap: no extra one


def _generate_content(*steps: tuple[int, list[tuple[int, float]]]) -> list[dict[str, object]]:
    """``content`` of the generate wire: the sampled token, then the candidates vLLM sends."""
    return [
        {
            "token_id": tid,
            "logprob": dict(tops).get(tid, -9.0),
            "top_logprobs": [{"token_id": t, "logprob": v} for t, v in tops],
        }
        for tid, tops in steps
    ]


# Two tokens with top-2: 4 is the top-1; 2 is outside the top 2, so the generate wire
# lists it first in place of the 2nd candidate, the completions wire next to both.
GEN_CONTENT = _generate_content((4, [(4, -0.5), (9, -1.5)]), (2, [(2, -6.0), (3, -0.25)]))
COMP_TOPS = [
    {"token_id:4": -0.5, "token_id:9": -1.5},
    {"token_id:2": -6.0, "token_id:3": -0.25, "token_id:8": -2.0},
]


def _choice(ids: list[int], logprobs: dict[str, object]) -> dict[str, object]:
    return {"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}


def test_samples_carry_token_confidences_from_both_protocols() -> None:
    gen = {"choices": [_choice([4, 2], {"content": GEN_CONTENT})]}
    (got,) = samples("generate", gen, 1, top_k=2)
    assert got.confidences == pytest.approx((1.0, 3.125))
    assert got.cumulative_logprob == pytest.approx(-6.5)
    assert samples("generate", gen, 1)[0].confidences is None  # not asked for: none
    comp_logprobs = {"token_logprobs": [-0.5, -6.0], "top_logprobs": COMP_TOPS}
    comp = {"choices": [_choice([4, 2], comp_logprobs)]}
    (got,) = samples("completions", comp, 1, top_k=2)
    assert got.confidences == pytest.approx((1.0, 1.125))  # the true top 2: -0.25, -2.0


def test_stream_deltas_carry_their_tokens_confidences() -> None:
    frame = {
        "choices": [
            {"index": 0, "token_ids": [4], "logprobs": {"content": GEN_CONTENT[:1]}},
            {"index": 1, "token_ids": [], "finish_reason": "stop", "logprobs": {"content": []}},
        ]
    }
    out = deltas("generate", frame, top_k=2)
    assert [(d.index, d.confidences) for d in out] == [(0, (1.0,)), (1, ())]
    comp = {"choices": [_choice([2], {"token_logprobs": [-6.0], "top_logprobs": COMP_TOPS[1:]})]}
    assert deltas("completions", comp, top_k=2)[0].confidences == pytest.approx((1.125,))
    # A token without candidates (null) carries no information.
    null = {"choices": [_choice([2], {"token_logprobs": [None], "top_logprobs": [None]})]}
    assert deltas("completions", null, top_k=2)[0].confidences == (0.0,)


def test_missing_or_misaligned_top_logprobs_are_upstream_faults() -> None:
    bare = {"choices": [{"index": 0, "token_ids": [4, 2], "finish_reason": "stop"}]}
    with pytest.raises(tree.BackendError, match="no top logprobs for 2 tokens"):
        samples("generate", bare, 1, top_k=2)
    short = {
        "choices": [{"index": 0, "token_ids": [4, 2], "logprobs": {"content": GEN_CONTENT[:1]}}]
    }
    with pytest.raises(tree.BackendError, match="1 top logprobs for 2 tokens"):
        deltas("generate", short, top_k=2)


def test_generate_with_one_extra_candidate_reads_the_true_top_k() -> None:
    """Asked for k + 1, generate lists the sampled token (outside the top k here) and the
    top k: the confidence is the mean of the top k alone, not of k - 1 and the sample."""
    tops = [(7, -0.1), (8, -0.5), (9, -1.0)]  # the top k = 2, then the third best
    content = [{"token_id": 3, "logprob": -7.0, "top_logprobs": [
        {"token_id": 3, "logprob": -7.0}, *({"token_id": t, "logprob": v} for t, v in tops[:2])
    ]}]  # fmt: skip
    answer = {
        "choices": [
            {
                "index": 0,
                "token_ids": [3],
                "finish_reason": "stop",
                "logprobs": {"content": content},
            }
        ]
    }
    (got,) = samples("generate", answer, 1, top_k=2)
    assert got.confidences == pytest.approx((0.3,))  # -(-0.1 - 0.5) / 2


def test_the_clients_logprobs_and_echo_ask_both_protocols_for_them() -> None:
    gen = body(
        "generate",
        _request(token_logprobs=2, prompt_logprobs=2),
        max_tokens=4,
        upstream_model="m",
        stream=False,
    )["sampling_params"]
    assert gen["logprobs"] == 3 and gen["prompt_logprobs"] == 2  # one extra: the true top 2
    comp = body(
        "completions", _request(token_logprobs=0), max_tokens=4, upstream_model="m", stream=True
    )
    assert comp["logprobs"] == 0 and comp["return_tokens_as_token_ids"] is True
    both = body(
        "generate",
        _request(token_logprobs=1, top_logprobs=4),
        max_tokens=4,
        upstream_model="m",
        stream=False,
    )
    assert both["sampling_params"]["logprobs"] == 5  # the larger of confidences' and client's


def test_samples_carry_the_clients_logprobs_from_both_protocols() -> None:
    gen = {"choices": [_choice([4, 2], {"content": GEN_CONTENT})]}
    (got,) = samples("generate", gen, 1, client_k=1)
    assert got.logprobs is not None
    assert [(t.token_id, t.logprob, t.top) for t in got.logprobs] == [
        (4, -0.5, ((4, -0.5),)),
        (2, -6.0, ((3, -0.25),)),  # 2 is listed first but is not the best
    ]
    comp_logprobs = {
        "tokens": ["token_id:4", "token_id:2"],
        "token_logprobs": [-0.5, -6.0],
        "top_logprobs": COMP_TOPS,
    }
    (got,) = samples("completions", {"choices": [_choice([4, 2], comp_logprobs)]}, 1, client_k=2)
    assert got.logprobs is not None
    assert [t.top for t in got.logprobs] == [
        ((4, -0.5), (9, -1.5)),
        ((3, -0.25), (8, -2.0)),
    ]
    frame = {"choices": [{"index": 0, "token_ids": [4], "logprobs": {"content": GEN_CONTENT[:1]}}]}
    (delta,) = deltas("generate", frame, client_k=0)
    assert delta.logprobs is not None and delta.logprobs[0].top == ()


def test_logprobs_that_name_other_tokens_are_an_upstream_fault() -> None:
    gen = {"choices": [_choice([4, 7], {"content": GEN_CONTENT})]}
    with pytest.raises(tree.BackendError, match="other tokens than it sampled"):
        samples("generate", gen, 1, client_k=1)
    with pytest.raises(tree.BackendError, match="no logprobs for 2 tokens"):
        samples("generate", {"choices": [_choice([4, 2], None)]}, 1, client_k=1)  # type: ignore[arg-type]


def test_prompt_logprobs_from_both_protocols() -> None:
    positions = [
        None,
        {"6": {"logprob": -1.0, "rank": 2}, "9": {"logprob": -0.5, "rank": 1}},
        {"7": {"logprob": -0.1, "rank": 1}},
    ]
    top_level = {
        "prompt_logprobs": positions,
        "choices": [_choice([4], {"content": GEN_CONTENT[:1]})],
    }
    (got,) = samples("generate", top_level, 1, prompt=(1, (5, 6, 7)))
    assert got.prompt_logprobs is not None
    assert got.prompt_logprobs[0] is None
    assert [(t.token_id, t.logprob, t.top) for t in got.prompt_logprobs[1:]] == [  # type: ignore[union-attr]
        (6, -1.0, ((9, -0.5),)),
        (7, -0.1, ((7, -0.1),)),
    ]
    on_choice = {
        "choices": [{**_choice([4], {"content": GEN_CONTENT[:1]}), "prompt_logprobs": positions}]
    }
    assert (
        samples("completions", on_choice, 1, prompt=(1, (5, 6, 7)))[0].prompt_logprobs
        == got.prompt_logprobs
    )
    with pytest.raises(tree.BackendError, match="2 prompt logprobs for 3 prompt tokens"):
        samples(
            "generate", {**top_level, "prompt_logprobs": positions[:2]}, 1, prompt=(1, (5, 6, 7))
        )
