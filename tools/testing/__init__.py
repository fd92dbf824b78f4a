"""Checks of the test suite itself: does it catch plausible bugs (``python -m tools.testing.mutation``)."""
