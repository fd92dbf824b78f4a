"""``export``: a specialized graph as a ``torch.export.ExportedProgram``, with every
guard lowered to a check that export, PT2E quantization and ``torch.compile`` keep.

A specfx guard is a Python function: under ``torch.export`` it would run once on
fake values (``bool()`` of a data-dependent value fails there, a length check
passes and leaves nothing), and under ``torch.compile`` it breaks the graph.
Lowered, each guard kind becomes what those tools keep as part of the program:

- a value read from tensor data (``bool``, ``int``, ``float``, ``item``, ``tolist``...)
  becomes ``aten._assert_async.msg(condition, message)`` on the tensor, with the
  specfx message (the assumption and the user's source line);
- a value that depends on a dynamic dimension (a shape predicate, ``x.size(0)``) becomes the
  same assertion on the symbolic size (``sym_size`` → ``scalar_tensor`` → assert);
- a decision on what export answers once on fake values (a tensor's contiguity, strides,
  layout, dtype, ``requires_grad``, Python type or attributes, grad mode, autocast) becomes a
  call of the custom operator ``specfx::check`` on the input, which raises specfx's
  GuardError per call (``integrations/export_reads.py``); ``device`` becomes
  ``aten._assert_tensor_metadata``;
- a value export itself fixed (a dimension it specialized, the length of a list, a
  dict's keys, an argument that is ``None``, a Python value) is checked once while
  exporting; the program's module then checks the inputs at entry, with specfx's error,
  before torch.export's own checks, whose errors are translated
  (``integrations/export_entry.py``).

:func:`lower_guards` is the graph pass (keyed on the guard kinds). The lowerings
themselves (:data:`LOWERINGS`, in ``specfx/_checks/lowered.py``) also run whenever a guard is
reached under ``torch.compile`` (see :func:`lowered_guard`), so compiled specfx graphs do not
break at guards.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Set, Tuple, Union

import torch
import torch.fx
from torch.export import Dim
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .._checks.lowered import LOWERINGS
from .._graph.specialization import Specialization
from .._graph.report import list_decisions
from ..guards import COMPILED, GUARD_FUNCTIONS
from .._policy.messages import export_refused_data_branch
from .._trace.trace import PolicyLike, trace
from ..errors import SpecializationError, SpecializationWarning
from .export_entry import install as install_entry_checks
from .export_reads import run_time_reads

__all__ = ["LOWERINGS", "export", "lower_guards", "lowered_guard"]

DynamicShapes = Union[str, Dict[str, Any], Tuple[Any, ...], list, None]

def lowered_guard(guard: Callable[..., None]) -> Optional[Callable[..., Optional[torch.Tensor]]]:
    """The export-/compile-native check for a guard function (``None`` if it is not one).

    >>> import specfx
    >>> lowered_guard(specfx.guard_truth) is LOWERINGS[specfx.GuardKind.BOOL]
    True
    """
    return COMPILED.get(guard)





def lower_guards(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` (sharing its parameters) whose guard nodes call their lowered
    checks, ready for ``torch.export``; unused nodes are removed. Every guard node is
    lowered or this raises.

    >>> import torch, specfx
    >>> gm = specfx.trace(lambda x: x if x.sum() > 0 else -x, torch.ones(2), policy="bool")
    >>> [n.target.__name__ for n in lower_guards(gm).graph.nodes if n.op == "call_function"][-2:]
    ['_check_truth', 'guarded']
    """
    graph = copy.deepcopy(gm.graph)
    run_time_reads(graph)  # decisions export would answer once, on fake values: asked per call
    for node in graph.nodes:
        if node.op != "call_function" or not callable(node.target):
            continue
        lowered = COMPILED.get(node.target)
        if lowered is not None:
            node.target = lowered
        elif node.target in GUARD_FUNCTIONS:  # (specfx's other graph functions run as they are)
            raise NotImplementedError(f"specfx.export has no lowering for the guard {node.target.__name__}")
    lowered_gm = torch.fx.GraphModule(gm, graph, type(gm).__name__)
    lowered_gm.graph.eliminate_dead_code()  # unused outputs (BERT's pooler) would only confuse quantizers
    lowered_gm.recompile()
    lowered_gm.meta.update(gm.meta)
    return lowered_gm


