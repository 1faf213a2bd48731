"""Resources of the sampling strategies: their defaults and the configured scorers.

``sampling_resources`` is a ``server.resources.builders`` builder. It attaches:

* ``"sampling"``: ``SamplingDefaults`` (the Best-of-Majority ``alpha`` setting);
* ``"scorers"``: a ``ScorerSet`` with ``logprob`` always, ``reward`` when a reward
  model is configured (a remote vLLM ``/classify`` at ``reward_url``, else an
  in-process vLLM pooling engine on ``reward_model``, by default the testbed reward
  model), ``verifier`` when ``verifier_url`` is set.

A default reward model whose directory is missing, or whose tokenizer is not the
served model's (the testbed's in front of another model), is left out (logged: the
default scorer is then ``logprob``); one named explicitly (``--reward-model``,
``--reward-url``) that is missing or has another tokenizer fails start-up loudly,
naming both models (``server.resources.model_match``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import structlog

from core import defaults
from core.base import Attached
from core.engine import ServedModel
from engines.remote.scorer_clients import RemoteClassify, VerifierClient
from server.resources import model_match
from server.resources.prm import prm_model_path
from server.settings import Settings
from strategies.pool import DEFAULTS_KEY, SamplingDefaults
from strategies.scorers import RESOURCE_KEY as SCORERS_KEY
from strategies.scorers import (
    MeanLogprob,
    RewardModelScorer,
    Scorer,
    ScorerSet,
    SequenceScorer,
    VerifierScorer,
    chatml_turn_end,
)

log = structlog.get_logger("thinkgate.scoring")


def reward_model_path(settings: Settings) -> Path | None:
    """The in-process reward model directory; None when disabled."""
    value = settings.reward_model
    if value is None:
        # A gateway in front of remote servers does not start vLLM in its own process
        # unless asked to: reward models are served remotely there (--reward-url).
        if settings.engine == "remote":
            return None
        offered = defaults.installed().reward_model
        return None if offered is None else Path(offered)
    if value.strip().lower() in ("", "none"):
        return None
    return Path(value)


def preflight(settings: Settings) -> None:
    """Before any engine starts: a reward model named by path must share the served
    model's tokenizer (both local directories: two tokenizer loads, seconds instead of
    an engine start before the same refusal). The full check, with the engine's own
    tokenizer and the remote cases, still runs in ``_reward_model``."""
    named = settings.reward_model
    if named is None or named.strip().lower() in ("", "none") or settings.reward_url:
        return
    served, reward = Path(settings.model_path), Path(named)
    if not (served / "config.json").exists() or not (reward / "config.json").exists():
        return
    trust = settings.trust_remote_code
    policy = model_match.local_probe(served, trust_remote_code=trust)
    if not model_match.same_tokenizer(
        policy, model_match.local_probe(reward, trust_remote_code=trust)
    ):
        raise model_match.mismatch("reward_model", str(reward), settings.model_name)


async def _reward_model(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> SequenceScorer | None:
    policy = model_match.probe_ids(served.tokens.encode)
    if settings.reward_url:
        seen = model_match.remote_probe(
            settings.reward_url, timeout_s=settings.scorer_timeout_s, transport=settings.transport
        )
        if seen is None:
            log.warning("scoring.reward.unchecked", url=settings.reward_url, why="no /tokenize")
        elif not model_match.same_tokenizer(policy, seen[0]):
            raise model_match.mismatch(
                "the reward server's model",
                f"{seen[1]!r} at {settings.reward_url}",
                served.model_name,
            )
        remote = RemoteClassify(
            settings.reward_url,
            timeout_s=settings.scorer_timeout_s,
            transport=settings.transport,
        )
        stack.push_async_callback(remote.aclose)
        log.info("scoring.reward.remote", url=settings.reward_url)
        return remote
    path = reward_model_path(settings)
    if path is None:
        log.info("scoring.reward.disabled")
        return None
    if not (path / "config.json").exists():
        if settings.reward_model is not None:
            raise RuntimeError(f"reward_model {path} has no config.json")
        log.warning("scoring.reward.missing", path=str(path))
        return None
    theirs = model_match.local_probe(path, trust_remote_code=settings.trust_remote_code)
    if not model_match.same_tokenizer(policy, theirs):
        if settings.reward_model is not None:
            raise model_match.mismatch("reward_model", str(path), served.model_name)
        # The default (the testbed's reward model) in front of another model: leave it out.
        log.warning(
            "scoring.reward.other_tokenizer",
            path=str(path),
            served=served.model_name,
            hint="--reward-model DIR or --reward-url URL with the served model's tokenizer",
        )
        return None
    from engines.local.launch import start_in_thread
    from engines.local.reward import RewardEngine

    reward = await start_in_thread(
        lambda: RewardEngine.start(
            str(path),
            max_model_len=settings.max_model_len,
            dtype=settings.dtype,
            enforce_eager=settings.enforce_eager,
            max_num_seqs=settings.max_num_seqs,
            gpu_memory_utilization=settings.reward_gpu_memory_utilization,
            seed=settings.seed,
            spin_ms=settings.engine_spin_ms,
            executor_choice=settings.executor,
        )
    )
    stack.push_async_callback(reward.aclose)
    log.info("scoring.reward.local", path=str(path))
    return reward


async def sampling_resources(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> Attached:
    scorers: list[Scorer] = [MeanLogprob()]
    model = await _reward_model(settings, served, stack)
    if model is not None:
        max_len = getattr(model, "max_model_len", None)
        scorers.append(
            RewardModelScorer(model, turn_end=chatml_turn_end(served.tokens), max_len=max_len)
        )
    if settings.verifier_url:
        verifier = VerifierClient(settings.verifier_url, timeout_s=settings.scorer_timeout_s)
        stack.push_async_callback(verifier.aclose)
        scorers.append(VerifierScorer(verifier))
    names = {s.name for s in scorers}
    default = settings.default_scorer
    beside: str | None = None
    if default == "prm":
        # The PRM is another builder's resource (``server.resources.prm``): the requests
        # resolve it; the set's own default is the fallback where none is attached.
        beside, default = "prm", "logprob"
        if settings.prm_url is None and prm_model_path(settings) is None:
            log.warning("scoring.default.unavailable", wanted="prm", using="logprob")
    elif default not in names:
        log.warning("scoring.default.unavailable", wanted=default, using="logprob")
        default = "logprob"
    return {
        DEFAULTS_KEY: SamplingDefaults(alpha=settings.bom_alpha, scorer=beside),
        SCORERS_KEY: ScorerSet.build(*scorers, default=default),
    }
