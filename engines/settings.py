"""What the engines read from the gateway's settings.

``server.settings.Settings`` builds these groups and satisfies :class:`EngineSettings`
structurally, so the engines never import the server (server -> engines, never back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

ExecutorChoice = Literal["auto", "uni", "mp"]
"""Where a local engine runs its model (``engines.local.executor``): ``auto`` in the engine
core on a CPU host with one worker, vLLM's own choice elsewhere; ``uni`` always in the
core (one worker only); ``mp`` in a worker process."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalEngineSettings:
    """What only the in-process engine reads (``Settings.local``)."""

    dtype: str
    max_num_seqs: int
    batched_tokens: int | None  # None: engines.local.context.batched_tokens of the context
    # The KV cache's block, the prefix cache's unit; None: engines.local.prefix_cache's.
    block_size: int | None = None
    enforce_eager: bool
    engine_spin_ms: float | None
    executor: ExecutorChoice = "auto"
    gpu_memory_utilization: float
    tensor_parallel_size: int
    seed: int
    logits_processors: tuple[str, ...]
    vllm_reasoning_config: bool
    # vLLM's reasoning parser for the engine's grammar ("" none: it applies from the start).
    reasoning_parser: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteEngineSettings:
    """What only the remote engine reads (``Settings.remote``)."""

    urls: tuple[str, ...]
    protocol: Literal["auto", "generate", "completions"]
    connect_timeout_s: float
    start_timeout_s: float
    health_interval_s: float
    retries: int = 3
    server_rows: int = 64
    joint_calls: bool = True  # generate_batch: requests alike share one call
    # A fleet gateway's TLS and auth: a CA bundle that signs its certificate (None: the
    # system's), and headers every call carries (``Authorization``, a tenant header).
    ca_bundle: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


class EngineSettings(Protocol):
    """The gateway-wide knobs an engine reads (``server.settings.Settings`` has them all)."""

    @property
    def engine(self) -> Literal["local", "remote"]: ...
    @property
    def on_engine_death(self) -> Literal["exit", "restart"]: ...
    @property
    def model_path(self) -> str: ...
    @property
    def model_name(self) -> str: ...
    @property
    def profile(self) -> str | None: ...
    @property
    def reasoning(self) -> bool: ...
    @property
    def think_start(self) -> str: ...
    @property
    def think_end(self) -> str: ...
    @property
    def trust_remote_code(self) -> bool: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def local(self) -> LocalEngineSettings: ...
    @property
    def remote(self) -> RemoteEngineSettings: ...
