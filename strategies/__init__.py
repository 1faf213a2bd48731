"""Test-time-scaling strategies: one module per strategy, plus the shared contract."""
