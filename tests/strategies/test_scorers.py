"""Scorers without an engine: the mean-logprob arithmetic, the reward model's input
sequence, and the HTTP clients against a real local HTTP server (stdlib ``http.server``
in a thread) answering in the documented shapes (verifier contract; vLLM ``/classify``
as vLLM 0.32 answers it)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import testbed
from core.engine import Sample
from core.errors import BackendError, BackendTimeout, BackendUnavailable, InvalidRequest
from engines.remote.scorer_clients import RemoteClassify, VerifierClient
from engines.tokens import TokenizerTokens
from strategies.scorers import (
    MeanLogprob,
    RewardModelScorer,
    ScoreQuery,
    ScorerSet,
    VerifierScorer,
    chatml_turn_end,
)

Handler = Callable[[dict[str, Any]], tuple[int, object]]


@pytest.fixture(scope="module")
def tokens() -> TokenizerTokens:
    return TokenizerTokens.load(str(testbed.model_path("base")))


@pytest.fixture
def http_server() -> Iterator[Callable[[Handler], str]]:
    """Start a local HTTP server whose POST answers come from a handler; yields a
    function that installs the handler and returns the server's URL."""
    state: dict[str, Any] = {"handler": None, "bodies": []}

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (stdlib name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["bodies"].append((self.path, body))
            status, answer = state["handler"](body)
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def install(handler: Handler) -> str:
        state["handler"] = handler
        return f"http://127.0.0.1:{server.server_address[1]}"

    install.bodies = state["bodies"]  # type: ignore[attr-defined]
    try:
        yield install
    finally:
        server.shutdown()


def query(tokens: TokenizerTokens, texts: Sequence[str]) -> ScoreQuery:
    prompt = tuple(tokens.render_chat([{"role": "user", "content": "Compute 1+2 mod 10."}]))
    samples = tuple(
        Sample(
            index=i,
            token_ids=tuple(tokens.encode(t)),
            finish_reason="stop",
            cumulative_logprob=-1.5 * (i + 1),
        )
        for i, t in enumerate(texts)
    )
    return ScoreQuery(prompt_token_ids=prompt, samples=samples, tokens=tokens, thinking_open=True)


TEXTS = ("1+2=3\n</think>\\boxed{3}<|im_end|>", "1+2=4\n</think>\\boxed{4}")


def test_mean_logprob(tokens: TokenizerTokens) -> None:
    q = query(tokens, TEXTS)
    scores = asyncio.run(MeanLogprob().score(q))
    assert scores == [
        pytest.approx(-1.5 / len(q.samples[0].token_ids)),
        pytest.approx(-3.0 / len(q.samples[1].token_ids)),
    ]


def test_reward_sequence_is_the_rendered_turn(tokens: TokenizerTokens) -> None:
    """prompt + response + ``<|im_end|>\\n``, with or without the sample's own EOS: the
    text the testbed reward model was trained on (``testbed.engine.reward_text``)."""
    from testbed.engine import reward_text
    from testbed.task import Question

    q = query(tokens, TEXTS)
    scorer = RewardModelScorer(object(), turn_end=chatml_turn_end(tokens))  # type: ignore[arg-type]
    question = Question.from_expr("1+2")
    for sample, text in zip(q.samples, TEXTS, strict=True):
        expected = tokens.encode(reward_text(question, text))
        assert list(scorer.sequence(q, sample)) == expected


def test_reward_sequence_fits_the_reward_context(tokens: TokenizerTokens) -> None:
    q = query(tokens, TEXTS)
    end = chatml_turn_end(tokens)
    limit = len(q.prompt_token_ids) + 5 + len(end)
    scorer = RewardModelScorer(object(), turn_end=end, max_len=limit)  # type: ignore[arg-type]
    seq = scorer.sequence(q, q.samples[0])
    assert len(seq) == limit
    assert seq == q.prompt_token_ids + q.samples[0].token_ids[:5] + end


def test_a_prompt_past_the_reward_context_is_the_requests_400(tokens: TokenizerTokens) -> None:
    # A generator served longer than its reward model (the default server): a clear 400.
    q = query(tokens, TEXTS)
    end = chatml_turn_end(tokens)
    scorer = RewardModelScorer(object(), turn_end=end, max_len=len(q.prompt_token_ids))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="the reward model reads"):
        scorer.sequence(q, q.samples[0])


