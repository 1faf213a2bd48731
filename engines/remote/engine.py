"""``RemoteEngine``: vLLM's own OpenAI servers generate; the gateway keeps the rest.

Token ids in, token ids out (``remote_wire``): the tokenizer, chat template, think
tokens and decoding stay here, so strategies see the same ``Engine`` as locally.

* One URL: a router the team already runs (llm-d, vLLM data parallel, Dynamo) or a
  single replica; placement is its business.
* Several URLs: this engine spreads calls (``balancer``: prompt-prefix affinity, then
  least outstanding samples), health-checks every server, ejects one that fails and
  re-admits it once it verifies again (``upstream.verify``).
* Failover: a call that fails before its first token (connection refused or dropped,
  a 5xx) is placed again (``retries`` times): on another server, or with one URL
  through the router again after a pause. A stream that fails after tokens arrived:
  the unfinished samples are drawn again when the caller has not shown them to the
  client (``GenerateRequest.visible`` False: sample pools, non-streamed answers);
  otherwise ``UpstreamError`` (502: the client gets an error frame, never a hang).
* The sole route (one URL) is never ejected by a failed call: its health check reads
  what the router publishes (``/readiness`` where it has one, else ``/health``).
* Cancellation: cancelling the consumer closes the upstream connection; vLLM aborts
  the request when its client goes away (``with_cancellation`` / streaming disconnect).
* Processors: ``processors`` is what every admitted server has loaded, so a strategy
  that needs one never lands on a server without it (a call carrying a processor's
  arguments is only placed on servers that have it, for the race with re-admission).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Final, TypeVar

import httpx
import structlog

from core.engine import EngineLoad, GenerateRequest, ModelTokens, Sample, SampleDelta, all_of
from core.errors import BackendUnavailable, GatewayError, UpstreamError
from engines.calls import AiohttpCalls, Calls, HttpxCalls, Timeouts, Transport
from engines.remote import joint
from engines.remote.balancer import PrefixIndex, block_hashes, choose
from engines.remote.health import FleetHealth
from engines.remote.server_call import UpstreamFailed, generate_on, joint_on, stream_on
from engines.remote.upstream import ServerFacts, Upstream, probe_text
from engines.settings import EngineSettings, RemoteEngineSettings
from engines.tokens import TokenizerTokens
from kernels.processors import wanted_by

log = structlog.get_logger("thinkgate.remote")
T = TypeVar("T")

RETRY_PAUSE_S: Final = 0.25  # before placing a failed call again where it failed
RETRY_PAUSE_MAX_S: Final = 2.0


class RemoteEngine(FleetHealth):
    """The ``Engine`` protocol over one or more vLLM OpenAI servers (admission and
    health checks: ``FleetHealth``; one call on one server: ``server_call``)."""

    def __init__(
        self,
        settings: RemoteEngineSettings,
        *,
        model_name: str,
        tokens: ModelTokens,
        probe: str,
        client: httpx.AsyncClient,
        calls: Calls | None = None,
    ) -> None:
        self._settings = settings
        self.model_name = model_name
        self.tokens = tokens
        self._probe = probe
        self._client = client  # health checks and verification
        # Generation calls, many at once: aiohttp's cheap calls (engines/calls.py).
        self._calls = calls or HttpxCalls(client)
        self.upstreams = [Upstream(url=url) for url in settings.urls]
        self._reference: ServerFacts | None = None
        self._prefixes = PrefixIndex()
        self._watcher: asyncio.Task[None] | None = None
        self.failovers = 0
        self.redraws = 0  # samples drawn again after their server failed mid-way

    # --- life cycle

    @classmethod
    async def start(cls, settings: EngineSettings) -> RemoteEngine:
        """Verify the servers; raises if one serves something else, or none answers in
        ``remote_start_timeout_s``. Servers not up yet are admitted when they verify."""
        tokens = TokenizerTokens.for_settings(settings)
        remote = settings.remote
        transport = Transport(ca_bundle=remote.ca_bundle, headers=remote.headers)
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=remote.connect_timeout_s),
            verify=transport.ssl_context() or True,
            headers=dict(remote.headers),
        )
        engine = cls(
            remote,
            model_name=settings.model_name,
            tokens=tokens,
            probe=probe_text(tokens, settings.think_start, settings.think_end),
            client=client,
            calls=AiohttpCalls(Timeouts(connect=remote.connect_timeout_s, read=None), transport),
        )
        try:
            await engine._first_admission()
        except BaseException:
            await engine.aclose()
            raise
        engine._watcher = asyncio.get_running_loop().create_task(engine._watch())
        return engine

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await self._calls.aclose()
        await self._client.aclose()

    # --- what strategies and routes read

    @property
    def processors(self) -> frozenset[str]:
        """Processors loaded on every admitted server (empty when none is up)."""
        sets = [u.facts.processors for u in self.upstreams if u.state == "up" and u.facts]
        return frozenset.intersection(*sets) if sets else frozenset()

    @property
    def max_model_len(self) -> int:
        ref = self._reference
        return ref.max_model_len if ref is not None else 0

    def servers(self) -> list[dict[str, Any]]:
        """Per-server state for ``/ready`` and ``/metrics``."""
        return [u.status() for u in self.upstreams]

    def load(self) -> EngineLoad | None:
        """This gateway's samples in flight on its admitted servers against their rows
        (``--remote-server-rows`` each: vLLM does not publish its ``max_num_seqs``)."""
        up = [u for u in self.upstreams if u.state == "up"]
        if not up:
            return None
        rows = self._settings.server_rows * len(up)
        busy = sum(u.outstanding_samples for u in up)
        return EngineLoad(rows=rows, busy=busy, waiting=max(0, busy - rows))

    def num_unfinished(self) -> int:
        """Calls this gateway has running on its servers."""
        return sum(u.outstanding_requests for u in self.upstreams)

    async def health(self) -> None:
        if not any(u.state == "up" for u in self.upstreams):
            states = ", ".join(f"{u.url} {u.state}" for u in self.upstreams)
            raise BackendUnavailable(f"no vLLM server is up ({states})")

    # --- Engine protocol

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        return await self._retried(request, partial(generate_on, self._calls))

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        """Requests that can share a call go as one ``/v1/completions`` call with all
        their prompts (``joint``); placed, leased and retried as one request."""
        if not self._settings.joint_calls:
            return await all_of(self.generate(r) for r in requests)
        groups = joint.calls(requests, self.max_model_len)
        got = await all_of(self._joint(requests, group) for group in groups)
        out: list[list[Sample]] = [[] for _ in requests]
        for group, samples_ in zip(groups, got, strict=True):
            for i, one in zip(group.members, samples_, strict=True):
                out[i] = one
        return out

    async def _joint(
        self, requests: Sequence[GenerateRequest], group: joint.Group
    ) -> list[list[Sample]]:
        parts = [requests[i] for i in group.members]
        if len(parts) == 1:
            return [await self.generate(parts[0])]
        call = joint.JointCall.of(parts, group.max_tokens)

        async def on(up: Upstream, lead: GenerateRequest) -> list[list[Sample]]:
            return await joint_on(self._calls, up, lead, call)

        return await self._retried(call.lead(), on)

    async def _retried(
        self, request: GenerateRequest, call: Callable[[Upstream, GenerateRequest], Awaitable[T]]
    ) -> T:
        """``call`` on the best server, placed again on a failure the server caused."""
        last: UpstreamFailed | None = None
        tried: set[str] = set()
        for attempt in range(1 + self._settings.retries):
            up = await self._place(request, tried, attempt)
            if up is None:
                break
            try:
                async with self._lease(up, request):
                    return await call(up, _rekeyed(request, attempt))
            except UpstreamFailed as exc:
                self._failed(up, exc)
                tried.add(up.url)
                last = exc
        raise self._exhausted(request, last)

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        """Deltas of ``request``'s samples. A server that fails before any token of the
        call arrived: the call is placed again. One that fails later: on a ``visible``
        stream the error ends it (the client saw tokens a retry would contradict); on
        one that is not, the unfinished samples are drawn again (``SampleDelta.redrawn``
        first, then their fresh deltas), the finished ones kept."""
        n = request.sampling.n
        todo = list(range(n))  # the caller's indices of the samples not finished yet
        part = request
        last: UpstreamFailed | None = None
        tried: set[str] = set()
        redraws = 0
        for attempt in range(1 + self._settings.retries):
            up = await self._place(part, tried, attempt)
            if up is None:
                break
            got = [0] * len(todo)  # tokens received per sample of this call
            arrived = False
            finished: set[int] = set()
            try:
                # aclosing: a consumer that stops early must close the upstream call now
                # (vLLM aborts when the connection goes), not whenever the GC runs.
                async with (
                    self._lease(up, part),
                    contextlib.aclosing(
                        stream_on(self._calls, up, _rekeyed(part, attempt))
                    ) as deltas_,
                ):
                    async for delta in deltas_:
                        arrived = True
                        got[delta.index] += len(delta.token_ids)
                        if delta.finish_reason is not None:
                            finished.add(delta.index)
                        yield delta if part is request else replace(delta, index=todo[delta.index])
                return
            except UpstreamFailed as exc:
                self._failed(up, exc)
                tried.add(up.url)
                last = exc
                if not arrived:
                    continue  # nothing arrived: place the same call again
                if request.visible:
                    # Tokens already reached the client: a retry would contradict them.
                    raise UpstreamError(
                        f"{exc.error.message} (after the stream had started; streamed "
                        "tokens cannot be taken back)"
                    ) from exc
            # Not visible: keep what finished, draw the rest again.
            lost = [(todo[j], got[j]) for j in range(len(todo)) if j not in finished]
            if not lost:
                return  # every sample had finished: the failure took nothing with it
            for index, tokens in lost:
                yield SampleDelta(index=index, token_ids=(), redrawn=True, lost_tokens=tokens)
            todo = [index for index, _ in lost]
            redraws += 1
            part = self._redraw(request, todo, redraws)
            self.redraws += len(todo)
            log.warning(
                "remote.redraw", request_id=request.request_id, samples=len(todo), server=up.url
            )
        raise self._exhausted(request, last)

    def _redraw(
        self, request: GenerateRequest, todo: Sequence[int], round_: int
    ) -> GenerateRequest:
        """The call drawing ``todo`` (the caller's indices) again: ``n = len(todo)``; a
        seeded request starts its seeds at the first lost index's (vLLM gives child ``j``
        ``seed + j``: a contiguous tail of lost samples is drawn exactly as before)."""
        sampling = request.sampling
        seed = None if sampling.seed is None else sampling.seed + todo[0]
        return replace(
            request,
            request_id=f"{request.request_id}-redraw{round_}",
            sampling=replace(sampling, n=len(todo), seed=seed),
        )

    async def _place(
        self, request: GenerateRequest, tried: set[str], attempt: int
    ) -> Upstream | None:
        """The server for a call's next attempt: the best one not tried yet; once every
        candidate failed (always, with one URL: a router places the call again itself),
        a tried one after a pause. None: no candidate at all."""
        up = self._pick(request, tried)
        if up is not None or attempt == 0:
            return up
        up = self._pick(request, set())
        if up is not None:
            await asyncio.sleep(min(RETRY_PAUSE_S * 2 ** (attempt - 1), RETRY_PAUSE_MAX_S))
        return up

    def _failed(self, up: Upstream, exc: UpstreamFailed) -> None:
        up.failures += 1
        up.last_error = exc.error.message
        self.failovers += 1
        # The only route to the fleet (a router, or one replica) is never ejected by a
        # failed call: its health check decides (what the router publishes about its
        # workers); ejecting it would turn one lost call into minutes of 503s.
        if exc.eject and not self.sole:
            self._eject(up, exc.error.message)

    def _exhausted(self, request: GenerateRequest, last: UpstreamFailed | None) -> GatewayError:
        if last is not None:
            return last.error
        need = wanted_by(request.sampling.extra_args)
        if need:
            return BackendUnavailable(
                f"no vLLM server with the {', '.join(sorted(need))} processor is up"
            )
        return BackendUnavailable("no vLLM server is up")

    def _pick(self, request: GenerateRequest, exclude: set[str]) -> Upstream | None:
        need = wanted_by(request.sampling.extra_args)
        ready = [
            u
            for u in self.upstreams
            if u.state == "up" and u.facts and need <= u.facts.processors and u.url not in exclude
        ]
        if not ready:
            return None
        if len(ready) == 1:
            return ready[0]
        hashes = block_hashes(request.prompt_token_ids)
        urls = [u.url for u in ready]
        best = choose(
            urls,
            {u.url: u.outstanding_samples for u in ready},
            {u.url: self._prefixes.cached_tokens(hashes, u.url) for u in ready},
        )
        self._prefixes.record(hashes, best)
        return next(u for u in ready if u.url == best)

    @contextlib.asynccontextmanager
    async def _lease(self, up: Upstream, request: GenerateRequest) -> AsyncIterator[None]:
        n = request.sampling.n
        up.outstanding_samples += n
        up.outstanding_requests += 1
        up.requests += 1
        try:
            yield
        finally:
            up.outstanding_samples -= n
            up.outstanding_requests -= 1


def _rekeyed(request: GenerateRequest, attempt: int) -> GenerateRequest:
    """The call for a retry: a fresh affinity key, so that a router hashing the key does
    not place it on the replica that just failed it (it keeps doing so until its own
    health check marks that replica down, a minute or more by default)."""
    if attempt == 0 or not request.affinity:
        return request
    return replace(request, affinity=f"{request.affinity}-retry{attempt}")
