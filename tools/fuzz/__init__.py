"""Differential fuzzing against eager (README.md lists the entry points)."""
