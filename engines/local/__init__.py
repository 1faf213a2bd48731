"""The in-process vLLM engine and what runs next to vLLM: supervision, the reward and PRM
engines, the ``thinkgate replica`` command and the vLLM plugins (engine wait, process group)."""
