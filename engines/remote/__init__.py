"""The remote engine: vLLM OpenAI servers over HTTP (wire format, one call on one server,
upstream checks and health, balancing) and the HTTP scorer clients."""
