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
from typing import Any, Final, TypeVar

import httpx
import orjson
import structlog

from core.engine import EngineLoad, GenerateRequest, ModelTokens, Sample, SampleDelta, all_of
from core.errors import (
    BackendUnavailable,
    GatewayError,
    InvalidRequest,
    UpstreamError,
)
from engines.calls import AiohttpCalls, CallFailed, Calls, HttpxCalls, Timeouts, Transport
from engines.http_errors import transport_error
from engines.remote import joint
from engines.remote.balancer import PrefixIndex, block_hashes, choose
from engines.remote.upstream import ServerFacts, ServerMismatch, Upstream, probe_text, verify
from engines.remote.wire import PATHS, Protocol, body, deltas, samples, upstream_error
from engines.settings import EngineSettings, RemoteEngineSettings
from engines.tokens import TokenizerTokens
from kernels.processors import wanted_by

log = structlog.get_logger("thinkgate.remote")
T = TypeVar("T")

AFFINITY_HEADER: Final = "X-Session-ID"
FAIRNESS_HEADER: Final = "x-llm-d-inference-fairness-id"
OBJECTIVE_HEADER: Final = "x-llm-d-inference-objective"
# A connection that breaks as it opens can surface from httpcore's anyio backend as an
# AttributeError (it reads the peer name of a socket already gone: ``'NoneType' object
# has no attribute 'getpeername'``, seen with a replica SIGKILLed under load): a broken
# connection like any httpx error, not a crash of the health check.
BROKEN: Final = (httpx.HTTPError, AttributeError)
RETRY_PAUSE_S: Final = 0.25  # before placing a failed call again where it failed
RETRY_PAUSE_MAX_S: Final = 2.0


