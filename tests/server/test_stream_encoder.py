"""Strategy events -> SSE frames, as the OpenAI SDK reads them (pure, no engine)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, cast

import orjson

from core.base import Choice, ChoiceDelta, Progress, Result, StrategyEvent, Usage
from core.budget import Budget
from core.errors import BackendUnavailable
from server.apis.openai.render import Envelope
from server.pipeline.streaming import StreamEncoder

USAGE = Usage(prompt_tokens=10, completion_tokens=30, reasoning_tokens=20)


def _env(kind: str = "chat") -> Envelope:
    return Envelope.new(kind, "r1", "m", "self-consistency", Budget(samples=4))  # type: ignore[arg-type]


def _frames(frames: list[bytes]) -> list[object]:
    out: list[object] = []
    for f in frames:
        assert f.endswith(b"\n\n") and f.count(b"\n") == 2
        if f.startswith(b": "):
            name, _, payload = f[2:-2].partition(b" ")
            out.append((name.decode(), orjson.loads(payload)))
        else:
            assert f.startswith(b"data: ")
            out.append(orjson.loads(f[6:-2]))
    return out


def test_multi_sample_progress_then_replayed_choices() -> None:
    enc = StreamEncoder(_env(), include_usage=True)
    progress = _frames(enc.encode(Progress(data={"drawn": 2, "of": 4})))
    assert progress == [("thinkgate.progress", {"drawn": 2, "of": 4})]
    final = Result(
        choices=(
            Choice(index=1, reasoning="r1", content="c1", finish_reason="length"),
            Choice(index=0, reasoning="r0", content="c0", finish_reason="stop", info={"votes": 3}),
        ),
        usage=USAGE,
        samples=4,
        info={"votes": {"7": 3}},
    )
    chunks = _frames(enc.encode(final))
    assert all(isinstance(c, dict) and c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [(c["choices"][0]["index"], c["choices"][0]["delta"]) for c in chunks[:6]]  # type: ignore[index]
    assert deltas == [
        (0, {"role": "assistant", "content": ""}),
        (0, {"reasoning_content": "r0", "reasoning": "r0"}),
        (0, {"content": "c0"}),
        (1, {"role": "assistant", "content": ""}),
        (1, {"reasoning_content": "r1", "reasoning": "r1"}),
        (1, {"content": "c1"}),
    ]
    finish0, finish1, usage = chunks[6:]
    assert finish0["choices"][0]["finish_reason"] == "stop"  # type: ignore[index]
    assert finish0["choices"][0]["thinkgate"] == {"votes": 3}  # type: ignore[index]
    assert "thinkgate" not in finish0  # type: ignore[operator]
    assert finish1["choices"][0]["finish_reason"] == "length"  # type: ignore[index]
    assert finish1["thinkgate"] == {  # type: ignore[index]
        "strategy": "self-consistency",
        "samples": 4,
        "budget": {
            "thinking": None,
            "solution": None,
            "samples": 4,
            "k": None,
            "tokens": None,
            "deadline_ms": None,
            "thinking_min": None,
        },
        "votes": {"7": 3},
    }
    assert usage["choices"] == []  # type: ignore[index]
    assert usage["usage"]["completion_tokens_details"] == {"reasoning_tokens": 20}  # type: ignore[index]
    assert usage["usage"]["total_tokens"] == 40  # type: ignore[index]


def test_live_deltas_are_not_replayed_and_finish_waits_for_final() -> None:
    enc = StreamEncoder(_env(), include_usage=False)
    first = _frames(enc.encode(ChoiceDelta(index=0, reasoning="thin")))
    assert [c["choices"][0]["delta"] for c in first] == [  # type: ignore[index]
        {"role": "assistant", "content": ""},
        {"reasoning_content": "thin", "reasoning": "thin"},
    ]
    last = _frames(enc.encode(ChoiceDelta(index=0, content="ans", finish_reason="stop")))
    assert [c["choices"][0]["delta"] for c in last] == [{"content": "ans"}]  # type: ignore[index]
    assert all(c["choices"][0]["finish_reason"] is None for c in last)  # type: ignore[index]
    final = Result(
        choices=(Choice(index=0, reasoning="thin", content="ans", finish_reason="stop"),),
        usage=USAGE,
        samples=1,
    )
    (end,) = _frames(enc.encode(final))
    assert end["choices"][0] == {  # type: ignore[index]
        "index": 0,
        "delta": {},
        "finish_reason": "stop",
        "logprobs": None,
    }
    assert end["thinkgate"]["samples"] == 1  # type: ignore[index]


def test_a_live_delta_without_text_is_an_empty_chunk() -> None:
    """Tokens with no text yet (a delimiter, EOS) still go out as a chunk, as vLLM's
    server sends one per engine output: chat an empty delta, completions empty text."""
    chat = StreamEncoder(_env(), include_usage=False)
    first = _frames(chat.encode(ChoiceDelta(index=0)))
    later = _frames(chat.encode(ChoiceDelta(index=0)))
    assert [c["choices"][0]["delta"] for c in first] == [{"role": "assistant", "content": ""}]  # type: ignore[index]
    assert [c["choices"][0]["delta"] for c in later] == [{}]  # type: ignore[index]
    completions = StreamEncoder(_env("completion"), include_usage=False)
    (empty,) = _frames(completions.encode(ChoiceDelta(index=0)))
    assert empty["choices"][0]["text"] == ""  # type: ignore[index]
    assert empty["choices"][0]["finish_reason"] is None  # type: ignore[index]
    assert "reasoning_content" not in empty["choices"][0]  # type: ignore[operator, index]


def test_continuous_usage_counts_live_tokens_on_every_chunk() -> None:
    """vLLM's continuous_usage_stats: each chunk carries the usage so far; live chunks the
    tokens generated until then over every choice, the final chunks the result's usage."""
    enc = StreamEncoder(_env(), include_usage=True, continuous_usage=True, prompt_tokens=10)
    first = _frames(enc.encode(ChoiceDelta(index=0, reasoning="a", completion_tokens=3)))
    other = _frames(enc.encode(ChoiceDelta(index=1, reasoning="b", completion_tokens=2)))
    later = _frames(enc.encode(ChoiceDelta(index=0, content="c", completion_tokens=7)))
    seen = [c["usage"]["completion_tokens"] for c in first + other + later]  # type: ignore[index]
    assert seen == [3, 3, 5, 5, 9]  # role chunks too; choice 1 adds its own 2
    assert later[0]["usage"] == {  # type: ignore[index]
        "prompt_tokens": 10,
        "completion_tokens": 9,
        "total_tokens": 19,
    }
    final = Result(
        choices=(
            Choice(index=0, reasoning="a", content="c", finish_reason="stop"),
            Choice(index=1, reasoning="b", content="", finish_reason="length"),
        ),
        usage=USAGE,
        samples=2,
    )
    ends = _frames(enc.encode(final))
    assert len(ends) == 3  # two finish chunks, then the usage chunk
    assert all(c["usage"]["total_tokens"] == 40 for c in ends)  # type: ignore[index]


