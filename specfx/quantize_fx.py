"""``specfx.quantize_fx``: FX graph-mode quantization of specfx graphs.

The public path of :mod:`specfx.integrations.quantize_fx`.
"""

from .integrations.quantize_fx import *  # noqa: F403
from .integrations.quantize_fx import __all__  # noqa: F401
