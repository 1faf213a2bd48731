"""Our vLLM logits processors: one spec per kernel, read by every place that loads,
routes to or checks for one (the local engine, the remote engine's routing and server
probes, ``thinkgate replica``, ``--logits-processors``).

vLLM 0.32 has two processor interfaces and each runner's loader refuses the other's
classes: the V1 runner (CPU, or ``VLLM_USE_V2_MODEL_RUNNER=0``) and Model Runner V2
(the GPU default when Triton is present). Settings name processors by what they do
(``elastic``, ``guidance``); the engine picks the class for the runner it got.

A fourth processor is one more :class:`ProcessorSpec` in :data:`SPECS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from kernels.confidence import args as conf_args
from kernels.elastic import args as elastic_args
from kernels.guidance import args as guidance_args

Runner = Literal["v1", "v2"]

# A string where an int is expected: every thinkgate processor refuses it by name.
PROBE_VALUE: Final = "thinkgate-probe"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessorSpec:
    """What the rest of thinkgate needs to know about one logits processor."""

    name: str  # the short name settings and ``Engine.processors`` use
    v1: str  # ``module:Class`` for vLLM's V1 runner
    v2: str  # ``module:Class`` for Model Runner V2
    # The ``extra_args`` key a request that wants this processor carries: a call with it
    # must reach an engine (a server) that has the processor loaded.
    opt_in: str
    # ``extra_args`` the processor refuses at admission (a 400 naming ``opt_in``): how
    # a gateway learns whether a vLLM server has it loaded (vLLM lists none).
    probe: Mapping[str, object] = field(default_factory=dict)
    # The model must be served through a wrapper architecture (``hf_overrides``) that
    # hands the processor more than logits; usable only with a model that ships what the
    # wrapper needs (``kernels.guidance.predictor.has_predictor``).
    wrapped: bool = False

    def class_for(self, runner: Runner) -> str:
        return self.v1 if runner == "v1" else self.v2


# Loaded by default (the local engine, ``thinkgate replica``), in this order: confidence
# reads raw logits, so it runs before the processors that mask or steer them.
SPECS: Final[tuple[ProcessorSpec, ...]] = (
    ProcessorSpec(
        name=conf_args.PROCESSOR_NAME,
        v1="kernels.confidence.vllm_v1:ConfidenceLogitsProcessor",
        v2="kernels.confidence.vllm_v2:ConfidenceLogitsProcessorV2",
        opt_in=conf_args.THRESHOLD,
        probe={conf_args.THRESHOLD: PROBE_VALUE},
    ),
    ProcessorSpec(
        name=elastic_args.PROCESSOR_NAME,
        v1="kernels.elastic.vllm_v1:ElasticLogitsProcessor",
        v2="kernels.elastic.vllm_v2:ElasticLogitsProcessorV2",
        opt_in=elastic_args.THINKING_BUDGET,
        probe={elastic_args.THINKING_BUDGET: PROBE_VALUE, elastic_args.THINK_END_ID: 0},
    ),
    ProcessorSpec(
        name=guidance_args.PROCESSOR_NAME,
        v1="kernels.guidance.vllm_v1:BudgetGuidanceLogitsProcessor",
        v2="kernels.guidance.vllm_v2:BudgetGuidanceLogitsProcessorV2",
        opt_in=guidance_args.BUDGET,
        probe={guidance_args.BUDGET: PROBE_VALUE},
        wrapped=True,
    ),
)
BY_NAME: Final[dict[str, ProcessorSpec]] = {s.name: s for s in SPECS}
DEFAULT: Final[tuple[str, ...]] = tuple(s.name for s in SPECS)


def spec_for(name_or_spec: str, runner: Runner) -> str:
    """``module:Class`` for a short name (``elastic``) or a spec given as is."""
    if ":" in name_or_spec:
        return name_or_spec
    try:
        return BY_NAME[name_or_spec].class_for(runner)
    except KeyError:
        known = ", ".join(sorted(BY_NAME))
        raise ValueError(
            f"unknown logits processor {name_or_spec!r}: a short name ({known}) or 'module:Class'"
        ) from None


def wanted_by(extra_args: Mapping[str, object]) -> frozenset[str]:
    """The processors a call's ``extra_args`` are meant for (it must not land elsewhere)."""
    return frozenset(s.name for s in SPECS if s.opt_in in extra_args)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSetup:
    """Which of the asked processors a model can run, and the ``hf_overrides`` that
    select the wrappers they need."""

    names: tuple[str, ...]  # the asked names (and ``module:Class`` specs) it keeps, in order
    hf_overrides: Mapping[str, object]
    dropped: tuple[str, ...]  # asked, but the model lacks what their wrapper needs


def model_setup(
    names: Iterable[str], model_path: str, predictor_home: str | None = None
) -> ModelSetup:
    """The processors of ``names`` usable with the model at ``model_path``: a wrapped one
    only when the model ships what its wrapper reads (without it the processor could
    only pass logits through, so it is left out and its strategy answers 503).
    ``predictor_home``: a directory whose ``bg_predictor/`` (a profile's, fitted on a
    workload) is used in place of the model's own, where it has one."""
    from kernels.guidance import plugin as bg_plugin
    from kernels.guidance.predictor import has_predictor

    kept: list[str] = []
    dropped: list[str] = []
    overrides: dict[str, object] = {}
    for name in names:
        spec = BY_NAME.get(name)
        if spec is None or not spec.wrapped:
            kept.append(name)
        elif predictor_home is not None and has_predictor(predictor_home):
            kept.append(name)
            overrides.update(bg_plugin.hf_overrides(predictor_home))
        elif has_predictor(model_path):
            kept.append(name)
            overrides.update(bg_plugin.hf_overrides())
        else:
            dropped.append(name)
    return ModelSetup(names=tuple(kept), hf_overrides=overrides, dropped=tuple(dropped))
