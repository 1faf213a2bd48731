"""``LocalEngine``: vLLM's ``AsyncLLM`` in the gateway process.

One engine request per ``GenerateRequest``: ``n`` samples share the prompt's KV cache.
Cancelling the consumer (client gone, strategy dropped a branch) aborts the request in
the engine; the abort runs in its own task so that a cancel scope that keeps cancelling
its host task (anyio, Starlette) cannot swallow it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import structlog

from core.engine import (
    QUIET_STREAM_INTERVAL,
    EngineLoad,
    FinishReason,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    SamplingConfig,
    StructuredOutput,
    TokenLogprob,
    generate_each,
)
from core.errors import BackendError, BackendUnavailable, InvalidRequest
from engines.local import executor, stopping
from engines.local.context import batched_tokens, served_context
from engines.local.grammar import GRAMMAR_CONFIG
from engines.local.launch import start_async_llm
from engines.local.prefix_cache import block_size
from engines.local.vllm_logprobs import (
    client_logprobs,
    client_prompt_logprobs,
    token_confidences,
)
from engines.settings import EngineSettings
from engines.tokens import TokenizerTokens
from engines.vllm_errors import map_vllm_errors
from kernels.guidance import plugin as bg_plugin
from kernels.processors import Runner, model_setup, spec_for

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

# How long vLLM's engine processes may take to stop before they are killed (a killed one
# leaves its shared memory behind). Measured on the 2-core testbed box: the worker
# leaves about 3 s after its engine core is told, the engine core 2 s after that (with
# vLLM's own 5 s it was still killed now and then). The engines of a gateway stop side
# by side (engines.local.stopping), within the drain's last 7 s.
SHUTDOWN_TIMEOUT_S: Final = 8.0

log = structlog.get_logger("thinkgate.engine")

_FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


def load_processor_classes(specs: tuple[str, ...]) -> list[type[Any]]:
    """Import each ``module:Class`` (fails start-up loudly, naming the bad one)."""
    classes: list[type[Any]] = []
    for spec in specs:
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise RuntimeError(f"logits processor {spec!r} must be 'module:Class'")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise RuntimeError(f"cannot load logits processor {spec!r}: {exc}") from exc
        classes.append(cls)
    return classes


def model_runner(args: AsyncEngineArgs) -> Runner:
    """Which logits-processor interface the engine will use: ``v1`` on CPU (and when
    Model Runner V2 is off or unsupported), ``v2`` otherwise."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return "v1"
    return "v2" if args.create_engine_config().use_v2_model_runner else "v1"


def processor_name(cls: type[Any]) -> str:
    """The short name a processor reports (its ``name`` attribute, else the class name)."""
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) else cls.__name__