def test_without_continuous_usage_only_the_last_chunk_has_usage() -> None:
    enc = StreamEncoder(_env(), include_usage=True, prompt_tokens=10)
    live = _frames(enc.encode(ChoiceDelta(index=0, content="c", completion_tokens=3)))
    final = Result(
        choices=(Choice(index=0, reasoning="", content="c", finish_reason="stop"),),
        usage=USAGE,
        samples=1,
    )
    chunks = live + _frames(enc.encode(final))
    assert ["usage" in c for c in chunks] == [False, False, False, True]  # type: ignore[operator]


def test_continuous_usage_on_replayed_choices_is_the_results() -> None:
    enc = StreamEncoder(_env(), include_usage=True, continuous_usage=True, prompt_tokens=10)
    final = Result(
        choices=(Choice(index=0, reasoning="r", content="c", finish_reason="stop"),),
        usage=USAGE,
        samples=4,
    )
    chunks = _frames(enc.encode(final))
    assert len(chunks) == 5  # role, reasoning, content, finish, usage
    assert all(c["usage"]["completion_tokens"] == 30 for c in chunks)  # type: ignore[index]


def test_completions_chunks_carry_text() -> None:
    enc = StreamEncoder(_env("completion"), include_usage=False)
    (chunk,) = _frames(enc.encode(ChoiceDelta(index=0, content="42")))
    assert chunk["object"] == "text_completion"  # type: ignore[index]
    assert chunk["choices"][0]["text"] == "42"  # type: ignore[index]


async def _events_then_failure() -> AsyncGenerator[StrategyEvent, None]:
    yield ChoiceDelta(index=0, reasoning="a")
    raise BackendUnavailable("engine died")


def _gateway(**settings: Any) -> Any:
    from core.base import Resources
    from core.registry import Registry
    from server.gateway import Gateway
    from server.process.lifecycle import Lifecycle
    from server.process.metrics import Metrics
    from server.settings import Settings
    from server.tenancy.admission import Admission

    metrics = Metrics()
    return Gateway(
        settings=Settings(**settings),
        engine=cast(Any, None),  # never called: the events below stand in for a strategy
        registry=Registry(),
        resources=Resources(),
        metrics=metrics,
        admission=Admission(max_requests=1, max_samples=1, retry_after_s=1, metrics=metrics),
        lifecycle=Lifecycle(drain_timeout_s=0, retry_after_s=1),
        started_at=0,
    )


def _split(blob: bytes) -> list[bytes]:
    return [part + b"\n\n" for part in blob.split(b"\n\n") if part]


