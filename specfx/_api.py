"""Everything the ``specfx`` package holds, imported at once.

``import specfx`` stays cheap (``python -m specfx --help`` answers without importing torch):
the package loads this module the first time one of its names is used (``specfx.trace``,
``from specfx import Policy``, a pickle naming ``specfx.rebuild_graph_module``). It holds the
public names, the guard functions generated graph code calls as ``specfx.guard_*``, and the
functions and classes pickles of traced graphs name.
"""

from . import guards  # the public module of the guard functions
from .integrations.export import export
from ._graph.specialization import Specialization
from .guards import (  # generated graph code imports the guards from here
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
from ._graph.structure import flatten_inputs, rebuild_outputs  # called by generated graph code
from ._graph.records import keep_records, rebuild_graph_module  # named by pickles of traced graphs
from ._frames.source import SourceLocation  # named by pickles of records
from ._graph.retrace import call_function, call_method, getitem, grad_enabled  # called by generated graph code
from ._graph.caught import raise_caught  # called by generated graph code
from ._graph.guard_flow import guarded  # called by generated graph code
from ._graph.python_random import python_random  # called by generated graph code
from ._graph.message_text import format_message  # called by generated graph code
from ._graph.objects import rebuild_object  # called by generated graph code
from ._graph.module_state import assign_attribute  # called by generated graph code
from ._graph.model_watch import check_model  # called by generated graph code
from ._frames.caught import rebuild_caught  # named by pickles of marked graphs
from ._graph.report import explain, specializations
from ._policy.scope import specialize
from ._specializer.specializer import Specializer
from ._trace.trace import trace
from ._trace.coverage import Coverage, GuardCoverage, coverage
from ._capture.tracer import SpecTracer, autocast_enabled  # called by generated graph code
from ._trace.options import check_concrete_arg, check_input_type, default_argument  # called by generated graph code
from .errors import (
    GuardError,
    SpecfxError,
    SpecializationError,
    SpecializationWarning,
    TraceCheckError,
    VariantLimitError,
)


# every name above: `from ._api import *` in the package's TYPE_CHECKING block sees them all
__all__ = [
    "Coverage",
    "GuardCoverage",
    "GuardError",
    "GuardKind",
    "Policy",
    "SourceLocation",
    "SpecTracer",
    "SpecfxError",
    "Specialization",
    "SpecializationError",
    "SpecializationWarning",
    "Specialize",
    "Specializer",
    "TraceCheckError",
    "VariantLimitError",
    "assign_attribute",
    "autocast_enabled",
    "call_function",
    "call_method",
    "check_concrete_arg",
    "check_input_type",
    "check_model",
    "coverage",
    "default_argument",
    "explain",
    "export",
    "flatten_inputs",
    "format_message",
    "getitem",
    "grad_enabled",
    "guard_device",
    "guard_dtype",
    "guard_float",
    "guard_grad_enabled",
    "guard_has_attr",
    "guard_index",
    "guard_int",
    "guard_is_none",
    "guard_is_tensor",
    "guard_item",
    "guard_keys",
    "guard_layout",
    "guard_len",
    "guard_ndim",
    "guard_numel",
    "guard_shape",
    "guard_size",
    "guard_tolist",
    "guard_truth",
    "guard_type",
    "guard_value",
    "guarded",
    "guards",
    "keep_records",
    "python_random",
    "raise_caught",
    "rebuild_caught",
    "rebuild_graph_module",
    "rebuild_object",
    "rebuild_outputs",
    "specializations",
    "specialize",
    "trace",
]
