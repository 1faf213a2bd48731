"""Benchmarks: scripts that print a table and write it under benchmarks/results/<module>/."""
