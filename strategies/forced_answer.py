"""A forced answer always comes: a sample held to a grammar that ends inside its thinking
is given its answer (:class:`ForcedAnswers`).

vLLM holds an answer to its grammar (a forced ``tool_choice``, a ``response_format``)
only once its reasoning parser has seen thinking end. A sample that draws EOS while it
still thinks therefore ends with no answer at all: no call, no JSON (about 1 request in
20 on the testbed). :class:`ForcedAnswers` wraps the engine a request's strategy sees;
when a grammar-bound sample ends with the model's own EOS before ``</think>``, its
thinking is kept (the EOS dropped), closed with the end delimiter, and the answer is
drawn under the grammar in one more call: prompt + thinking + ``</think>``, a prompt
whose reasoning has ended, so vLLM's grammar holds from its first token.

Why a continuation, not a logits processor that keeps such a sample from drawing EOS
while it thinks: it is the same on every engine (in process, or a remote vLLM server
started without our processors) and for every strategy's calls, with no kernel or
engine change, and it costs nothing for the samples that close their thinking
themselves; the few that do not pay one more call, whose prefill the prefix cache
mostly holds. The answer is the model's own after closing its thought where it wanted
to stop, as elastic's two-pass mode already draws it. A sample that ends by length or
a budget, or on a client's stop sequence, is left as it is: its finish reason says so.
So is one with no room left for an answer (``max_tokens`` or the context spent): it is
reported as cut (``length``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace

from core.allowance import BudgetSpent
from core.engine import (
    Engine,
    EngineLoad,
    ExtraArg,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    TokenLogprob,
)
from kernels.confidence import args as confidence_args
from kernels.elastic import args as elastic_args
from kernels.guidance import args as guidance_args
from strategies.reasoning import thinking_open_after


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A grammar-bound sample that ended inside its thinking, and how it goes on."""

    index: int
    sampled: int  # its tokens kept (the EOS it ended with dropped)
    closing: tuple[int, ...]  # the end delimiter's tokens added after them (not sampled)
    call: GenerateRequest | None  # its answer's call; None: no room left for one


def forced(request: GenerateRequest) -> bool:
    """Whether ``request``'s answers are held to a grammar (and may end unanswered).
    DeepConf's stopping processor ends a trace with EOS on purpose: not continued."""
    return (
        request.sampling.structured is not None
        and not request.thinking_only
        and confidence_args.THRESHOLD not in request.sampling.extra_args
    )


def unanswered(
    request: GenerateRequest,
    index: int,
    token_ids: Sequence[int],
    stop_reason: int | str | None,
    tokens: ModelTokens,
    max_model_len: int,
) -> Unanswered | None:
    """What becomes of sample ``index`` of a forced ``request``, which ended with
    ``finish_reason`` stop after ``token_ids``: None when it needs nothing (it closed its
    thinking, or a client's stop ended it)."""
    eos = tokens.eos_token_ids
    if stop_reason is not None and stop_reason not in eos:
        return None  # the client's stop string or token: where the client wanted it to end
    kept = list(token_ids)
    while kept and kept[-1] in eos:
        kept.pop()
    prompt = request.prompt_token_ids
    if not thinking_open_after((*prompt, *kept), tokens):
        return None
    end = tokens.think_end_ids
    # A delimiter of several tokens the sample had begun: only the rest is added.
    begun = next(
        (k for k in range(min(len(end) - 1, len(kept)), 0, -1) if kept[-k:] == list(end[:k])), 0
    )
    closing = tuple(end[begun:])
    so_far = len(kept) + len(closing)
    s = request.sampling
    room = max_model_len - len(prompt) - so_far
    if s.max_tokens is not None:
        room = min(room, s.max_tokens - so_far)
    if room <= 0:
        return Unanswered(index, len(kept), closing, None)
    call = replace(
        request,
        request_id=f"{request.request_id}-answer-{index}",
        prompt_token_ids=(*prompt, *kept, *closing),
        sampling=replace(
            s,
            n=1,
            seed=None if s.seed is None else s.seed + index,  # child j of n drew with seed + j
            max_tokens=room if s.max_tokens is not None else None,
            min_tokens=max(0, s.min_tokens - so_far),
            prompt_logprobs=None,  # the sample's own call returned the prompt's
            extra_args=answering(s.extra_args),
        ),
    )
    return Unanswered(index, len(kept), closing, call)