def export(
    root: Union[torch.nn.Module, Callable[..., Any]],
    example_inputs: Any = None,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    *,
    policy: PolicyLike = None,
    dynamic_shapes: DynamicShapes = "auto",
    **trace_options: Any,
) -> torch.export.ExportedProgram:
    """Specialize ``root`` exactly as :func:`specfx.trace` does, then export the
    specialized graph with ``torch.export.export`` (non-strict).

    Every guard survives as a run-time check of the program (through
    ``run_decompositions``, torchao PT2E ``prepare_pt2e``/``convert_pt2e`` and
    ``ep.module()``): data decisions as ``aten._assert_async.msg`` with the specfx
    message, decisions on dynamic sizes as assertions on the symbolic size, metadata,
    types and modes by ``specfx::check`` per call, and what export fixes itself (static
    dimensions, list lengths, the inputs' structure) by the module's entry checks, in
    specfx's words, before export's own. A leaf module that branches on data is refused
    (``SpecializationError``). ``dynamic_shapes="auto"`` exports every input
    dimension that no decision fixed as dynamic (``Dim.AUTO``: export keeps it
    static where the graph needs it); pass torch.export's ``dynamic_shapes`` to
    choose, or ``None`` for all static. ``trace_options`` are :func:`specfx.trace`'s
    keywords; ``guards=False`` exports no checks and warns which decisions are left
    unchecked.

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else -x
    >>> ep = specfx.export(f, (torch.ones(2, 3),), policy=specfx.Policy(bool=True))
    >>> ep.module()(torch.ones(5, 3)).shape          # batch 5: the dims are dynamic
    torch.Size([5, 3])
    >>> ep.module()(-torch.ones(2, 3))               # the other branch: the guard fires
    Traceback (most recent call last):
    RuntimeError: specfx guard failed: the graph was specialized assuming bool(x.sum() > 0) == True, ...
    """
    args, kwargs = _call_arguments(example_inputs, example_kwargs)
    gm = trace(root, example_inputs, example_kwargs, policy=policy, **trace_options)
    specs = _auto_dynamic_shapes(gm, args, kwargs) if dynamic_shapes == "auto" else dynamic_shapes
    if not trace_options.get("guards", True):
        _warn_unchecked(gm)
    if isinstance(specs, str):
        raise ValueError(f'dynamic_shapes= takes "auto", None or torch.export\'s dynamic_shapes; got {specs!r}')
    try:
        program = torch.export.export(lower_guards(gm), args, kwargs, dynamic_shapes=specs, strict=False)
    except GuardOnDataDependentSymNode as error:
        raise _refused(gm, error) from error
    if trace_options.get("guards", True):
        install_entry_checks(program, gm)
    return program


def _refused(gm: torch.fx.GraphModule, error: Exception) -> SpecializationError:
    """torch.export stopped at a branch on tensor data: one in code specfx did not trace (a
    leaf module or wrapped function, which export traces itself), since specfx's own branches
    are decisions with guards."""
    leaves = sorted({f"{node.target} ({type(gm.get_submodule(str(node.target))).__qualname__})"
                     for node in gm.graph.nodes if node.op == "call_module"
                     and not type(gm.get_submodule(str(node.target))).__module__.startswith("torch.")})
    return SpecializationError(export_refused_data_branch(", ".join(leaves), str(error).splitlines()[0]),
                               operation="torch.export.export")


def _call_arguments(example_inputs: Any, example_kwargs: Optional[Mapping[str, Any]]) -> Tuple[tuple, dict]:
    if example_inputs is None and example_kwargs is None:
        raise TypeError("specfx.export needs example inputs: export(model, (x,), ...)")
    args = example_inputs if isinstance(example_inputs, tuple) else (
        () if example_inputs is None else (example_inputs,))
    return args, dict(example_kwargs or {})


def _fixed_dims(gm: torch.fx.GraphModule) -> Dict[str, Set[int]]:
    """Input name -> the dimensions a shape decision baked in (exported static)."""
    nodes = {node.name: node for node in gm.graph.nodes}
    placeholders = {node.name: node for node in gm.graph.nodes if node.op == "placeholder"}
    fixed: Dict[str, Set[int]] = {}
    for record in _records(gm):
        node = placeholders.get(record.node)
        if node is None or record.kind not in ("shape", "size", "numel"):
            continue
        rank = len(node.meta["tensor_meta"].shape) if "tensor_meta" in node.meta else 0
        dims = set(range(rank))
        if record.kind == "size":
            dim = _size_dim(record, nodes)
            dims = {dim % rank} if dim is not None and rank else dims
        fixed.setdefault(str(node.target), set()).update(dims)
    return fixed


def _records(gm: torch.fx.GraphModule) -> list[Specialization]:
    return list(getattr(gm, "specializations", []))


def _size_dim(record: Specialization, nodes: Mapping[str, torch.fx.Node]) -> Optional[int]:
    guard = nodes.get(record.guard) if record.guard else None
    if guard is not None:
        return int(guard.args[1])  # type: ignore[arg-type]  # (value, dim, expected, what, where)
    digits = record.expression.rpartition("(")[2].rstrip(")")  # "x.size(1)" without a guard node
    return int(digits) if digits.lstrip("-").isdigit() else None


def _auto_dynamic_shapes(gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Dict[str, Any]:
    """Every dimension of every tensor input dynamic (``Dim.AUTO``), except the ones a
    shape decision fixed; keyed by the GraphModule's parameter names."""
    fixed = _fixed_dims(gm)
    bound = inspect.signature(gm.forward).bind(*args, **kwargs)

    def spec(name: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            static = fixed.get(name, set())
            return {dim: Dim.AUTO for dim in range(value.dim()) if dim not in static}
        if isinstance(value, (list, tuple)):
            return type(value)(spec("", item) for item in value)
        if isinstance(value, dict):
            return {key: spec("", item) for key, item in value.items()}
        return None

    return {name: spec(name, value) for name, value in bound.arguments.items()}


def _warn_unchecked(gm: torch.fx.GraphModule) -> None:
    records = _records(gm)
    if not records:
        return
    shown = list_decisions(records, 8)
    warnings.warn(
        f"specfx.export(guards=False): {len(records)} decision(s) are baked into the program "
        f"without run-time checks; an input that breaks one gives a silently different answer "
        f"(only the dimensions export keeps static are still checked, by export itself):\n{shown}",
        SpecializationWarning,
        stacklevel=3,
    )


