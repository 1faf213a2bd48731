"""The wrapper model that makes hidden states available to the guidance processor.

:class:`BGQwen2ForCausalLM` is vLLM's ``Qwen2ForCausalLM`` plus two things:

* ``compute_logits`` puts the hidden states it receives into
  :data:`kernels.guidance.stash.STASH` (exactly the rows the sampler will see, in
  order), so the processor runs the predictor on them in the same step: no second
  forward pass;
* it owns the predictor (``bg_predictor.*`` parameters), loaded from
  ``MODEL_DIR/bg_predictor/`` beside the checkpoint (or from a profile's directory named
  by ``hf_overrides[HOME_KEY]``), and installs it with the token
  facts from the predictor's config (``</think>`` id, newline-token mask).

Select it with ``hf_overrides={"architectures": [ARCHITECTURE]}`` on a model directory
that has a predictor; the architecture is registered by :func:`kernels.guidance.plugin.register`
(entry point group ``vllm.general_plugins``). Selecting it on a directory without a
predictor fails the engine start with a message saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

from kernels.guidance import plugin as bg_plugin
from kernels.guidance.predictor import (
    PREDICTOR_DIR,
    WEIGHTS_FILE,
    BudgetPredictor,
    has_predictor,
    load_config,
)
from kernels.guidance.stash import STASH, GuidanceModel

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

ARCHITECTURE = bg_plugin.ARCHITECTURE
_PREFIX = "bg_predictor."


class BGQwen2ForCausalLM(Qwen2ForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        hf = vllm_config.model_config.hf_config
        # The predictor beside the model, or a profile's (bg_plugin.HOME_KEY).
        model_dir = Path(getattr(hf, bg_plugin.HOME_KEY, None) or vllm_config.model_config.model)
        if not has_predictor(model_dir):
            raise ValueError(
                f"{ARCHITECTURE} needs a budget predictor in {model_dir / PREDICTOR_DIR} "
                "(train one with `thinkgate train-predictor`), or serve the plain architecture"
            )
        config = load_config(model_dir)
        if (config.hidden_size, config.vocab_size) != (hf.hidden_size, hf.vocab_size):
            raise ValueError(
                f"predictor in {model_dir / PREDICTOR_DIR} was trained for hidden size "
                f"{config.hidden_size} / vocab {config.vocab_size}, model has "
                f"{hf.hidden_size} / {hf.vocab_size}"
            )
        self._model_dir = model_dir
        self.bg_predictor = BudgetPredictor(config)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        logits = super().compute_logits(hidden_states)
        # A reference, not a copy: the runner gathers a fresh tensor for the sampled rows.
        STASH.put(hidden_states)
        return logits

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The checkpoint's weights, then the predictor's side file.

        Returns the predictor's parameter names too: vLLM's loader fails the start when
        a parameter was not reported as loaded.
        """
        from safetensors.torch import load_file

        loaded = set(super().load_weights((k, w) for k, w in weights if not k.startswith(_PREFIX)))
        state = load_file(str(self._model_dir / PREDICTOR_DIR / WEIGHTS_FILE))
        self.bg_predictor.load_state_dict(state, strict=True)
        self.bg_predictor.float().eval()
        config = self.bg_predictor.config
        device = self.bg_predictor.fc1.weight.device
        boundary = torch.zeros(config.vocab_size, dtype=torch.bool, device=device)
        if config.boundary_token_ids:
            boundary[list(config.boundary_token_ids)] = True
        STASH.install(
            GuidanceModel(
                predictor=self.bg_predictor,
                think_end_id=config.think_end_id,
                think_end_ids=config.think_end_ids,
                boundary=boundary,
                boundary_ids=frozenset(config.boundary_token_ids),
            )
        )
        logger.info(
            "thinkgate budget guidance: predictor loaded from %s (%d boundary tokens)",
            self._model_dir / PREDICTOR_DIR,
            len(config.boundary_token_ids),
        )
        return loaded | {_PREFIX + k for k in state}
