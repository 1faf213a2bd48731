"""The process reward model (PRM) behind ``strategies.prm.StepRewardModel``: an
in-process vLLM pooling engine (``PrmEngine``) or a vLLM server's ``POST /pooling``
(``RemotePrm``, ``--prm-url``).

vLLM serves ``Qwen2ForProcessRewardModel`` (the Qwen2.5-Math-PRM layout) in its pooling
runner with the ``token_classify`` task and STEP pooling: the two-label softmax at every
occurrence of ``step_tag_id`` in the input, in order; the reward is the probability of
label 1 ("right", as in Qwen2.5-Math-PRM).

Which vLLM interface sets the step tag, and why the engine argument: vLLM 0.32 reads it
from ``PoolingParams.step_tag_id``, filled per request from the engine's
``pooler_config.step_tag_id`` when the request leaves it unset, and for this
architecture ``pooler_config.step_tag_id`` defaults to 151651 (Qwen2.5-Math-PRM's
``<extra_0>``: never a token of another vocabulary, so every input would get no reward
at all). Its HTTP ``/pooling`` request has no field for it (``PoolingCompletionRequest``
builds ``PoolingParams`` from ``task``, ``use_activation`` and ``dimensions`` only), so
a vLLM server can only learn it at start-up: ``--pooler-config '{"step_tag_id": N}'``
(``thinkgate replica --prm`` passes it). ``RemotePrm`` checks that each sequence got
exactly one reward per tag it holds: a server started without the right tag fails
loudly instead of scoring the wrong tokens.

The testbed PRM writes its tag in ``config.json`` (``step_tag_id``, the newline);
``step_tag_of`` reads it, with vLLM's default for models that do not.

In process, the engine runs ALL token pooling instead (a row per token; it reads the
rows at the tags itself), with vLLM's prefix cache on: a
search scores each path again every step (prompt + every step so far), and STEP pooling
never reads the prefix cache (vLLM turns it off for STEP). With ALL pooling and the
cache read, vLLM computes only the tokens past the cached prefix and returns their rows
(``num_cached_tokens`` says where they start); the reward at a tag is the "right"
probability of its row. A tag inside the cached prefix was scored when that prefix was:
``PrmEngine`` keeps each reward under the hash of the prefix ending at its tag (a causal
model's reward there depends on nothing after it), so a step of a search costs the PRM
about the new step's tokens, not the whole path's (on CPU the cache keeps blocks of 32
tokens, not vLLM's CPU default of 128, or little of a short path would be reused). A
tag with no reward kept (forgotten here while vLLM still caches its prefix) sends the
sequence again without the cache. A vLLM server's ``/pooling`` cannot ask for the cache
(its token tasks skip it), so ``RemotePrm`` keeps STEP pooling.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import httpx
import structlog

from core.errors import BackendError, BackendUnavailable
from engines.calls import Timeouts, Transport, calls_over
from engines.http_errors import post_json
from engines.local import executor, stopping
from engines.local.context import batched_tokens, served_context
from engines.local.engine import SHUTDOWN_TIMEOUT_S
from engines.local.launch import start_async_llm
from engines.local.pooling import encode_one
from engines.local.prefix_cache import block_size
from engines.settings import ExecutorChoice

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

log = structlog.get_logger("thinkgate.prm")

RIGHT_LABEL: Final = 1  # Qwen2ForProcessRewardModel: softmax over (wrong, right)
VLLM_DEFAULT_STEP_TAG: Final = 151651  # vLLM's default for the architecture: `<extra_0>`
STORE_SIZE: Final = 500_000  # rewards kept by prefix (LRU): ~100 MB at most


def step_tag_of(model_dir: str | Path) -> int:
    """The step tag a PRM directory declares (``config.json``'s ``step_tag_id``), else
    vLLM's default for ``Qwen2ForProcessRewardModel``."""
    path = Path(model_dir) / "config.json"
    if path.exists():
        tag = json.loads(path.read_text()).get("step_tag_id")
        if isinstance(tag, int) and not isinstance(tag, bool):
            return tag
    return VLLM_DEFAULT_STEP_TAG


def rewards_from_rows(rows: object, *, tags: int) -> list[float]:
    """P(right) per step tag from one sequence's pooled rows ``[[p_wrong, p_right], ...]``."""
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 2 for r in rows):
        raise BackendError("the PRM answered in an unexpected shape (want [tags, 2] per input)")
    if len(rows) != tags:
        raise BackendError(
            f"the PRM returned {len(rows)} step rewards for {tags} step tags: it must be "
            "served with STEP pooling at the same step tag (vLLM: --pooler-config "
            "'{\"step_tag_id\": N}'; thinkgate replica --prm passes it)"
        )
    return [float(r[RIGHT_LABEL]) for r in rows]


