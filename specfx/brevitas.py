"""``specfx.brevitas``: hand specfx graphs to Brevitas' graph quantization.

The public path of :mod:`specfx.integrations.brevitas` (importing it imports Brevitas).
"""

from .integrations.brevitas import *  # noqa: F403
from .integrations.brevitas import __all__  # noqa: F401