class LocalEngine:
    """The ``Engine`` protocol over an in-process ``AsyncLLM``."""

    def __init__(
        self,
        llm: AsyncLLM,
        *,
        model_name: str,
        tokens: TokenizerTokens,
        max_model_len: int,
        processors: frozenset[str],
        rows: int = 64,
    ) -> None:
        self._llm = llm
        self.rows = rows  # vLLM's max_num_seqs: sequences it runs at once
        self._busy = 0  # samples of calls in flight
        self.model_name = model_name
        self.tokens: ModelTokens = tokens
        self.max_model_len = max_model_len
        self.processors = processors
        self._aborts: set[asyncio.Task[None]] = set()
        self.aborted_requests = 0

    @classmethod
    def start(
        cls, settings: EngineSettings, *, tokens: TokenizerTokens | None = None
    ) -> LocalEngine:
        """Build the engine (tens of seconds on CPU); raises if the model cannot serve.
        ``tokens``: the served model's tokenizer, if loaded already."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform

        local = settings.local
        if tokens is None:
            tokens = TokenizerTokens.for_settings(settings)
        extra: dict[str, Any] = {}
        if local.vllm_reasoning_config:
            from vllm.config import ReasoningConfig

            extra["reasoning_config"] = ReasoningConfig(
                reasoning_start_str=settings.think_start, reasoning_end_str=settings.think_end
            )
        from vllm.config import StructuredOutputsConfig

        extra["structured_outputs_config"] = StructuredOutputsConfig(
            **GRAMMAR_CONFIG, reasoning_parser=local.reasoning_parser
        )
        args = AsyncEngineArgs(
            model=settings.model_path,
            served_model_name=[settings.model_name],
            dtype=local.dtype,  # type: ignore[arg-type]
            max_model_len=settings.max_model_len,  # type: ignore[arg-type]  # None: derived, as vLLM's default
            max_num_seqs=local.max_num_seqs,
            # No chunked prefill: a seeded request whose prefill is chunked kills the CPU
            # engine (seen on vLLM 0.32 CPU), so every prefill fits one step.
            enable_chunked_prefill=False,
            block_size=block_size(local.block_size, on_cpu=current_platform.is_cpu()),
            enforce_eager=local.enforce_eager,
            gpu_memory_utilization=local.gpu_memory_utilization,
            tensor_parallel_size=local.tensor_parallel_size,
            distributed_executor_backend=executor.backend(
                local.executor,
                on_cpu=current_platform.is_cpu(),
                world_size=local.tensor_parallel_size,
            ),
            seed=local.seed,
            trust_remote_code=settings.trust_remote_code,
            disable_log_stats=True,
            **extra,
        )
        # Short names (``elastic``) become the class of the runner this engine gets:
        # each runner's loader refuses the other interface's classes.
        runner = model_runner(args)
        # A wrapped processor (budget guidance) only with a model that ships what its
        # wrapper reads, selected through hf_overrides; without it, left out (its
        # strategy answers 503 instead of a processor that passes logits through).
        setup = model_setup(local.logits_processors, settings.model_path, settings.profile)
        for name in setup.dropped:
            log.warning("engine.processor_unavailable", processor=name, model=settings.model_path)
        if setup.hf_overrides:
            args.hf_overrides = {**(args.hf_overrides or {}), **setup.hf_overrides}  # type: ignore[dict-item]
            home = setup.hf_overrides.get(bg_plugin.HOME_KEY, settings.model_path)
            log.info("engine.predictor", home=str(home))  # whose budget predictor guides
        context = served_context(args)
        args.max_model_len = context
        args.max_num_batched_tokens = batched_tokens(
            local.batched_tokens, context, local.max_num_seqs
        )
        processors = load_processor_classes(tuple(spec_for(p, runner) for p in setup.names))
        args.logits_processors = cast(Any, processors) or None
        names = {processor_name(c) for c in processors}
        log.info("engine.starting", model=settings.model_path, processors=local.logits_processors)
        llm = start_async_llm(args, spin_ms=local.engine_spin_ms)
        return cls(
            llm,
            model_name=settings.model_name,
            tokens=tokens,
            max_model_len=context,
            processors=frozenset(names),
            rows=settings.max_num_seqs,
        )

    # --- Engine protocol

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        from vllm.sampling_params import RequestOutputKind

        s = request.sampling
        k = s.top_logprobs
        done: dict[int, Sample] = {}
        async for out in self._run(request, RequestOutputKind.FINAL_ONLY):
            prompt = (
                None
                if s.prompt_logprobs is None
                else client_prompt_logprobs(
                    out.prompt_logprobs, s.prompt_logprobs, request.prompt_token_ids
                )
            )
            for c in out.outputs:
                done[c.index] = Sample(
                    index=c.index,
                    token_ids=tuple(c.token_ids),
                    finish_reason=_finish(c.finish_reason),
                    cumulative_logprob=c.cumulative_logprob,
                    stop_reason=c.stop_reason,
                    confidences=_confidences(c, k),
                    logprobs=_client_logprobs(c, s.token_logprobs),
                    prompt_logprobs=prompt,
                )
        if len(done) != request.sampling.n:
            raise BackendError(f"engine returned {len(done)} of {request.sampling.n} samples")
        return [done[i] for i in sorted(done)]

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        # Requests added together land in the same engine step: vLLM batches them.
        return await generate_each(self.generate, requests)

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        from vllm.sampling_params import RequestOutputKind

        k = request.sampling.top_logprobs
        client_k = request.sampling.token_logprobs
        async for out in self._run(request, RequestOutputKind.DELTA):
            for c in out.outputs:
                if not c.token_ids and c.finish_reason is None:
                    continue
                yield SampleDelta(
                    index=c.index,
                    token_ids=tuple(c.token_ids),
                    finish_reason=_finish(c.finish_reason) if c.finish_reason else None,
                    cumulative_logprob=c.cumulative_logprob,
                    stop_reason=c.stop_reason,
                    # DELTA: vLLM hands the logprobs of the new tokens only (1:1).
                    confidences=_confidences(c, k),
                    logprobs=_client_logprobs(c, client_k),
                )

    @property
    def dead(self) -> bool:
        """The engine core is gone (killed, crashed): this engine never serves again."""
        return bool(self._llm.errored)

    def load(self) -> EngineLoad:
        """This gateway's samples in flight against vLLM's row limit (the engine runs
        nothing else); beyond the limit vLLM queues them."""
        return EngineLoad(rows=self.rows, busy=self._busy, waiting=max(0, self._busy - self.rows))

    async def health(self) -> None:
        if self._llm.errored:
            raise BackendUnavailable("the engine is dead; the server must be restarted")

    async def aclose(self) -> None:
        if self._aborts:
            await asyncio.gather(*self._aborts, return_exceptions=True)
        stopping.stop(self._llm, SHUTDOWN_TIMEOUT_S)

    # --- beyond the protocol (metrics, tests)

    def num_unfinished(self) -> int:
        """Requests the engine still holds (0 once every abort has landed)."""
        return int(self._llm.get_num_unfinished_requests())

    async def _run(self, request: GenerateRequest, kind: Any) -> AsyncIterator[Any]:
        from vllm.inputs import TokensPrompt

        await self.health()
        with map_vllm_errors():
            params = self._params(request, kind)
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
        stream = self._llm.generate(prompt, params, request.request_id)
        finished = False
        self._busy += request.sampling.n
        try:
            with map_vllm_errors():
                async for out in stream:
                    finished = out.finished
                    yield out
                    # vLLM hands over queued outputs without suspending: a consumer that
                    # keeps up would hold the event loop for a whole n=64 draw and stall
                    # every other request (even /metrics). Yield once per engine output.
                    await asyncio.sleep(0)
        finally:
            self._busy -= request.sampling.n
            if not finished:
                # Cancelled or closed early: vLLM aborts too, but its abort awaits inside
                # a possibly still-cancelled scope; ours runs detached so it lands.
                self._abort_detached(request.request_id)
            await _close_quietly(stream)

    def _abort_detached(self, request_id: str) -> None:
        self.aborted_requests += 1
        task = asyncio.get_running_loop().create_task(self._llm.abort(request_id))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    def _params(self, request: GenerateRequest, kind: Any) -> SamplingParams:
        from vllm.sampling_params import SamplingParams

        s: SamplingConfig = request.sampling
        room = self.max_model_len - len(request.prompt_token_ids)
        if room < 1:
            raise InvalidRequest(
                f"the prompt has {len(request.prompt_token_ids)} tokens; the model's context "
                f"is {self.max_model_len}"
            )
        return SamplingParams(
            n=s.n,
            max_tokens=room if s.max_tokens is None else s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            min_p=s.min_p,
            repetition_penalty=s.repetition_penalty,
            presence_penalty=s.presence_penalty,
            frequency_penalty=s.frequency_penalty,
            logit_bias=dict(s.logit_bias) or None,
            min_tokens=s.min_tokens,
            seed=s.seed,
            stop=list(s.stop) or None,
            stop_token_ids=list(s.stop_token_ids) or None,
            # top-k candidates for confidences and the client's alternatives, else the
            # sampled token's logprob only; either way vLLM sums cumulative_logprob.
            logprobs=_vllm_logprobs(s),
            prompt_logprobs=s.prompt_logprobs,
            # Flat lists instead of a Logprob object per candidate per token.
            flat_logprobs=s.top_logprobs > 0,
            ignore_eos=s.ignore_eos,
            extra_args=dict(s.extra_args) or None,
            output_kind=kind,
            # Text comes from our own split decoding; vLLM detokenizes only for stop strings.
            detokenize=bool(s.stop),
            # A stream nobody reads token by token comes in fewer, larger deltas.
            stream_interval=None if request.visible else QUIET_STREAM_INTERVAL,
            structured_outputs=_structured(s.structured),
        )


def _structured(out: StructuredOutput | None) -> Any:
    """vLLM's ``StructuredOutputsParams`` for an answer constraint (None: free text)."""
    if out is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if out.kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    return StructuredOutputsParams(json=out.schema)


def _confidences(output: Any, k: int) -> tuple[float, ...] | None:
    """The token confidences of a ``CompletionOutput`` when ``top_logprobs = k`` was set."""
    if k <= 0:
        return None
    return token_confidences(output.logprobs, k, len(output.token_ids))


def _vllm_logprobs(s: SamplingConfig) -> int | None:
    wanted = [k for k in (s.top_logprobs or None, s.token_logprobs) if k is not None]
    if wanted:
        return max(wanted)
    return 0 if s.logprobs else None


def _client_logprobs(output: Any, k: int | None) -> tuple[TokenLogprob, ...] | None:
    """The client's logprobs of a ``CompletionOutput`` when it asked for them."""
    if k is None:
        return None
    return client_logprobs(output.logprobs, k, output.token_ids)


def _finish(reason: str | None) -> FinishReason:
    if reason is None:
        raise BackendError("engine finished a sample without a finish reason")
    try:
        return _FINISH[reason]
    except KeyError:
        raise BackendError(f"engine finished a sample with {reason!r}") from None


async def _close_quietly(stream: AsyncIterator[Any]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is None:
        return
    # Already aborted: nothing left to report, and a re-delivered cancel must not
    # replace the exception that brought us here.
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await aclose()