@dataclass(slots=True)
class Tally:
    """What one call cost: tokens of its sequences, and those the engine computed (the
    rest came from its cache). The engine's running counters cannot say it for a call
    once calls overlap: a difference taken around one counts its neighbours too."""

    asked: int = 0
    scored: int = 0


class PrmEngine:
    """A PRM in a second (or third) in-process vLLM engine, all sequences of a call batched."""

    def __init__(self, llm: AsyncLLM, *, model: str, step_tag_id: int, max_model_len: int) -> None:
        self._llm = llm
        self.model = model
        self.step_tag_id = step_tag_id
        self.max_model_len = max_model_len
        self._ids = itertools.count()
        self._store: OrderedDict[bytes, float] = OrderedDict()
        self.scored_tokens = 0  # tokens the PRM computed (the rest came from its cache)
        self.asked_tokens = 0  # tokens of the sequences it was asked to score

    @classmethod
    def start(
        cls,
        model: str,
        *,
        step_tag_id: int | None = None,
        max_model_len: int | None = None,
        dtype: str = "float32",
        enforce_eager: bool = True,
        max_num_seqs: int = 64,
        gpu_memory_utilization: float = 0.9,
        seed: int = 0,
        spin_ms: float | None = None,
        executor_choice: ExecutorChoice = "auto",
    ) -> PrmEngine:
        """Build the pooling engine (tens of seconds on CPU); raises if it cannot serve.
        ``step_tag_id`` None: the directory's own (``step_tag_of``)."""
        from vllm.config import PoolerConfig
        from vllm.engine.arg_utils import AsyncEngineArgs

        tag = step_tag_of(model) if step_tag_id is None else step_tag_id
        from vllm.platforms import current_platform

        args = AsyncEngineArgs(
            model=model,
            runner="pooling",
            # ALL pooling reads the prefix cache (STEP cannot): see the module's notes.
            pooler_config=PoolerConfig(tok_pooling_type="ALL"),
            enable_prefix_caching=True,
            block_size=block_size(None, on_cpu=current_platform.is_cpu()),
            dtype=dtype,  # type: ignore[arg-type]
            max_model_len=max_model_len,  # type: ignore[arg-type]  # None: derived, as vLLM's default
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            distributed_executor_backend=executor.backend(
                executor_choice, on_cpu=current_platform.is_cpu(), world_size=1
            ),
            disable_log_stats=True,
        )
        # None: the model's own context; no prefill split (engines.local.context).
        context = served_context(args)
        args.max_model_len = context
        args.max_num_batched_tokens = batched_tokens(None, context, max_num_seqs)
        log.info("prm.starting", model=model, step_tag_id=tag)
        llm = start_async_llm(args, spin_ms=spin_ms)
        return cls(llm, model=model, step_tag_id=tag, max_model_len=context)

    async def step_rewards(
        self, sequences: Sequence[Sequence[int]], tally: Tally | None = None
    ) -> list[list[float]]:
        tally = Tally() if tally is None else tally
        for seq in sequences:
            if not seq:
                raise BackendError("cannot score an empty sequence")
            if len(seq) > self.max_model_len:
                raise BackendError(
                    f"a scored path has {len(seq)} tokens; the PRM's context is "
                    f"{self.max_model_len}"
                )
        await self.health()
        batch = next(self._ids)
        # Copies go once: run together, a copy may read the other's blocks from vLLM's
        # cache before that one's rewards are kept here, and be computed again whole.
        distinct = list(dict.fromkeys(tuple(seq) for seq in sequences))
        asked = sum(len(seq) for seq in sequences)
        self.asked_tokens += asked
        tally.asked += asked
        rewards = await asyncio.gather(
            *(self._one(f"prm-{batch}-{i}", seq, tally) for i, seq in enumerate(distinct))
        )
        of = dict(zip(distinct, rewards, strict=True))
        return [list(of[tuple(seq)]) for seq in sequences]

    async def _one(self, request_id: str, sequence: Sequence[int], tally: Tally) -> list[float]:
        tags = [i for i, t in enumerate(sequence) if t == self.step_tag_id]
        keys = _prefix_keys(sequence, tags)
        rows, first = await self._rows(request_id, sequence, tally, cached=True)
        rewards: list[float] = []
        for at, key in zip(tags, keys, strict=True):
            if at >= first:
                reward = _right(rows[at - first])
                self._remember(key, reward)
            else:
                got = self._store.get(key)
                if got is None:  # computed elsewhere, or forgotten here: compute it all
                    return await self._uncached(f"{request_id}-full", sequence, tags, keys, tally)
                self._store.move_to_end(key)
                reward = got
            rewards.append(reward)
        return rewards

    async def _uncached(
        self,
        request_id: str,
        sequence: Sequence[int],
        tags: list[int],
        keys: list[bytes],
        tally: Tally,
    ) -> list[float]:
        rows, _ = await self._rows(request_id, sequence, tally, cached=False)
        rewards = [_right(rows[at]) for at in tags]
        for key, reward in zip(keys, rewards, strict=True):
            self._remember(key, reward)
        return rewards

    async def _rows(
        self, request_id: str, sequence: Sequence[int], tally: Tally, *, cached: bool
    ) -> tuple[list[object], int]:
        """The pooled rows of the tokens vLLM computed, and the position of the first."""
        from vllm import PoolingParams

        params = PoolingParams(task="token_classify", skip_reading_prefix_cache=not cached)
        out = await encode_one(self._llm, request_id, sequence, params, "PRM engine")
        rows = out.outputs.data.tolist()
        if not isinstance(rows, list) or not 0 < len(rows) <= len(sequence):
            raise BackendError("the PRM answered in an unexpected shape (want a row per token)")
        first = len(sequence) - len(rows)
        self.scored_tokens += len(rows)
        tally.scored += len(rows)
        return rows, first

    def _remember(self, key: bytes, reward: float) -> None:
        self._store[key] = reward
        self._store.move_to_end(key)
        while len(self._store) > STORE_SIZE:
            self._store.popitem(last=False)

    async def health(self) -> None:
        if self._llm.errored:
            raise BackendUnavailable("the PRM engine is dead; the server must be restarted")

    async def aclose(self) -> None:
        stopping.stop(self._llm, SHUTDOWN_TIMEOUT_S)