async def _body(
    gw: Any,
    events: AsyncGenerator[StrategyEvent, None],
    ended: list[bool],
    *,
    announce: bool = True,
) -> list[bytes]:
    from server.pipeline.streaming import StreamRun, sse_body

    run = StreamRun(
        events,
        StreamEncoder(_env(), include_usage=False),
        strategy="plain",
        aborting=gw.lifecycle.aborting,
    )
    first = await run.next(gw.settings.sse_keepalive_s)
    body = sse_body(
        first=first,
        run=run,
        gw=gw,
        strategy="plain",
        route="/v1/chat/completions",
        request_id="r1",
        started=0.0,
        on_end=lambda _result: ended.append(True),
        announce=announce,
    )
    out = [frame for blob in [b async for b in body] for frame in _split(blob)]
    await run.aclose()
    return out


async def test_failure_after_the_first_byte_is_one_error_frame_then_close() -> None:
    gw = _gateway()
    ended: list[bool] = []
    frames = _frames(await _body(gw, _events_then_failure(), ended))
    assert frames[-1] == {
        "error": {
            "message": "engine died",
            "type": "service_unavailable",
            "param": None,
            "code": "engine_unavailable",
        }
    }
    assert len(frames) == 3  # role, reasoning, error: no [DONE]
    assert ended == [True]
    assert b'thinkgate_aborted_requests_total{reason="error"} 1.0' in gw.metrics.render()


async def _slow_samples(gap_s: float) -> AsyncGenerator[StrategyEvent, None]:
    await asyncio.sleep(gap_s)
    yield Progress(data={"samples_done": 1, "samples": 2})
    await asyncio.sleep(gap_s)
    yield Result(
        choices=(Choice(index=0, reasoning="r", content="c", finish_reason="stop"),),
        usage=USAGE,
        samples=2,
    )


async def test_a_quiet_stream_sends_keep_alive_comments() -> None:
    gw = _gateway(sse_keepalive_s=0.05)
    frames = await _body(gw, _slow_samples(0.18), [])
    # Opened with the admitted comment (nothing came within the wait), then keep-alives
    # through each quiet gap, the progress, the answer and [DONE].
    assert frames[0].startswith(b': thinkgate.progress {"status":"admitted"')
    assert frames.count(b": keep-alive\n\n") >= 4
    assert frames[-1] == b"data: [DONE]\n\n"
    assert any(f.startswith(b': thinkgate.progress {"samples_done"') for f in frames)


async def test_a_live_stream_sends_no_comment_before_its_first_event() -> None:
    # Headers went after the wait; the body starts with the first event itself (vLLM's
    # benchmark client loses a stream whose comment arrives in a read of its own).
    gw = _gateway(sse_keepalive_s=0.15)
    frames = await _body(gw, _slow_samples(0.2), [], announce=False)  # first event late
    assert frames[0].startswith(b': thinkgate.progress {"samples_done"')
    assert not any(b'"admitted"' in f for f in frames)
    assert frames[-1] == b"data: [DONE]\n\n"


async def test_a_busy_stream_sends_no_keep_alive() -> None:
    gw = _gateway(sse_keepalive_s=5.0)
    frames = await _body(gw, _slow_samples(0.01), [])
    assert b": keep-alive\n\n" not in frames


async def test_drain_time_up_ends_a_stream_with_an_error_frame_and_stops_the_strategy() -> None:
    gw = _gateway(sse_keepalive_s=0.05)
    closed: list[bool] = []

    async def forever() -> AsyncGenerator[StrategyEvent, None]:
        try:
            yield ChoiceDelta(index=0, reasoning="a")
            await asyncio.sleep(3600)
            yield ChoiceDelta(index=0, reasoning="never")
        finally:
            closed.append(True)

    asyncio.get_running_loop().call_later(0.2, gw.lifecycle.aborting.set_result, None)
    sent = await _body(gw, forever(), [])
    frames = _frames([f for f in sent if f != b": keep-alive\n\n"])
    assert frames[-1]["error"]["code"] == "shutting_down"  # type: ignore[index]
    assert closed == [True]  # the strategy was closed: its engine requests aborted
    assert b'thinkgate_aborted_requests_total{reason="shutdown"} 1.0' in gw.metrics.render()


async def test_frames_queued_while_the_client_was_written_to_go_in_one_send() -> None:
    from server.pipeline.streaming import StreamRun

    async def burst() -> AsyncGenerator[StrategyEvent, None]:
        for i in range(5):
            yield ChoiceDelta(index=0, content=str(i))
        await asyncio.sleep(3600)
        yield ChoiceDelta(index=0, content="never")

    run = StreamRun(
        burst(),
        StreamEncoder(_env(), include_usage=False),
        strategy="plain",
        aborting=asyncio.get_running_loop().create_future(),
    )
    await asyncio.sleep(0.01)  # the producer queues all five
    blob = await run.next(1.0)
    assert isinstance(blob, bytes)
    assert len(_split(blob)) == 6  # role + five deltas, one send
    await run.aclose()
