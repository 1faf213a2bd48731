"""The shared contract every layer speaks: the error tree and its OpenAI envelope, the
Engine protocol, the strategy base types, budgets, the strategy registry, installed
defaults, reasoning formats and token confidence. It imports nothing else of thinkgate's
(tests/test_layers.py, docs/architecture.md)."""
