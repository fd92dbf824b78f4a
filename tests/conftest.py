"""Every test starts from the same random state, whatever ran before it.

Tests that compare a quantized graph with float (SQNR thresholds) or draw inputs with
``torch.randn`` would otherwise depend on how much randomness earlier tests and imports
consumed: a different selection (``-k``), order or package version changes their data, and a
threshold that held for one draw fails for another.
"""

import random

import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded_random_state():
    """Seed torch's and Python's global generators before each test (hypothesis re-seeds
    ``random`` per example itself; torch's generator it leaves alone)."""
    torch.manual_seed(0)
    random.seed(0)