def _prefix_keys(sequence: Sequence[int], tags: Sequence[int]) -> list[bytes]:
    """Per tag position, a hash of the sequence up to and including it (chained)."""
    keys: list[bytes] = []
    prev, start = b"", 0
    for at in tags:
        chunk = ",".join(str(t) for t in sequence[start : at + 1]).encode()
        prev = hashlib.blake2b(prev + b"|" + chunk, digest_size=16).digest()
        keys.append(prev)
        start = at + 1
    return keys


def _right(row: object) -> float:
    if not isinstance(row, list) or len(row) != 2:
        raise BackendError("the PRM answered in an unexpected shape (want [wrong, right])")
    return float(row[RIGHT_LABEL])


class RemotePrm:
    """A PRM behind a vLLM server's ``POST /pooling`` (``token_classify``, token ids in).

    The server must run STEP pooling at ``step_tag_id`` (``--pooler-config``) and share
    the policy's tokenizer (ids are sent as they are).
    """

    def __init__(
        self,
        base_url: str,
        *,
        step_tag_id: int,
        model: str | None = None,
        timeout_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/pooling"
        self.step_tag_id = step_tag_id
        self.model = model
        # Many searches score at once: aiohttp's cheap calls (engines/calls.py).
        self._calls = calls_over(client, Timeouts.of(timeout_s), transport)

    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        if not sequences:
            return []
        body: dict[str, object] = {
            "input": [list(s) for s in sequences],
            "task": "token_classify",
        }
        if self.model is not None:
            body["model"] = self.model
        data = await post_json(self._calls, self.url, body, "PRM server")
        try:
            items = sorted(data["data"], key=lambda r: r["index"])  # type: ignore[index]
            pooled = [item["data"] for item in items]
        except (KeyError, TypeError) as exc:
            raise BackendError("PRM server answered in an unexpected shape") from exc
        if len(pooled) != len(sequences):
            raise BackendError(
                f"PRM server returned {len(pooled)} results for {len(sequences)} inputs"
            )
        return [
            rewards_from_rows(rows, tags=sum(1 for t in seq if t == self.step_tag_id))
            for rows, seq in zip(pooled, sequences, strict=True)
        ]

    async def aclose(self) -> None:
        await self._calls.aclose()
