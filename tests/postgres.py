"""The throwaway PostgreSQL server of the batch store tests (benchmarks.postgres)."""

from benchmarks.postgres import postgres_server

__all__ = ["postgres_server"]
