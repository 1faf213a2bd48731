"""What a server runs when no model is named: the model an installed package offers.

Packages offer defaults through the ``thinkgate.defaults`` entry-point group (the testbed
offers its trained models, ``testbed.defaults:defaults``), so the runtime never imports
the testbed: without a provider, ``--model`` is simply required. A provider is a
callable returning a mapping with ``model`` (directory or hub id), ``served_name`` and
optionally ``reward_model``, ``prm_model`` (a process reward model for the step search),
``step_delimiter`` (where a reasoning step of that model ends), ``max_model_len`` (a
replica's vLLM flag), ``effort_context`` (the length reasoning efforts are shares of,
where the model was trained on less than it is served with),
``calibration_questions`` (a JSONL file of questions with their answers, one a line:
what ``thinkgate calibrate auto`` measures the model's plans on by default) and
``max_tokens`` (the output limit of a request that sets none, where the model's own
``generation_config.json`` names none).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Final

GROUP: Final = "thinkgate.defaults"


class NoDefaultModel(RuntimeError):
    """No ``--model`` was given and no installed package offers a default."""


@dataclass(frozen=True, slots=True)
class ModelDefaults:
    model: str
    served_name: str
    reward_model: str | None = None
    max_model_len: int | None = None
    prm_model: str | None = None
    step_delimiter: str | None = None
    effort_context: int | None = None
    calibration_questions: str | None = None
    max_tokens: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, object], source: str) -> ModelDefaults:
        model, name = raw.get("model"), raw.get("served_name")
        reward, length = raw.get("reward_model"), raw.get("max_model_len")
        prm, delimiter = raw.get("prm_model"), raw.get("step_delimiter")
        effort, questions = raw.get("effort_context"), raw.get("calibration_questions")
        if not isinstance(model, str | Path) or not isinstance(name, str) or not name:
            raise NoDefaultModel(f"{source} must give 'model' and 'served_name'")
        if reward is not None and not isinstance(reward, str | Path):
            raise NoDefaultModel(f"{source}: 'reward_model' must be a path or id")
        if length is not None and (isinstance(length, bool) or not isinstance(length, int)):
            raise NoDefaultModel(f"{source}: 'max_model_len' must be an integer")
        if prm is not None and not isinstance(prm, str | Path):
            raise NoDefaultModel(f"{source}: 'prm_model' must be a path or id")
        if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
            raise NoDefaultModel(f"{source}: 'step_delimiter' must be a non-empty string")
        if effort is not None and (isinstance(effort, bool) or not isinstance(effort, int)):
            raise NoDefaultModel(f"{source}: 'effort_context' must be an integer")
        if questions is not None and (not isinstance(questions, str | Path) or not questions):
            raise NoDefaultModel(f"{source}: 'calibration_questions' must be a path")
        output = raw.get("max_tokens")
        if output is not None and (
            isinstance(output, bool) or not isinstance(output, int) or output < 1
        ):
            raise NoDefaultModel(f"{source}: 'max_tokens' must be a positive integer")
        return cls(
            str(model),
            name,
            None if reward is None else str(reward),
            length,
            None if prm is None else str(prm),
            delimiter,
            effort,
            None if questions is None else str(questions),
            output,
        )

    def is_default_model(self, model: str | Path) -> bool:
        """Whether ``model`` names this default model (by directory)."""
        return Path(model).resolve() == Path(self.model).resolve()


@functools.cache
def installed() -> ModelDefaults:
    """The first provider's defaults (sorted by entry-point name, so the pick is stable)."""
    providers = sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
    if not providers:
        raise NoDefaultModel(
            "no --model given and no installed package offers a default model "
            f"(entry-point group {GROUP!r}; thinkgate's testbed does)"
        )
    ep = providers[0]
    offer = ep.load()
    raw = offer() if callable(offer) else offer
    if not isinstance(raw, Mapping):
        raise NoDefaultModel(f"default-model provider {ep.value!r} returned {type(raw).__name__}")
    return ModelDefaults.parse(raw, f"default-model provider {ep.value!r}")
