"""Every test starts from the same random state, whatever ran before it.

Tests that compare a quantized graph with float (SQNR thresholds) or draw inputs with
``torch.randn`` would otherwise depend on how much randomness earlier tests and imports
consumed: a different selection (``-k``), order or package version changes their data, and a
threshold that held for one draw fails for another.
"""

import os
import random

import pytest
import torch
from hypothesis import settings

# Hypothesis draws new examples on every local run (to keep finding bugs); under CI (CI set, as
# CI services do) the same examples every run, so a result does not depend on the run's luck.
settings.register_profile("ci", derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def pytest_report_header(config):
    """Name the hypothesis profile in force in pytest's header."""
    return f"hypothesis profile: {settings.get_current_profile_name()}"


@pytest.fixture(autouse=True)
def _seeded_random_state():
    """Seed torch's and Python's global generators before each test (hypothesis re-seeds
    ``random`` per example itself; torch's generator it leaves alone)."""
    torch.manual_seed(0)
    random.seed(0)