def answering(extra: Mapping[str, ExtraArg]) -> dict[str, ExtraArg]:
    """Our processors' arguments for a call whose prompt has closed its thinking: they
    start in the answer phase (a solution budget still counts from its first token)."""
    out = dict(extra)
    if elastic_args.THINKING_BUDGET in out:
        out[elastic_args.THINKING_OPEN] = 0
    if guidance_args.BUDGET in out:
        out[guidance_args.THINKING_OPEN] = 0
    return out


def _forced_logprobs(ids: Sequence[int]) -> tuple[TokenLogprob, ...]:
    """The added end delimiter's logprobs: not sampled, it had to come (probability 1)."""
    return tuple(TokenLogprob(token_id=t, logprob=0.0) for t in ids)


def joined(first: Sample, gap: Unanswered, answer: Sample | None) -> Sample:
    """Sample ``first`` with its answer: its thinking, the end delimiter, ``answer``'s
    tokens. No answer (no room, or the request's ceiling or deadline refused the call):
    ``first`` as it came, reported as cut."""
    if answer is None:
        return replace(first, finish_reason="length", stop_reason=None)
    n = gap.sampled
    logprobs = None
    if first.logprobs is not None and answer.logprobs is not None:
        logprobs = (*first.logprobs[:n], *_forced_logprobs(gap.closing), *answer.logprobs)
    cumulative = None
    if first.cumulative_logprob is not None and answer.cumulative_logprob is not None:
        cumulative = first.cumulative_logprob + answer.cumulative_logprob
    return replace(
        first,
        token_ids=(*first.token_ids[:n], *gap.closing, *answer.token_ids),
        finish_reason=answer.finish_reason,
        stop_reason=answer.stop_reason,
        cumulative_logprob=cumulative,
        # Confidences survive a cut, not an injection (the end was never sampled), as in
        # elastic's two-pass mode: a sample with one gets none.
        confidences=None,
        logprobs=logprobs,
    )


