"""Server settings: built once (CLI flags over ``THINKGATE_*`` variables over defaults)
and passed in. Nothing else in thinkgate reads ``os.environ``.

List settings accept JSON (``'["a:B"]'``) or a comma-separated string (``a:B,c:D``).
The HTTP group is ``server.settings_http``; how values are read, ``server.settings_values``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from core import defaults
from core.reasoning_formats import DEFAULT_FORMAT, REASONING_FORMATS, reasoning_format
from engines.calls import Transport
from engines.settings import ExecutorChoice, LocalEngineSettings, RemoteEngineSettings
from kernels.processors import DEFAULT as DEFAULT_PROCESSORS
from server.settings_http import HttpSettings
from server.settings_values import (
    StrList,
    checked_urls,
    header_pair,
    split_list,
    with_format_strings,
)

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[Effort, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class Settings(HttpSettings):
    """Every knob of the gateway. Field descriptions are the reference (docs/settings.md
    is generated from them)."""

    model_config = SettingsConfigDict(
        env_prefix="THINKGATE_",
        frozen=True,
        extra="forbid",
        validate_default=True,
        use_attribute_docstrings=True,  # the docstrings below are the --help texts
    )

    # --- HTTP: in the base, HttpSettings (server/settings_http.py), so it comes first

    # --- engine: which one, and the remote engine's knobs
    engine: Literal["local", "remote"] = "local"
    """``local``: vLLM's engine in this process; ``remote``: vLLM OpenAI servers at
    ``--vllm-urls`` generate the tokens (this process keeps the tokenizer)."""
    vllm_urls: StrList = ()
    """Remote engine: base URLs of vLLM servers (``http://host:port``), or of a fleet's
    gateway with a path prefix (``https://gw/<namespace>/<name>``: calls go to
    ``<url>/v1/completions``...). One URL: a router (or one replica) that places requests
    itself; several: thinkgate spreads them."""
    remote_ca_bundle: str | None = None
    """Remote servers (the remote engine's, ``--prm-url``, ``--reward-url``): a PEM file of
    the CA that signs their TLS certificates (a fleet gateway with its own CA); None: the
    system's trust store."""
    remote_headers: StrList = Field(default=(), repr=False)
    """Remote servers (the remote engine's, ``--prm-url``, ``--reward-url``): headers every
    call to them carries, as ``Name: value`` (comma-separated, or a JSON list), e.g.
    ``Authorization: Bearer <token>`` for a fleet gateway."""
    remote_protocol: Literal["auto", "generate", "completions"] = "auto"
    """Remote engine: ``generate`` (vLLM's token-in/token-out ``/inference/v1/generate``,
    needs ``--enable-scale-out``), ``completions`` (``/v1/completions`` with token ids),
    or ``auto`` (generate where a server offers it)."""
    remote_connect_timeout_s: float = Field(default=5.0, gt=0)
    """Remote engine: time to open a connection to a server."""
    remote_start_timeout_s: float = Field(default=300.0, ge=0)
    """Remote engine: how long start-up waits for the first server to verify."""
    health_interval_s: float = Field(default=2.0, gt=0)
    """Remote engine: seconds between health checks of each server (an ejected server
    is re-verified and re-admitted when it serves again)."""
    remote_server_rows: int = Field(default=64, ge=1)
    """Remote engine: sequences each vLLM server runs at once (its ``--max-num-seqs``;
    vLLM does not publish it). Adaptive strategies (DeepConf's rounds) size their draws
    by the rows this gateway's calls leave free."""
    remote_joint_calls: bool = True
    """Remote engine: a step of a search's paths goes as one ``/v1/completions`` call
    with a list of prompts (requests alike but for ``n``, unseeded); off: one call per
    path over the server's own protocol (for a router that does not take prompt lists)."""
    remote_retries: int = Field(default=3, ge=0)
    """Remote engine: how many more times a call whose server failed before the client
    saw its tokens is placed again: on another server, or through the router again (one
    URL) after a pause (0.25 s, doubling, at most 2 s); the unfinished samples of a
    sample pool are drawn again the same way."""

    # --- model (both engines: the tokenizer lives in this process)
    model: str | None = None
    """Local directory or Hugging Face id; None: the testbed ``base`` model."""
    served_model_name: str | None = None
    """Name clients send as ``model``; default: the ``--model`` value, or ``testbed-base``."""
    reasoning: bool = True
    """The model thinks between the think tags; startup fails if the tokenizer lacks them."""
    reasoning_format: str = DEFAULT_FORMAT
    """Preset of the think strings: ``think-tags`` (``<think>``/``</think>``) or ``harmony``
    (gpt-oss channels); see docs/reasoning-formats.md. ``--think-start/--think-end``
    override it."""
    think_start: str = "<think>"
    """The string that opens thinking: one vocab token, else the token sequence it encodes
    to; default: the ``--reasoning-format`` preset's."""
    think_end: str = "</think>"
    """The string that closes thinking (one token or a sequence); default: the preset's."""
    reasoning_parser: str | None = None
    """vLLM reasoning parser that tells the engine's grammar (``response_format``) where the
    answer starts; default: the ``--reasoning-format`` preset's when the think strings are
    the preset's. Remote servers need the same (``thinkgate replica`` passes it)."""

    # --- local engine (vLLM in process)
    dtype: str = "float32"
    """Local engine: model dtype for vLLM (float32 on CPU; auto/bfloat16 on GPU)."""
    max_model_len: int | None = Field(default=None, ge=16)
    """Local engines: context length (prompt + completion) per sequence; None: each model's
    own, as its config declares it (the testbed's: 65,536, though it was trained on 512
    tokens). A remote engine takes its servers' ``max_model_len``."""
    max_num_seqs: int = Field(default=64, ge=1)
    """Local engine: sequences vLLM decodes at once."""
    max_num_batched_tokens: int | None = None
    """Local engine: tokens one engine step holds, never under the context (no prefill is
    ever chunked: a seeded request with a chunked prefill crashes the CPU engine); None:
    ``max_num_seqs`` full prompts, at most 32,768 (and at least one)."""
    block_size: int | None = Field(default=None, ge=1)
    """Local engine: tokens per KV cache block, the unit vLLM's prefix cache reuses; None: 32
    on a CPU host (vLLM's 128 there recomputes up to 127 tokens of every path a step search
    resubmits), vLLM's own elsewhere."""
    engine_spin_ms: float | None = Field(default=None, ge=0)
    """Local engine: milliseconds vLLM's engine processes spin waiting for each other's next
    step before they sleep (only where a worker process runs the model: ``--executor mp``,
    tensor parallelism); None: 1 on a CPU host (vLLM's 1000 there takes a core from the
    work), vLLM's own elsewhere. vLLM's processes read it from THINKGATE_ENGINE_SPIN_MS."""
    executor: ExecutorChoice = "auto"
    """Local engines (generator, reward, PRM): where vLLM runs the model. ``uni``: inside
    the engine core process; ``mp``: in a worker process of its own (vLLM's CPU default,
    every step handed over twice through shared memory); ``auto``: ``uni`` on a CPU host
    with one worker, vLLM's own choice elsewhere."""
    enforce_eager: bool = True
    """Local engine: no CUDA graphs / torch.compile (on CPU it saves about a minute of
    start-up; off for speed, on GPU above all)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    """Local engine: share of GPU memory vLLM may take (GPU only)."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """Local engine: GPUs per engine (tensor parallelism)."""
    seed: int = 0
    """Local engine: engine seed (requests without a seed draw from it)."""
    trust_remote_code: bool = False
    """Allow model code from the model repository."""
    logits_processors: StrList = DEFAULT_PROCESSORS
    """Local engine: our vLLM logits processors loaded into it, in order (remote servers
    load theirs, ``thinkgate replica``): short names (``confidence``, ``elastic``,
    ``guidance``: the class for the engine's model runner is picked at start) or
    ``module:Class`` strings. Empty: none (strategies fall back to several calls)."""
    vllm_reasoning_config: bool = False
    """Local engine: give vLLM a ReasoningConfig with the think strings (enables its own
    ``thinking_token_budget``, the benchmark baseline)."""

    # --- strategies and budgets
    strategies: StrList | None = None
    """Allow-list of strategy names to load; None: every installed one."""
    default_strategy: str = "plain"
    """Strategy of a request that names none and sets no budget."""
    budget_strategy: str = "elastic"
    """Strategy of a request that names none but sets a thinking/solution budget."""
    samples_strategy: str = "self-consistency"
    """Strategy of a request that names none but sets samples > 1."""
    limits_strategy: str = "auto"
    """Strategy of a request that names none and sets only its total-token ceiling or
    its deadline (``budget.tokens``, ``budget.deadline_ms``)."""
    max_deadline_ms: int = Field(default=3_600_000, ge=1)
    """Cap on a request's deadline (``budget.deadline_ms``); larger values are a 400."""
    deadline_margin_ms: int = Field(default=50, ge=0)
    """Time a deadline keeps for what follows the last engine token (selection,
    rendering, the network): engine calls end this much before it."""
    effort_none: float = Field(default=0.0, ge=0.0, le=1.0)
    """Thinking budget of reasoning effort ``none``, as a share of the model's context
    (docs/apis.md has the table)."""
    effort_minimal: float = Field(default=0.03125, ge=0.0, le=1.0)
    """Thinking budget of effort ``minimal``, as a share of the model's context."""
    effort_low: float = Field(default=0.09375, ge=0.0, le=1.0)
    """Thinking budget of effort ``low``, as a share of the model's context."""
    effort_medium: float = Field(default=0.25, ge=0.0, le=1.0)
    """Thinking budget of effort ``medium``, as a share of the model's context."""
    effort_high: float = Field(default=0.625, ge=0.0, le=1.0)
    """Thinking budget of effort ``high``, as a share of the model's context."""
    effort_xhigh: float = Field(default=0.75, ge=0.0, le=1.0)
    """Thinking budget of effort ``xhigh``, as a share of the model's context."""
    effort_max: float = Field(default=0.875, ge=0.0, le=1.0)
    """Thinking budget of effort ``max``, as a share of the model's context."""
    answer_reserve: int = Field(default=16, ge=0)
    """Tokens a thinking budget leaves for the answer under a request's output limit
    (``max_tokens``, ``max_output_tokens``): a larger thinking budget is lowered to fit,
    and ``X-Budget-Applied`` shows the lowered value."""
    default_max_tokens: int | None = Field(default=None, ge=1)
    """Output limit of a request that sets none (``max_tokens``, ``max_output_tokens``).
    Unset: the model's ``generation_config.json`` ``max_new_tokens``, else the default
    model's own (the testbed's: 1024), else the rest of the context (vLLM's rule)."""
    default_thinking: int | None = Field(default=None, ge=0)
    """Thinking budget when the request sets none (strategies that honour it)."""
    default_solution: int | None = Field(default=None, ge=0)
    """Solution budget when the request sets none (strategies that honour it)."""
    default_samples: int | None = Field(default=None, ge=1)
    """Samples when the request sets none (strategies that honour it)."""
    default_k: int | None = Field(default=None, ge=1)
    """k when the request sets none (strategies that honour it)."""
    max_budget_tokens: int = Field(default=100_000, ge=1)
    """Cap on thinking and solution budgets; larger values are a 400."""
    max_samples: int = Field(default=64, ge=1)
    """Cap on the samples (and k) budget; larger values are a 400."""
    auto_table: str | None = None
    """Calibrated plans of ``auto`` (JSON from ``thinkgate calibrate auto``); None: the
    testbed table shipped in ``strategies/auto_tables/``, attached only in front of its
    model; ``none``: no table (``auto`` plans by its documented rule)."""
    profile: str | None = None
    """A profile directory from ``thinkgate fit``: ``auto``'s table (in place of
    ``auto_table``), the answer's measured length (``answer_reserve``, unless set) and the
    decode speed a deadline starts from; refused at start in front of another model or
    tokenizer than it was fitted on."""
    pets_table: str | None = None
    """PETS online allocation table (JSON from ``thinkgate calibrate pets``); None: the
    testbed table shipped in ``strategies/pets/tables/``; ``none``: no table (the
    ``pets`` strategy then samples adaptively)."""
    max_n: int = Field(default=16, ge=1)
    """Cap on the OpenAI n (choices); larger values are a 400."""

    # --- sampling strategies (self-consistency, best-of-n, best-of-majority)
    reward_model: str | None = None
    """Reward model (Qwen2ForSequenceClassification, one label) served in process by a
    second vLLM engine for the ``reward`` scorer; None: the testbed ``reward`` model
    (left out if its files are missing; with ``--engine remote``: none, use
    ``--reward-url``); ``none``: no in-process reward model."""
    reward_url: str | None = None
    """Base URL of a vLLM server whose ``/classify`` serves the reward model (it must
    share the policy's tokenizer); replaces the in-process reward engine."""
    reward_gpu_memory_utilization: float = Field(default=0.1, gt=0.0, le=1.0)
    """GPU memory share of the in-process reward engine (GPU only)."""
    prm_model: str | None = None
    """Process reward model (``Qwen2ForProcessRewardModel``) served in process by another
    vLLM pooling engine for the step search (``strategies.prm``); None: the testbed ``prm``
    model, in front of the testbed model only (left out if its files are missing or the
    served model has another tokenizer; with ``--engine remote``: none, use
    ``--prm-url``); ``none``: no in-process PRM."""
    prm_url: str | None = None
    """Base URL of a server whose ``/pooling`` serves the PRM, one reward per step tag:
    thinkgate's PRM server (``thinkgate replica --prm``, with the prefix cache) or vLLM's
    with STEP pooling (``--prm-server vllm``); it must share the policy's tokenizer;
    replaces the in-process PRM engine."""
    prm_step_tag_id: int | None = Field(default=None, ge=0)
    """Token id the PRM reads each step's reward at; None: the PRM directory's
    ``config.json`` ``step_tag_id`` (with ``--prm-url``: ``--prm-model``'s directory if
    given, else the default PRM's when it shares the served model's tokenizer), else
    vLLM's default (151651, Qwen2.5-Math-PRM's ``<extra_0>``)."""
    prm_gpu_memory_utilization: float = Field(default=0.1, gt=0.0, le=1.0)
    """GPU memory share of the in-process PRM engine (GPU only)."""
    verifier_url: str | None = None
    """External verifier for the ``verifier`` scorer: POST {prompt, responses,
    reasoning} -> {scores}."""
    scorer_timeout_s: float = Field(default=60.0, gt=0)
    """Timeout of one remote scoring call (reward server, verifier)."""
    default_scorer: Literal["reward", "logprob", "verifier", "prm"] = "reward"
    """Scorer of best-of-n / best-of-majority when the request names none (logprob if
    the one named here is not configured; ``prm``: the process reward model's lowest
    step reward)."""
    bom_alpha: float = Field(default=0.02, ge=0.0, le=1.0)
    """Best-of-Majority frequency threshold (a fraction of the samples); a request may
    override it with the body field ``alpha``."""

    # --- step search with a process reward model (beam-search, particle-filtering, dvts,
    # step-rejection)
    step_delimiter: str | None = None
    """Where a reasoning step ends (a request may override it with ``step_delimiter``);
    None: what the served model's defaults say (the testbed: a newline), else a blank
    line (``"\\n\\n"``, as PRMs for real models such as Qwen2.5-Math-PRM expect)."""
    search_max_steps: int = Field(default=64, ge=1)
    """Steps a search takes at most (a request may lower or raise it with ``max_steps``)."""
    search_max_step_tokens: int = Field(default=256, ge=1)
    """Tokens one step may take (a longer step is cut and scored as it is)."""
    search_expansions: int = Field(default=4, ge=1)
    """Candidates per beam (beam-search) or per subtree (dvts), M, when the request sets
    no ``expansions``."""
    search_confidence: float = Field(default=0.0, ge=0.0, le=100.0)
    """Alpha of the generator's own confidence in a step's reward (the PRM's reward times
    exp(alpha x the mean logprob of the step's tokens)) when the request sets no
    ``confidence``; 0: the PRM's reward alone."""

    # --- state: PETS batch jobs
    state_dir: str | None = None
    """Directory of the gateway's state: batches, PETS batch jobs and stored responses
    (unless ``--batch-store`` names a PostgreSQL database) and the reasoning seal's key
    live there and survive restarts; None: ``$XDG_STATE_HOME/thinkgate``, else
    ``~/.local/state/thinkgate``."""
    response_retention_s: float = Field(default=2_592_000.0, ge=0)
    """Stored responses (``store``, ``previous_response_id``, ``GET /v1/responses/{id}``)
    are kept this long, in ``responses.sqlite3`` in the state directory, or in the
    PostgreSQL database ``batch_store`` names, shared by a fleet (30 days, as OpenAI); 0:
    nothing is stored, and asking to is a 400."""
    presets: str | None = None
    """JSON file of strategy presets chosen by model name (``<model>@<name>``: name ->
    ``{"strategy", "budget"}``), listed in ``/v1/models``; None: the built-in ones
    (docs/apis.md)."""
    reasoning_key: str | None = Field(default=None, repr=False)
    """Secret that seals the reasoning clients carry across turns (Responses'
    ``encrypted_content``, Anthropic's thinking ``signature``): every replica of a fleet
    sets the same; None: a random key kept in ``reasoning.key`` in the state directory."""
    batch_store: str | None = Field(default=None, repr=False)
    """Where the Batch API (``/v1/files``, ``/v1/batches``) keeps files, batches and
    answers, PETS allocation jobs their samples, and the Responses API its stored
    responses: a ``postgresql://`` URL shared by every gateway of a fleet (any replica
    serves any batch or continues any response; a dead one's batches are taken over when
    its lease lapses), or None: ``batches.sqlite3``, ``pets-batches.sqlite3`` and
    ``responses.sqlite3`` in the state directory."""
    batch_max_file_bytes: int = Field(default=200 * 2**20, ge=1024)
    """The largest file ``/v1/files`` takes (OpenAI's: 200 MB for a batch)."""
    batch_concurrency: int = Field(default=8, ge=1)
    """A batch's lines in flight at once on one gateway (each still meets admission)."""
    batch_lease_s: float = Field(default=30.0, gt=0)
    """Batch API batches and PETS batch jobs: the lease a gateway holds on a job it runs
    (renewed every third of it). A killed gateway's jobs are resumed once it expires; a
    graceful stop hands them on at once."""

    # --- admission control
    max_inflight_requests: int = Field(default=256, ge=1)
    """Requests served at once; more are a 429 with Retry-After."""
    max_inflight_samples: int = Field(default=1024, ge=1)
    """Samples admitted at once (max(n, samples) per request); more are a 429."""
    fair_share_samples: int | None = Field(default=None, ge=1)
    """The samples that the active tenants' fair shares divide while more than one is
    active (a tenant alone may hold ``max_inflight_samples``). Unset: the rows the engine
    batches (the local engine's ``max_num_seqs``; the remote servers'
    ``remote_server_rows`` each), at least ``max_samples``: a tenant's share is then a
    share of what the engine runs at once, not of a queue behind it."""
    retry_after_s: int = Field(default=1, ge=0)
    """Retry-After (seconds) of a 429 for a full server (a tenant's own rates compute
    theirs from its window)."""
    admission_wait_s: float = Field(default=30.0, ge=0)
    """How long a request within its tenant's fair share waits for room when other
    tenants filled the server (a request over its share is refused at once); 0: never
    wait."""
    fair_idle_s: float = Field(default=5.0, ge=0)
    """A tenant counts as active (and keeps its share of the server) this long after its
    last request ended."""
    request_timeout_s: float | None = Field(default=600.0, gt=0)
    """A request running longer is aborted with 504."""

    # --- lifecycle: shutdown, engine death, long streams
    drain_timeout_s: float = Field(default=30.0, ge=0)
    """On SIGTERM: the process exits 0 within this long. New requests get a 503 with
    Retry-After while those in flight finish; its last 7 s (at most half) are kept for
    aborting what is left (a 503, or an error frame in a stream) and stopping the engines.
    A second SIGTERM/SIGINT stops at once."""
    on_engine_death: Literal["exit", "restart"] = "exit"
    """Local engine: when vLLM's engine dies, ``exit`` (answer what is in flight with a
    503, then exit with status 4 so a supervisor restarts the process) or ``restart`` (a
    new engine in this process; 503s until it serves)."""
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    """A stream that has sent nothing for this long sends an SSE comment (``: keep-alive``)
    so that proxies do not cut it while samples are drawn."""
    loop_stall_ms: float = Field(default=0.0, ge=0)
    """Log the stack of any event-loop stall longer than this (a watchdog thread); 0: off.
    The loop's lag is always in ``/metrics`` (``thinkgate_event_loop_lag_seconds``)."""

    @field_validator("remote_headers", mode="after")
    @classmethod
    def _headers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            header_pair(item)
        return value

    @field_validator(
        "api_keys",
        "allowed_hosts",
        "allowed_origins",
        "logits_processors",
        "strategies",
        "vllm_urls",
        "remote_headers",
        mode="before",
    )
    @classmethod
    def _split(cls, value: object) -> object:
        return split_list(value)

    @field_validator("reasoning_format", mode="after")
    @classmethod
    def _known_format(cls, value: str) -> str:
        reasoning_format(value)  # ValueError naming the known presets
        return value

    @model_validator(mode="before")
    @classmethod
    def _format_strings(cls, data: object) -> object:
        return with_format_strings(data)

    @field_validator("vllm_urls", mode="after")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return checked_urls(value)

    @model_validator(mode="after")
    def _one_table(self) -> Settings:
        if self.profile is not None and self.auto_table is not None:
            raise ValueError("profile carries auto's table: set profile or auto_table, not both")
        return self

    @model_validator(mode="after")
    def _engine_needs(self) -> Settings:
        if self.engine == "remote" and not self.vllm_urls:
            raise ValueError("engine 'remote' needs vllm_urls (--vllm-urls URL[,URL...])")
        if len(set(self.vllm_urls)) != len(self.vllm_urls):
            raise ValueError("vllm_urls lists a server twice")
        if self.executor == "uni" and self.tensor_parallel_size > 1:
            raise ValueError(
                "executor 'uni' runs one worker; tensor_parallel_size > 1 needs 'mp' or 'auto'"
            )
        return self

    @property
    def local(self) -> LocalEngineSettings:
        """The local engine's knobs, grouped."""
        return LocalEngineSettings(
            dtype=self.dtype,
            max_num_seqs=self.max_num_seqs,
            batched_tokens=self.max_num_batched_tokens,
            block_size=self.block_size,
            enforce_eager=self.enforce_eager,
            engine_spin_ms=self.engine_spin_ms,
            executor=self.executor,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            seed=self.seed,
            logits_processors=self.logits_processors,
            vllm_reasoning_config=self.vllm_reasoning_config,
            reasoning_parser=self.grammar_reasoning_parser,
        )

    @property
    def grammar_reasoning_parser(self) -> str:
        """The vLLM reasoning parser JSON answers wait for ("" when none applies: a model
        that does not think, or think strings no preset names)."""
        if not self.reasoning:
            return ""
        if self.reasoning_parser is not None:
            return self.reasoning_parser
        preset = REASONING_FORMATS[self.reasoning_format]
        same = (self.think_start, self.think_end) == (preset.think_start, preset.think_end)
        return preset.vllm_reasoning_parser if same else ""

    @property
    def remote(self) -> RemoteEngineSettings:
        """The remote engine's knobs, grouped."""
        return RemoteEngineSettings(
            urls=self.vllm_urls,
            protocol=self.remote_protocol,
            connect_timeout_s=self.remote_connect_timeout_s,
            start_timeout_s=self.remote_start_timeout_s,
            health_interval_s=self.health_interval_s,
            retries=self.remote_retries,
            server_rows=self.remote_server_rows,
            joint_calls=self.remote_joint_calls,
            ca_bundle=self.remote_ca_bundle,
            headers=tuple(header_pair(h) for h in self.remote_headers),
        )

    @property
    def transport(self) -> Transport:
        """How every call to a remote server (engine, PRM, reward model) is made."""
        remote = self.remote
        return Transport(ca_bundle=remote.ca_bundle, headers=remote.headers)

    @property
    def model_path(self) -> str:
        """What the engine loads."""
        return self.model if self.model is not None else defaults.installed().model

    @property
    def model_name(self) -> str:
        """What clients send as ``model`` and /v1/models lists."""
        if self.served_model_name:
            return self.served_model_name
        return self.model if self.model is not None else defaults.installed().served_name

    @property
    def state_path(self) -> Path:
        """``state_dir``, or the XDG default (resolved here: nothing else reads the
        environment)."""
        if self.state_dir:
            return Path(self.state_dir).expanduser()
        base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
        return Path(base) / "thinkgate"

    def effort_share(self, effort: Effort) -> float:
        """The share of the model's context that ``effort`` thinks for (server.pipeline.effort)."""
        value: float = getattr(self, f"effort_{effort}")
        return value
