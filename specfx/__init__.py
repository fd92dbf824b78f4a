"""specfx: a value-carrying torch.fx tracer whose every baked-in decision is
recorded, explained and guarded.

>>> import torch, specfx
>>> def f(x):
...     return torch.cat([*torch.chunk(x, 2)]) if x.sum() > 0 else x
>>> gm = specfx.trace(f, torch.ones(4), policy=specfx.Policy(iter=True, bool=True))
>>> len(gm.specializations)
2
"""

import sys

from . import guards  # noqa: F401 - the public module of the guard functions
from .integrations.export import export
from ._graph.specialization import Specialization
from .guards import (  # noqa: F401 - generated graph code imports the guards from here
    GuardKind,
    guard_device,
    guard_dtype,
    guard_float,
    guard_grad_enabled,
    guard_has_attr,
    guard_index,
    guard_int,
    guard_is_none,
    guard_is_tensor,
    guard_item,
    guard_keys,
    guard_layout,
    guard_len,
    guard_ndim,
    guard_numel,
    guard_shape,
    guard_size,
    guard_tolist,
    guard_truth,
    guard_type,
    guard_value,
)
from ._policy.policy import Policy, Specialize
from ._graph.structure import flatten_inputs, rebuild_outputs  # noqa: F401 - called by generated graph code
from ._graph.records import keep_records, rebuild_graph_module  # noqa: F401 - named by pickles of traced graphs
from ._frames.source import SourceLocation  # noqa: F401 - named by pickles of records
from ._graph.retrace import call_function, call_method, getitem  # noqa: F401 - called by generated graph code
from ._graph.caught import raise_caught  # noqa: F401 - called by generated graph code
from ._frames.caught import rebuild_caught  # noqa: F401 - named by pickles of marked graphs
from ._graph.report import explain, specializations
from ._policy.scope import specialize
from ._specializer.specializer import Specializer
from ._trace.trace import trace
from ._trace.coverage import Coverage, GuardCoverage, coverage
from ._capture.tracer import SpecTracer, autocast_enabled  # noqa: F401 - called by generated graph code
from ._trace.options import check_concrete_arg, check_input_type, default_argument  # noqa: F401 - called by generated graph code
from .errors import (
    GuardError,
    SpecfxError,
    SpecializationError,
    SpecializationWarning,
    TraceCheckError,
    VariantLimitError,
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

# Graphs pickled by 0.1 and 0.2 name private module paths of their time: keep them loadable.
from ._graph.legacy import install_legacy_paths

install_legacy_paths(sys.modules[__name__])
del install_legacy_paths