class ForcedAnswers:
    """``engine`` (the ``Engine`` protocol) whose grammar-bound samples always answer
    (the module's doc). Calls without a grammar pass straight through."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.model_name: str = engine.model_name
        self.tokens: ModelTokens = engine.tokens

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def processors(self) -> frozenset[str]:
        return self._engine.processors

    def load(self) -> EngineLoad | None:
        return self._engine.load()

    async def health(self) -> None:
        await self._engine.health()

    async def aclose(self) -> None:
        await self._engine.aclose()

    def _gap(self, request: GenerateRequest, s: Sample) -> Unanswered | None:
        if s.finish_reason != "stop":
            return None
        return unanswered(
            request, s.index, s.token_ids, s.stop_reason, self.tokens, self.max_model_len
        )

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        return (await self._answered([request], [await self._engine.generate(request)]))[0]

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        return await self._answered(requests, await self._engine.generate_batch(requests))

    async def _answered(
        self, requests: Sequence[GenerateRequest], results: list[list[Sample]]
    ) -> list[list[Sample]]:
        """``results`` with every unanswered sample of a forced request answered."""
        gaps = [
            (r, i, gap)
            for r, (request, samples) in enumerate(zip(requests, results, strict=True))
            if forced(request)
            for i, s in enumerate(samples)
            if (gap := self._gap(request, s)) is not None
        ]
        calls = [g.call for _, _, g in gaps if g.call is not None]
        answers = iter(await self._answers(calls))
        for r, i, gap in gaps:
            answer = next(answers) if gap.call is not None else None
            results[r][i] = joined(results[r][i], gap, answer)
        return results

    async def _answers(self, calls: Sequence[GenerateRequest]) -> list[Sample | None]:
        """Each call's one sample; None for each when the request's ceiling or deadline
        leaves no room for them (``BudgetSpent``: the samples are reported as cut)."""
        if not calls:
            return []
        try:
            if len(calls) == 1:
                return [(await self._engine.generate(calls[0]))[0]]
            return [got[0] for got in await self._engine.generate_batch(calls)]
        except BudgetSpent:
            return [None] * len(calls)

    def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        if not forced(request):
            return self._engine.stream(request)  # no extra hop per token
        return self._stream(request)

    async def _stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        """The call's deltas; a sample that ended inside its thinking gets its closing
        delimiter in place of its EOS, then its answer's deltas, as they come, beside
        the call's other samples."""
        queue: asyncio.Queue[SampleDelta | BaseException | None] = asyncio.Queue()
        answers: list[asyncio.Task[None]] = []
        seen: dict[int, list[int]] = {}
        ended = 0  # answer streams that have ended
        try:
            async with aclosing(self._engine.stream(request)) as deltas:
                async for d in deltas:
                    ids = seen.setdefault(d.index, [])
                    if d.redrawn:
                        ids.clear()
                    ids.extend(d.token_ids)
                    if d.finish_reason == "stop":
                        gap = unanswered(
                            request, d.index, ids, d.stop_reason, self.tokens, self.max_model_len
                        )
                        if gap is not None:
                            d = self._closed(d, gap, len(ids))
                            if gap.call is not None:
                                answers.append(
                                    asyncio.create_task(self._pump(gap.call, d.index, queue))
                                )
                    yield d
                    while not queue.empty():
                        item = queue.get_nowait()
                        ended += item is None
                        if item is not None:
                            yield _raised(item)
            while ended < len(answers):
                item = await queue.get()
                ended += item is None
                if item is not None:
                    yield _raised(item)
        finally:
            for task in answers:
                task.cancel()
            await asyncio.gather(*answers, return_exceptions=True)

    def _closed(self, d: SampleDelta, gap: Unanswered, total: int) -> SampleDelta:
        """The last delta of a sample that ended inside its thinking: its EOS (the tail
        of this delta past the kept tokens) dropped, the end delimiter added; finished
        only when no answer follows (cut: no room)."""
        keep = max(0, len(d.token_ids) - (total - gap.sampled))
        if gap.call is None:
            return replace(d, finish_reason="length", stop_reason=None)
        logprobs = None
        if d.logprobs is not None:
            logprobs = (*d.logprobs[:keep], *_forced_logprobs(gap.closing))
        return replace(
            d,
            token_ids=(*d.token_ids[:keep], *gap.closing),
            finish_reason=None,
            stop_reason=None,
            cumulative_logprob=None,
            confidences=None,
            logprobs=logprobs,
        )

    async def _pump(
        self,
        call: GenerateRequest,
        index: int,
        queue: asyncio.Queue[SampleDelta | BaseException | None],
    ) -> None:
        """Answer ``call``'s deltas into ``queue`` as sample ``index``'s, then None; its
        failure goes there too (the consumer raises it), and a call that the request's
        ceiling or deadline refuses ends the sample as cut."""
        try:
            async with aclosing(self._engine.stream(call)) as deltas:
                async for d in deltas:
                    await queue.put(replace(d, index=index))
        except BudgetSpent:
            queue.put_nowait(SampleDelta(index=index, token_ids=(), finish_reason="length"))
        except Exception as e:  # noqa: BLE001 (handed to the consumer, which raises it)
            queue.put_nowait(e)
        finally:
            queue.put_nowait(None)  # unbounded: never waits, also when cancelled


def _raised(item: SampleDelta | BaseException) -> SampleDelta:
    if isinstance(item, BaseException):
        raise item
    return item