def _verifier(url: str, *, timeout_s: float) -> VerifierScorer:
    return VerifierScorer(VerifierClient(url, timeout_s=timeout_s))


def test_verifier_round_trip(tokens: TokenizerTokens, http_server: Any) -> None:
    url = http_server(lambda body: (200, {"scores": [len(r) for r in body["responses"]]}))
    verifier = VerifierScorer(VerifierClient(url + "/verify", timeout_s=5))
    scores = asyncio.run(verifier.score(query(tokens, TEXTS)))
    path, body = http_server.bodies[-1]
    assert path == "/verify"
    assert body["responses"] == ["\\boxed{3}", "\\boxed{4}"]  # answers, special tokens out
    assert body["reasoning"] == ["1+2=3\n", "1+2=4\n"]
    assert "Compute 1+2 mod 10." in body["prompt"]
    assert scores == [9.0, 9.0]


@pytest.mark.parametrize(
    ("status", "answer", "error"),
    [
        (500, {"detail": "boom"}, BackendError),
        (200, {"scores": [1.0]}, BackendError),  # one score for two responses
        (200, {"scores": [1.0, "high"]}, BackendError),
        (200, {"scores": [1.0, float("nan")]}, BackendError),
        (200, b"not json", BackendError),
    ],
)
def test_verifier_failures_are_backend_errors(
    tokens: TokenizerTokens, http_server: Any, status: int, answer: object, error: type
) -> None:
    url = http_server(lambda body: (status, answer))
    with pytest.raises(error):
        asyncio.run(_verifier(url, timeout_s=5).score(query(tokens, TEXTS)))


def test_verifier_timeout_and_unreachable(tokens: TokenizerTokens, http_server: Any) -> None:
    def slow(body: dict[str, Any]) -> tuple[int, object]:
        time.sleep(1.0)
        return 200, {"scores": [0, 0]}

    url = http_server(slow)
    with pytest.raises(BackendTimeout):
        asyncio.run(_verifier(url, timeout_s=0.2).score(query(tokens, TEXTS)))
    with pytest.raises(BackendUnavailable):
        asyncio.run(_verifier("http://127.0.0.1:9", timeout_s=2).score(query(tokens, TEXTS)))


def test_remote_classify_reads_raw_logits_in_input_order(
    tokens: TokenizerTokens, http_server: Any
) -> None:
    def classify(body: dict[str, Any]) -> tuple[int, object]:
        rows = [
            {"index": i, "label": "LABEL_0", "probs": [float(len(ids))], "num_classes": 1}
            for i, ids in enumerate(body["input"])
        ]
        return 200, {"data": list(reversed(rows))}  # out of order on purpose

    url = http_server(classify)
    remote = RemoteClassify(url, model="rm", timeout_s=5)
    scorer = RewardModelScorer(remote, turn_end=chatml_turn_end(tokens))
    q = query(tokens, TEXTS)
    scores = asyncio.run(scorer.score(q))
    path, body = http_server.bodies[-1]
    assert path == "/classify" and body["use_activation"] is False and body["model"] == "rm"
    assert scores == [float(len(scorer.sequence(q, s))) for s in q.samples]


def test_scorer_set_default() -> None:
    assert ScorerSet.build(MeanLogprob()).default == "logprob"
    assert ScorerSet.build().get(None) is None
    with pytest.raises(ValueError):
        ScorerSet.build(MeanLogprob(), default="reward")