class UpstreamFailed(Exception):
    """A call failed on one server in a way another server may not (retry elsewhere)."""

    def __init__(self, error: GatewayError, *, eject: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.eject = eject


class RemoteEngine:
    """The ``Engine`` protocol over one or more vLLM OpenAI servers."""

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

    @property
    def sole(self) -> bool:
        """One URL: the only route to the fleet (a router, or a single replica)."""
        return len(self.upstreams) == 1

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

    async def _first_admission(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.start_timeout_s
        while True:
            # In URL order, so the first server is the reference the others must match;
            # a mismatch refuses start-up (ServerMismatch propagates), naming the URL.
            for up in self.upstreams:
                if up.state != "up":
                    await self._admit(up, at_start=True)
            if any(u.state == "up" for u in self.upstreams):
                break
            if loop.time() >= deadline:
                errors = "; ".join(f"{u.url}: {u.last_error}" for u in self.upstreams)
                raise RuntimeError(
                    f"no vLLM server answered in {self._settings.start_timeout_s:g} s ({errors})"
                )
            await asyncio.sleep(min(1.0, self._settings.health_interval_s))
        log.info("remote.ready", servers=[u.status() for u in self.upstreams])

    async def _admit(self, up: Upstream, *, at_start: bool = False) -> None:
        """Verify ``up`` and mark it up, or record why not."""
        try:
            facts = await verify(
                self._client,
                up.url,
                tokens=self.tokens,
                probe=self._probe,
                protocol=self._settings.protocol,
                timeout_s=self._settings.connect_timeout_s + 10.0,
            )
            self._check_same(up.url, facts)
        except ServerMismatch as exc:
            repeated = up.state == "mismatch" and up.last_error == str(exc)
            up.set_state("mismatch", str(exc))
            if at_start:
                raise
            if not repeated:  # once per cause, not every health interval
                log.error("remote.mismatch", server=up.url, error=str(exc))
            return
        except httpx.HTTPError as exc:
            up.set_state("down", f"{type(exc).__name__}: {exc}")
            return
        except (KeyError, TypeError, ValueError) as exc:
            # Answers that are not what a vLLM server sends (a proxy's error page...).
            up.set_state("down", f"unexpected answer: {type(exc).__name__}: {exc}")
            return
        was = up.state
        up.facts = facts
        self._prefixes.forget(up.url)  # a server coming (back) up has a cold cache
        up.set_state("up")
        if was != "starting" or not at_start:
            log.info("remote.admitted", server=up.url, was=was, processors=sorted(facts.processors))

    def _check_same(self, url: str, facts: ServerFacts) -> None:
        ref = self._reference
        if ref is None:
            self._reference = facts
            return
        if facts.model_id != ref.model_id or facts.max_model_len != ref.max_model_len:
            raise ServerMismatch(
                f"{url}: serves {facts.model_id!r} with max_model_len {facts.max_model_len}; "
                f"the others serve {ref.model_id!r} with {ref.max_model_len}"
            )

    async def _watch(self) -> None:
        """Health checks: eject a server that stops answering, re-admit one that verifies.

        Nothing a server answers may end this loop: a check that fails unexpectedly is
        logged and the loop goes on (without it no server would ever come back)."""
        while True:
            await asyncio.sleep(self._settings.health_interval_s)
            results = await asyncio.gather(
                *(self._check(u) for u in self.upstreams), return_exceptions=True
            )
            for up, result in zip(self.upstreams, results, strict=True):
                if isinstance(result, Exception):
                    log.error("remote.check_failed", server=up.url, error=repr(result))

    async def _check(self, up: Upstream) -> None:
        if self.sole:
            await self._check_sole(up)
            return
        if up.state != "up":
            await self._admit(up)
            return
        ok, reason = await self._healthy(up, "/health")
        if not ok:
            self._eject(up, reason)

    async def _healthy(self, up: Upstream, path: str) -> tuple[bool, str]:
        try:
            answer = await self._client.get(
                f"{up.url}{path}", timeout=self._settings.connect_timeout_s
            )
        except BROKEN as exc:
            return False, f"{path}: {type(exc).__name__}: {exc}"
        if path == "/readiness":
            up.fleet = _fleet(answer)
        return answer.status_code == 200, f"{path} answered {answer.status_code}"

    async def _check_sole(self, up: Upstream) -> None:
        """The only route: up while it says it can serve. A router's ``/readiness`` (ready
        while one worker is healthy; its ``/health`` turns 503 as soon as any one is not),
        else ``/health`` (one vLLM server). Coming back, it is verified again; a
        verification that cannot finish through a router whose fleet is still settling
        (its ``/v1/models`` placed on a dead worker) keeps the facts it had."""
        if up.health_path is None:
            ok, _ = await self._healthy(up, "/readiness")
            up.health_path = "/readiness" if ok else "/health"
            if not ok:
                up.fleet = None
        ok, reason = await self._healthy(up, up.health_path)
        if up.state == "up":
            if not ok:
                log.warning("remote.not_ready", server=up.url, reason=reason)
                up.set_state("down", reason)
            return
        if not ok:
            up.last_error = reason
            return
        if up.facts is None or up.state == "mismatch":
            await self._admit(up)
            return
        facts = up.facts
        await self._admit(up)
        if up.state == "down":  # verification failed without a mismatch: serve on
            up.facts = facts
            up.set_state("up")
            log.info("remote.admitted", server=up.url, was="down", verified=False)

    def _eject(self, up: Upstream, reason: str) -> None:
        if up.state == "up":
            log.warning("remote.ejected", server=up.url, reason=reason)
            up.set_state("down", reason)

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
        return await self._retried(request, self._generate_on)

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
            return await self._joint_on(up, lead, call)

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
                    contextlib.aclosing(self._stream_on(up, _rekeyed(part, attempt))) as deltas_,
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

    # --- one call on one server

    def _body(
        self,
        up: Upstream,
        request: GenerateRequest,
        *,
        stream: bool,
        protocol: Protocol | None = None,
    ) -> dict[str, Any]:
        assert up.facts is not None
        room = up.facts.max_model_len - len(request.prompt_token_ids)
        if room < 1:
            raise InvalidRequest(
                f"the prompt has {len(request.prompt_token_ids)} tokens; the model's context "
                f"is {up.facts.max_model_len}"
            )
        max_tokens = room if request.sampling.max_tokens is None else request.sampling.max_tokens
        return body(
            protocol or up.facts.protocol,
            request,
            max_tokens=max_tokens,
            upstream_model=up.facts.model_id,
            stream=stream,
        )

    async def _post(
        self, up: Upstream, protocol: Protocol, payload: dict[str, Any], request: GenerateRequest
    ) -> dict[str, Any]:
        """A non-streamed call's answer, read as JSON; raises for a failed status."""
        try:
            answer = await self._calls.post(
                f"{up.url}{PATHS[protocol]}", orjson.dumps(payload), _headers(request)
            )
            data = orjson.loads(answer.content) if answer.content else {}
        except (CallFailed, ValueError) as exc:
            raise _transport_failure(up, exc) from exc
        _raise_for_status(up, answer.status, data)
        return data

    async def _generate_on(self, up: Upstream, request: GenerateRequest) -> list[Sample]:
        assert up.facts is not None
        payload = self._body(up, request, stream=False)
        data = await self._post(up, up.facts.protocol, payload, request)
        s = request.sampling
        return samples(
            up.facts.protocol,
            data,
            s.n,
            top_k=s.top_logprobs,
            client_k=s.token_logprobs,
            prompt=(
                None if s.prompt_logprobs is None else (s.prompt_logprobs, request.prompt_token_ids)
            ),
        )

    async def _joint_on(
        self, up: Upstream, lead: GenerateRequest, call: joint.JointCall
    ) -> list[list[Sample]]:
        # The body of the longest prompt checks that every prompt fits the context.
        longest = replace(
            lead,
            prompt_token_ids=max(call.prompts, key=len),
            sampling=replace(lead.sampling, n=call.n),
        )
        payload = self._body(up, longest, stream=False, protocol="completions")
        payload["prompt"] = [list(p) for p in call.prompts]
        data = await self._post(up, "completions", payload, lead)
        s = lead.sampling
        got = samples(
            "completions", data, call.samples, top_k=s.top_logprobs, client_k=s.token_logprobs
        )
        return call.split(got)

    async def _stream_on(
        self, up: Upstream, request: GenerateRequest
    ) -> AsyncGenerator[SampleDelta, None]:
        assert up.facts is not None
        protocol = up.facts.protocol
        payload = self._body(up, request, stream=True)
        finished: set[int] = set()
        try:
            async with self._calls.stream(
                f"{up.url}{PATHS[protocol]}", orjson.dumps(payload), _headers(request)
            ) as answer:
                if answer.status != 200:
                    raw = await answer.read()
                    _raise_for_status(up, answer.status, _loads(raw))
                async for line in answer.lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    frame = _loads(data.encode())
                    if frame.get("error") is not None:
                        failure = upstream_error(500, frame)
                        if isinstance(failure, InvalidRequest):
                            raise failure  # the request's fault: no server would take it
                        raise UpstreamFailed(failure, eject=False)
                    for delta in deltas(
                        protocol,
                        frame,
                        top_k=request.sampling.top_logprobs,
                        client_k=request.sampling.token_logprobs,
                    ):
                        if delta.finish_reason is not None:
                            finished.add(delta.index)
                        yield delta
        except CallFailed as exc:
            raise _transport_failure(up, exc) from exc
        if len(finished) != request.sampling.n:
            raise UpstreamFailed(
                UpstreamError(
                    f"vLLM server {up.url} ended the stream with {len(finished)} of "
                    f"{request.sampling.n} samples finished"
                ),
                eject=False,
            )


def _fleet(answer: httpx.Response) -> dict[str, int] | None:
    """A router's own view of its workers, from its ``/readiness`` body
    (``{"healthy_workers": n, "total_workers": m}`` from vLLM's router)."""
    try:
        data = answer.json()
        return {
            "healthy_workers": int(data["healthy_workers"]),
            "total_workers": int(data["total_workers"]),
        }
    except (ValueError, KeyError, TypeError):
        return None


def _headers(request: GenerateRequest) -> dict[str, str]:
    """A call's headers: with its affinity key as the session key a router places by
    (vLLM's router: the first of ``X-Session-ID``, ``X-User-ID``... is its
    ``consistent_hash`` / ``sticky_least_loaded`` key; otherwise it hashes the prompt)."""
    headers = {"content-type": "application/json"}
    if request.affinity:
        headers[AFFINITY_HEADER] = request.affinity
    if request.tenant:
        # llm-d's endpoint picker weighs requests by tenant: all samples of one request
        # carry their tenant's id, so a 16-sample request is one tenant, not 16.
        headers[FAIRNESS_HEADER] = request.tenant
    if request.objective:
        # Its objective (an InferenceObjective's name): interactive calls before batch.
        headers[OBJECTIVE_HEADER] = request.objective
    return headers


def _rekeyed(request: GenerateRequest, attempt: int) -> GenerateRequest:
    """The call for a retry: a fresh affinity key, so that a router hashing the key does
    not place it on the replica that just failed it (it keeps doing so until its own
    health check marks that replica down, a minute or more by default)."""
    if attempt == 0 or not request.affinity:
        return request
    return replace(request, affinity=f"{request.affinity}-retry{attempt}")


def _loads(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {"error": {"message": raw[:300].decode(errors="replace")}}
    return value if isinstance(value, dict) else {"data": value}


def _raise_for_status(up: Upstream, status: int, data: dict[str, Any]) -> None:
    if status == 200:
        return
    error = upstream_error(status, data)
    if isinstance(error, InvalidRequest):
        raise error  # the request's fault (whatever the status): no other server would take it
    if status >= 500 or status == 429:
        # The server (not the request) failed: another server may serve it. A 503 is
        # vLLM's dead engine: take the server out until it verifies again.
        raise UpstreamFailed(error, eject=status == 503)
    raise error


def _transport_failure(up: Upstream, exc: Exception) -> UpstreamFailed:
    """A connection that could not open or broke, or an answer that is not JSON: the
    server is gone or going (503, ejected), whatever the wire error's own status."""
    source = f"vLLM server {up.url}"
    if isinstance(exc, CallFailed):
        message = transport_error(source, exc).message
    else:
        message = f"{source} answered with invalid JSON: {exc}"
    return UpstreamFailed(BackendUnavailable(message), eject=True)
