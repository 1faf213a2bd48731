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
        # Served with a context long enough for an agent harness's first request (its
        # config declares 65,536 positions; its answers past its 512 trained ones are
        # poor, the protocol holds), and its efforts sized by the 512 it thinks within.
        "max_model_len": 65536,  # a replica's vLLM flag
        "effort_context": 512,
    }
