"""OpenAI's chat and completions wire: the request models, the SDK fields decided, response
bodies and chunks, SSE framing.
"""
