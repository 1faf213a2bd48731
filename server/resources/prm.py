"""The step search's process reward model as a server resource (``strategies.prm``).

``prm_resources`` is a ``server.resources.builders`` builder. It attaches a
``ProcessRewardModel`` under ``strategies.prm.RESOURCE_KEY`` when a PRM is configured:
a vLLM server's ``/pooling`` at ``prm_url`` (``RemotePrm``), else an in-process vLLM
pooling engine on ``prm_model`` (``PrmEngine``), by default the testbed ``prm`` model
offered by the installed defaults. The rules are the reward model's
(``server.resources.scoring``): a default PRM whose directory is missing, or whose tokenizer is
not the served model's (the testbed's in front of another model), is left out (logged:
the search strategies then answer 503 naming the flags); one named explicitly
(``--prm-model``, ``--prm-url``) that is missing or has another tokenizer fails start-up
loudly. ``--engine remote`` starts no in-process PRM unless ``--prm-model`` asks.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import structlog

from core import defaults
from core.base import Attached
from core.engine import ServedModel
from engines.local.prm import VLLM_DEFAULT_STEP_TAG, RemotePrm, step_tag_of
from server.resources import model_match
from server.settings import Settings
from strategies.prm import RESOURCE_KEY, ProcessRewardModel

log = structlog.get_logger("thinkgate.prm")

LEAVE_OUT = "--prm-model none, no --prm-url"
KIND = "a process reward model"


def _offered() -> Path | None:
    try:
        offered = defaults.installed().prm_model
    except defaults.NoDefaultModel:
        return None
    return None if offered is None else Path(offered)


def prm_model_path(settings: Settings) -> Path | None:
    """The in-process PRM directory; None when disabled."""
    value = settings.prm_model
    if value is None:
        # A gateway in front of remote servers starts no vLLM engine of its own unless
        # asked to: there the PRM is served remotely (--prm-url).
        return None if settings.engine == "remote" else _offered()
    if value.strip().lower() in ("", "none"):
        return None
    return Path(value)


def remote_step_tag(settings: Settings, policy: tuple[int, ...]) -> int:
    """The tag to append for a remote PRM: the setting; else ``--prm-model``'s directory;
    else the default PRM's when it shares the served model's tokenizer (the server then
    serves it, as ``thinkgate replica --prm`` does); else vLLM's default."""
    if settings.prm_step_tag_id is not None:
        return settings.prm_step_tag_id
    named = prm_model_path(settings) if settings.prm_model is not None else None
    if named is not None and (named / "config.json").exists():
        return step_tag_of(named)
    offered = _offered()
    if offered is not None and (offered / "config.json").exists():
        theirs = model_match.local_probe(offered, trust_remote_code=settings.trust_remote_code)
        if model_match.same_tokenizer(policy, theirs):
            return step_tag_of(offered)
    return VLLM_DEFAULT_STEP_TAG


def preflight(settings: Settings) -> None:
    """Before any engine starts: a PRM named by path must share the served model's
    tokenizer (the full check, with the engine's own tokenizer, runs in the builder)."""
    named = settings.prm_model
    if named is None or named.strip().lower() in ("", "none") or settings.prm_url:
        return
    served, prm = Path(settings.model_path), Path(named)
    if not (served / "config.json").exists() or not (prm / "config.json").exists():
        return
    trust = settings.trust_remote_code
    policy = model_match.local_probe(served, trust_remote_code=trust)
    if not model_match.same_tokenizer(
        policy, model_match.local_probe(prm, trust_remote_code=trust)
    ):
        raise model_match.mismatch(
            "prm_model", str(prm), settings.model_name, kind=KIND, leave_out=LEAVE_OUT
        )


async def _remote(
    settings: Settings,
    url: str,
    served: ServedModel,
    policy: tuple[int, ...],
    stack: AsyncExitStack,
) -> ProcessRewardModel:
    seen = model_match.remote_probe(
        url, timeout_s=settings.scorer_timeout_s, transport=settings.transport
    )
    if seen is None:
        log.warning("prm.unchecked", url=url, why="no /tokenize")
    elif not model_match.same_tokenizer(policy, seen[0]):
        raise model_match.mismatch(
            "the PRM server's model",
            f"{seen[1]!r} at {url}",
            served.model_name,
            kind=KIND,
            leave_out=LEAVE_OUT,
        )
    tag = remote_step_tag(settings, policy)
    remote = RemotePrm(
        url,
        step_tag_id=tag,
        timeout_s=settings.scorer_timeout_s,
        transport=settings.transport,
    )
    stack.push_async_callback(remote.aclose)
    log.info("prm.remote", url=url, step_tag_id=tag)
    return ProcessRewardModel(model=remote, step_tag_id=tag, name=seen[1] if seen else url)


async def process_reward_model(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> ProcessRewardModel | None:
    policy = model_match.probe_ids(served.tokens.encode)
    if settings.prm_url:
        return await _remote(settings, settings.prm_url, served, policy, stack)
    path = prm_model_path(settings)
    if path is None:
        log.info("prm.disabled")
        return None
    if not (path / "config.json").exists():
        if settings.prm_model is not None:
            raise RuntimeError(f"prm_model {path} has no config.json")
        log.warning("prm.missing", path=str(path))
        return None
    theirs = model_match.local_probe(path, trust_remote_code=settings.trust_remote_code)
    if not model_match.same_tokenizer(policy, theirs):
        if settings.prm_model is not None:
            raise model_match.mismatch(
                "prm_model", str(path), served.model_name, kind=KIND, leave_out=LEAVE_OUT
            )
        # The default (the testbed's PRM) in front of another model: leave it out.
        log.warning(
            "prm.other_tokenizer",
            path=str(path),
            served=served.model_name,
            hint="--prm-model DIR or --prm-url URL with the served model's tokenizer",
        )
        return None
    from engines.local.launch import start_in_thread
    from engines.local.prm import PrmEngine

    tag = settings.prm_step_tag_id
    prm = await start_in_thread(
        lambda: PrmEngine.start(
            str(path),
            step_tag_id=tag,
            max_model_len=settings.max_model_len,
            dtype=settings.dtype,
            enforce_eager=settings.enforce_eager,
            max_num_seqs=settings.max_num_seqs,
            gpu_memory_utilization=settings.prm_gpu_memory_utilization,
            seed=settings.seed,
            spin_ms=settings.engine_spin_ms,
            executor_choice=settings.executor,
        )
    )
    stack.push_async_callback(prm.aclose)
    log.info("prm.local", path=str(path), step_tag_id=prm.step_tag_id)
    return ProcessRewardModel(
        model=prm, step_tag_id=prm.step_tag_id, name=path.name, max_len=prm.max_model_len
    )


async def prm_resources(settings: Settings, served: ServedModel, stack: AsyncExitStack) -> Attached:
    prm = await process_reward_model(settings, served, stack)
    return {} if prm is None else {RESOURCE_KEY: prm}
