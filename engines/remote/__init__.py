"""The remote engine: vLLM OpenAI servers over HTTP (wire format, upstream checks, balancing)
and the HTTP scorer clients."""
