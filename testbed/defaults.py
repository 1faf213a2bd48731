"""The testbed as the server's default model (entry point ``thinkgate.defaults``: the
runtime reads it through ``core.defaults.installed()`` and never imports the testbed)."""

from __future__ import annotations

from testbed import model_path


def defaults() -> dict[str, object]:
    return {
        "model": str(model_path("base")),
        "served_name": "testbed-base",
        "reward_model": str(model_path("reward")),
        "prm_model": str(model_path("prm")),
        "step_delimiter": "\n",  # one thinking line is one step
        "max_model_len": 512,  # the testbed's context (a replica's vLLM flag)
    }
