"""thinkgate's PRM server: vLLM's pooling engine behind vLLM's ``POST /pooling`` wire,
with the prefix cache a search needs (``thinkgate replica --prm``).

Why not vLLM's own server: a search scores every path again at every step (prompt and
all its steps so far). vLLM's ``/pooling`` runs the ``token_classify`` task with the
prefix cache off (its STEP pooling cannot read it, and the request has no field to ask),
so each step costs the PRM the whole path. Here the in-process ``PrmEngine`` (ALL
pooling, prefix cache read, rewards kept by the hash of the prefix ending at each step
tag: engines/local/prm.py) answers instead, so a step costs about its own tokens, as it
does in ``thinkgate serve``'s own process.

The wire is vLLM's, so ``--prm-url`` (``RemotePrm``) and any client of vLLM's
``/pooling`` work unchanged: ``{"input": ids | [ids, ...] | text | [text, ...],
"task": "token_classify"}`` answers one ``[p_wrong, p_right]`` row per step tag, as STEP
pooling does; ``usage.prompt_tokens`` counts the tokens asked for and
``usage.prompt_tokens_details.cached_tokens`` those read from the cache. Also
``POST /tokenize`` (the gateway's tokenizer check), ``GET /v1/models``, ``/health`` and
``/metrics`` (``thinkgate_prm_*`` counters). A SIGTERM drains: running requests finish,
up to ``--shutdown-timeout`` seconds.

``python -m engines.local.prm_server --model DIR [--port 8000] ...`` (``--help``).
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from core.errors import GatewayError, InvalidRequest
from engines.local.prm import RIGHT_LABEL, PrmEngine, Tally

MAX_INPUTS: Final = 1024  # sequences per request: one search step of many paths fits


@dataclass
class Counters:
    """What ``/metrics`` publishes (monotonic since start)."""

    requests: int = 0
    sequences: int = 0
    asked_tokens: int = 0
    scored_tokens: int = 0


class Tokenizer:
    """The PRM's own tokenizer (text inputs and ``/tokenize``), loaded on first use."""

    def __init__(self, model: str, *, trust_remote_code: bool = False) -> None:
        self._model = model
        self._trust = trust_remote_code
        self._tok: Any = None

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        if self._tok is None:
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(self._model, trust_remote_code=self._trust)
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))


def _error(exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.envelope(), status_code=exc.status)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidRequest("the body is not JSON") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def _inputs(body: dict[str, Any], tokenizer: Tokenizer) -> list[list[int]]:
    """``input`` as token id lists: ids, a list of id lists, text or a list of texts."""
    raw = body.get("input")
    add_special = body.get("add_special_tokens", True)
    if not isinstance(add_special, bool):
        raise InvalidRequest("add_special_tokens must be a boolean", param="add_special_tokens")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and _is_ids(raw)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest(
            "input must be token ids, a list of token id lists, a text or a list of texts "
            "(messages are not served here)",
            param="input",
        )
    if len(raw) > MAX_INPUTS:
        raise InvalidRequest(f"at most {MAX_INPUTS} inputs per request", param="input")
    out: list[list[int]] = []
    for item in raw:
        if isinstance(item, str):
            out.append(tokenizer.encode(item, add_special_tokens=add_special))
        elif isinstance(item, list) and _is_ids(item):
            out.append([int(t) for t in item])
        else:
            raise InvalidRequest(
                "each input must be a text or a list of token ids (integers >= 0)",
                param="input",
            )
    return out


def _is_ids(items: list[Any]) -> bool:
    return all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in items)


