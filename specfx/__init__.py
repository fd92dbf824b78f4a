"""specfx: a value-carrying torch.fx tracer whose every baked-in decision is
recorded, explained and guarded.

>>> import torch, specfx
>>> def f(x):
...     return torch.cat([*torch.chunk(x, 2)]) if x.sum() > 0 else x
>>> gm = specfx.trace(f, torch.ones(4), policy=specfx.Policy(iter=True, bool=True))
>>> len(gm.specializations)
2

``import specfx`` imports neither torch nor the tracer: the package's contents
(``specfx._api``) load the first time one of its names is used, so that ``python -m
specfx --help`` and a mistyped option answer at once.
"""

import importlib
import sys
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ loads specfx._api
    from ._api import *  # noqa: F403
    from ._api import (
        Coverage,
        GuardCoverage,
        GuardError,
        GuardKind,
        Policy,
        SpecTracer,
        SpecfxError,
        Specialization,
        SpecializationError,
        SpecializationWarning,
        Specialize,
        Specializer,
        TraceCheckError,
        VariantLimitError,
        coverage,
        explain,
        export,
        specializations,
        specialize,
        trace,
    )

__version__ = "0.2.0"

# The guard_* functions are importable from here because generated graph code
# (and its pickles, since 0.1) reference them as `specfx.guard_*`; they are documented
# in specfx.guards and are not API to call.
__all__ = [
    "Coverage",
    "GuardCoverage",
    "GuardError",
    "GuardKind",
    "Policy",
    "SpecTracer",
    "SpecfxError",
    "Specialization",
    "SpecializationError",
    "SpecializationWarning",
    "Specialize",
    "Specializer",
    "TraceCheckError",
    "VariantLimitError",
    "coverage",
    "explain",
    "export",
    "specializations",
    "specialize",
    "trace",
]


def __getattr__(name: str) -> Any:
    """A name of the package, from ``specfx._api`` (imported on the first use of any)."""
    if name.startswith("__") or name == "_api":  # dunders probed by inspect/pickle; _api while it loads
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _api = importlib.import_module(f"{__name__}._api")
    try:
        value = getattr(_api, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    _api = importlib.import_module(f"{__name__}._api")
    return sorted(set(globals()) | set(_api.__all__))


# Graphs pickled by 0.1 and 0.2 name private module paths of their time: keep them loadable.
from ._graph.legacy import install_legacy_paths  # noqa: E402 - after __getattr__, which it uses

install_legacy_paths(sys.modules[__name__])
del install_legacy_paths
