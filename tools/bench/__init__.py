"""Benchmarks: what specfx costs (README.md lists the entry points)."""