def build_app(
    prm: PrmEngine, *, served_name: str, tokenizer: Tokenizer, owns_engine: bool = True
) -> Starlette:
    """The server's routes over ``prm``; ``owns_engine``: the app stops it on shutdown."""
    routes = _Routes(prm, served_name=served_name, tokenizer=tokenizer)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owns_engine:
                await prm.aclose()

    return Starlette(
        routes=[
            Route("/pooling", routes.pooling, methods=["POST"]),
            Route("/tokenize", routes.tokenize, methods=["POST"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


class _Routes:
    """The server's endpoints over one ``PrmEngine`` and the counters they keep."""

    def __init__(self, prm: PrmEngine, *, served_name: str, tokenizer: Tokenizer) -> None:
        self._prm = prm
        self._served_name = served_name
        self._tokenizer = tokenizer
        self._counters = Counters()
        self._created = int(time.time())

    async def pooling(self, request: Request) -> Response:
        try:
            body = await _body(request)
            sequences = self._sequences(body)
            tally = Tally()
            rewards = await self._prm.step_rewards(sequences, tally)
        except GatewayError as exc:
            return _error(exc)
        counters = self._counters
        counters.requests += 1
        counters.sequences += len(sequences)
        counters.asked_tokens += tally.asked
        counters.scored_tokens += tally.scored
        return JSONResponse(_pooling_answer(self._served_name, sequences, rewards, tally))

    def _sequences(self, body: dict[str, Any]) -> list[list[int]]:
        """The sequences a ``/pooling`` body asks to score, checked against the PRM."""
        model = body.get("model")
        if model is not None and model != self._served_name:
            raise InvalidRequest(f"this server serves {self._served_name!r}", param="model")
        task = body.get("task", "token_classify")
        if task != "token_classify":
            raise InvalidRequest(
                "this PRM server answers task token_classify (a row per step tag)",
                param="task",
            )
        sequences = _inputs(body, self._tokenizer)
        max_model_len = self._prm.max_model_len
        for seq in sequences:
            if not seq:
                raise InvalidRequest("an input has no tokens", param="input")
            if len(seq) > max_model_len:
                raise InvalidRequest(
                    f"an input has {len(seq)} tokens; the PRM's context is {max_model_len}",
                    param="input",
                )
        return sequences

    async def tokenize(self, request: Request) -> Response:
        try:
            body = await _body(request)
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise InvalidRequest("prompt must be a text", param="prompt")
            add_special = body.get("add_special_tokens", True)
            if not isinstance(add_special, bool):
                raise InvalidRequest(
                    "add_special_tokens must be a boolean", param="add_special_tokens"
                )
        except GatewayError as exc:
            return _error(exc)
        ids = self._tokenizer.encode(prompt, add_special_tokens=add_special)
        return JSONResponse(
            {"tokens": ids, "count": len(ids), "max_model_len": self._prm.max_model_len}
        )

    async def models(self, _: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self._served_name,
                        "object": "model",
                        "created": self._created,
                        "owned_by": "thinkgate",
                        "max_model_len": self._prm.max_model_len,
                    }
                ],
            }
        )

    async def health(self, _: Request) -> Response:
        try:
            await self._prm.health()
        except GatewayError as exc:
            return _error(exc)
        return Response(status_code=200)

    async def metrics(self, _: Request) -> Response:
        counters = self._counters
        lines = []
        for name, value, what in (
            ("requests", counters.requests, "pooling requests answered"),
            ("sequences", counters.sequences, "sequences scored"),
            ("asked_tokens", counters.asked_tokens, "tokens of the sequences asked for"),
            ("scored_tokens", counters.scored_tokens, "tokens the engine computed"),
        ):
            metric = f"thinkgate_prm_{name}_total"
            lines += [f"# HELP {metric} {what}", f"# TYPE {metric} counter", f"{metric} {value}"]
        return PlainTextResponse("\n".join(lines) + "\n")


def _pooling_answer(
    served_name: str, sequences: list[list[int]], rewards: list[list[float]], tally: Tally
) -> dict[str, Any]:
    """vLLM's ``/pooling`` answer: a ``[p_wrong, p_right]`` row per step tag."""
    data = [
        {"index": i, "object": "pooling", "data": [_row(r) for r in per_tag]}
        for i, per_tag in enumerate(rewards)
    ]
    tokens = sum(len(s) for s in sequences)
    return {
        "id": f"pool-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": served_name,
        "data": data,
        "usage": {
            "prompt_tokens": tokens,
            "total_tokens": tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": max(0, tally.asked - tally.scored)},
        },
    }


def _row(right: float) -> list[float]:
    row = [0.0, 0.0]
    row[RIGHT_LABEL] = right
    row[1 - RIGHT_LABEL] = 1.0 - right
    return row


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m engines.local.prm_server",
        description="thinkgate's PRM server: vLLM's /pooling wire with the prefix cache.",
    )
    parser.add_argument("--model", required=True, help="the PRM's directory (or hub id)")
    parser.add_argument("--served-model-name", help="the name it answers to (default: --model)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--step-tag-id", type=int, help="default: the model's config.json")
    parser.add_argument(
        "--max-model-len", type=int, default=None, help="default: the PRM's own context"
    )
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, else auto")
    parser.add_argument(
        "--enforce-eager",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="no torch.compile / CUDA graphs (default: on CPU, where compiling adds a minute "
        "to start-up; off elsewhere, vLLM's own default)",
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds a SIGTERM waits for running requests",
    )
    return parser.parse_args(list(argv))


def eager(asked: bool | None, *, on_cpu: bool) -> bool:
    """Whether the engine runs eager: as asked, else on CPU only (compiling there costs
    about a minute of start-up; ``thinkgate replica`` makes the same choice)."""
    return on_cpu if asked is None else asked


def main(argv: Sequence[str]) -> int:
    import os

    import uvicorn
    from vllm.platforms import current_platform

    from engines.local import engine_wait, executor

    args = parse_args(argv)
    on_cpu = current_platform.is_cpu()
    dtype = args.dtype or ("float32" if on_cpu else "auto")
    prm = PrmEngine.start(
        args.model,
        step_tag_id=args.step_tag_id,
        max_model_len=args.max_model_len,
        dtype=dtype,
        enforce_eager=eager(args.enforce_eager, on_cpu=on_cpu),
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        seed=args.seed,
        # The replica command sets the spin in the environment; None: the CPU default.
        spin_ms=float(os.environ[engine_wait.ENV]) if os.environ.get(engine_wait.ENV) else None,
        # vLLM's own switch, which the replica command sets on CPU unless told otherwise.
        executor_choice="mp" if os.environ.get(executor.MULTIPROCESSING_ENV) == "1" else "auto",
    )
    app = build_app(
        prm,
        served_name=args.served_model_name or args.model,
        tokenizer=Tokenizer(args.model, trust_remote_code=args.trust_remote_code),
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=int(args.shutdown_timeout),
    )
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
