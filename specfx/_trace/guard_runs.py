"""Running a traced graph's guards ahead of its computation, and undoing a run.

Shared by the :class:`~specfx.Specializer` (choosing a variant), :func:`specfx.coverage`
and ``trace(..., calibration=)`` (checking a set of batches).

- The *prologue* holds the guards that read input metadata only (shapes,
  lengths, dict keys, ``is None``, predicates on those), never data, and never a
  container the forward mutates before the guard (``xs.append(x)`` then
  ``len(xs)``); it runs before any of the model.
- What a run up to a guard may have written (:class:`Writes`) is read once from the
  graph: the ops before its last guard the prologue cannot check, the
  placeholders and parameters/buffers/generators their written tensors may alias
  (ATen schemas tell which ops return new memory), train-mode modules with
  buffers, random draws, user-defined leaves and wrapped functions (everything
  they are given, their modules' whole state). Before such a run its caller saves
  exactly that (:class:`Checkpoint`) and puts it back when it must, so the next
  attempt starts from what the caller passed. A graph that writes nothing there
  saves nothing.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

import torch
import torch.fx
from torch.utils import _pytree as pytree

from .._capture.evaluation import INPLACE_FUNCTIONS, callable_from_torch, is_random_name, is_torch_module, module_may_draw
from .._capture.state import StateKeeper, restore_contents
from .._graph.structure import entry_only
from ..guards import GUARD_FUNCTIONS

__all__ = ["Checkpoint", "LIVE_MODEL", "Writes", "build_prologue", "late_and_early_guards", "saved_paths", "writes_before"]

# the attribute through which a Specializer's variants read the live model (see _specializer/variants.py)
LIVE_MODEL = "_specfx_model"

# Ops that only read input metadata: a guard depending on nothing else can run up front.
_METADATA_FUNCTIONS = frozenset(
    {getattr, len, operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
     operator.truediv, operator.mod, operator.neg, operator.eq, operator.ne, operator.lt,
     operator.le, operator.gt, operator.ge, operator.and_, operator.or_, operator.not_,
     operator.contains}
)
_METADATA_METHODS = frozenset({"size", "dim", "numel", "nelement", "keys", "items", "values"})
_METADATA_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "layout"})
# Methods that change a Python container in place.
_MUTATING_METHODS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                               "popitem", "sort", "reverse", "__setitem__", "__delitem__", "add", "discard"})
_MUTATING_FUNCTIONS = frozenset({operator.setitem, operator.delitem, operator.iadd, operator.imul})


def _name(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _mutated_containers(graph: torch.fx.Graph) -> Set[torch.fx.Node]:
    mutated = set()
    for node in graph.nodes:
        first = node.args[0] if node.args else None
        if not isinstance(first, torch.fx.Node):
            continue
        if (node.op == "call_method" and node.target in _MUTATING_METHODS) or (
                node.op == "call_function" and node.target in _MUTATING_FUNCTIONS):
            mutated.add(first)
    return mutated


def _is_metadata_node(node: torch.fx.Node, mutated: Set[torch.fx.Node]) -> bool:
    if node in mutated:
        return False
    if node.op in ("placeholder", "get_attr"):
        return True
    if node.op == "call_method":
        return node.target in _METADATA_METHODS
    if node.op == "call_function":
        if node.target is getattr:
            return len(node.args) > 1 and node.args[1] in _METADATA_ATTRIBUTES
        if node.target is operator.getitem:
            # indexing a container or a size reads metadata; indexing a tensor reads data
            source = node.args[0]
            kind = source.meta.get("type") if isinstance(source, torch.fx.Node) else type(source)
            return kind is not None and not issubclass(kind, torch.Tensor)
        return node.target in _METADATA_FUNCTIONS
    return False


def _is_guard(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in GUARD_FUNCTIONS


def build_prologue(gm: torch.fx.GraphModule) -> Optional[torch.fx.GraphModule]:
    """A graph with the same inputs as ``gm`` that runs only ``gm``'s guards on
    input metadata (None if there are none)."""
    mutated = _mutated_containers(gm.graph)
    cone: Dict[torch.fx.Node, bool] = {}

    def metadata_only(node: torch.fx.Node) -> bool:
        if node not in cone:
            cone[node] = _is_metadata_node(node, mutated) and all(metadata_only(n) for n in node.all_input_nodes)
        return cone[node]

    keep = set()
    for node in gm.graph.nodes:
        if _is_guard(node) and all(metadata_only(n) for n in node.all_input_nodes):
            keep.add(node)
            stack = list(node.all_input_nodes)
            while stack:
                dependency = stack.pop()
                if dependency not in keep:
                    keep.add(dependency)
                    stack.extend(dependency.all_input_nodes)
    if not any(_is_guard(n) for n in keep):
        return None
    graph = torch.fx.Graph()
    copies: Dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder" or node in keep:
            copied = graph.node_copy(node, lambda n: copies[n])
            copied.meta = dict(node.meta)
            copies[node] = copied
    graph.output(None)
    # the same signature and entry check as the variant (inputs given as containers flatten alike)
    graph._codegen = entry_only(gm.graph._codegen)
    prologue = torch.fx.GraphModule(gm, graph, f"{type(gm).__name__}Prologue")
    if LIVE_MODEL in gm._modules:
        prologue._modules[LIVE_MODEL] = gm._modules[LIVE_MODEL]
    return prologue


# -- what a failed attempt may have written -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Writes:
    """What running a variant may change before a guard the prologue cannot check
    fails (found once, from the graph); what a :class:`Checkpoint` saves.

    ``inputs``: the caller's tensors or containers; ``state``: ``get_attr`` targets
    (parameters, buffers, generators, read on the live model at call time);
    ``buffers``: ``call_module`` targets whose buffers a call updates (train-mode
    BatchNorm); ``modules``: user-defined leaves, whose whole state (parameters,
    buffers, Python attributes and containers, generators) is saved; ``rng``:
    torch's global RNG; ``python_rng``: Python's and numpy's (user code runs)."""

    inputs: bool = False
    state: Tuple[str, ...] = ()
    buffers: Tuple[str, ...] = ()
    modules: Tuple[str, ...] = ()
    rng: bool = False
    python_rng: bool = False

    def __bool__(self) -> bool:
        return bool(self.inputs or self.state or self.buffers or self.modules or self.rng or self.python_rng)


def _fresh(name: str) -> bool:
    """Whether the op ``name`` always returns new memory (per its ATen schema, no
    output aliases an input; composite ops may return their input, ``type_as``)."""
    known = _FRESH.get(name)
    if known is None:
        packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
        try:
            overloads = [getattr(packet, o) for o in packet.overloads()] if packet is not None else []
        except RuntimeError:  # no such ATen op
            overloads = []
        pure = [o for o in overloads if not o._schema.is_mutable]
        known = _FRESH[name] = bool(pure) and all(
            r.alias_info is None for o in pure for r in o._schema.returns) and not any(map(_composite, pure))
    return known


def _composite(overload: Any) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeImplicitAutograd"))
    except RuntimeError:  # TorchScript's scalar overloads (add.t): not dispatcher ops
        return False


_FRESH: Dict[str, bool] = {}


def _aliases(graph: torch.fx.Graph) -> Dict[torch.fx.Node, FrozenSet[torch.fx.Node]]:
    """For each node, the placeholders and ``get_attr``s whose memory its value may
    share (conservatively: every input's, unless the op always returns new memory)."""
    roots: Dict[torch.fx.Node, FrozenSet[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            roots[node] = frozenset((node,))
        elif node.op in ("call_function", "call_method") and _fresh(_name(node.target)) and \
                not node.kwargs.get("inplace") and "out" not in node.kwargs:
            roots[node] = frozenset()
        else:
            roots[node] = frozenset().union(*(roots.get(n, frozenset()) for n in node.all_input_nodes))
    return roots


def _module(gm: torch.fx.GraphModule, target: str) -> Optional[torch.nn.Module]:
    try:
        found = operator.attrgetter(target)(gm)
    except AttributeError:
        return None
    return found if isinstance(found, torch.nn.Module) else None


def _node_writes(node: torch.fx.Node, gm: torch.fx.GraphModule,
                 roots: Dict[torch.fx.Node, FrozenSet[torch.fx.Node]]) -> Tuple[Set[torch.fx.Node], Writes]:
    """The roots ``node`` may write to, and what else it may change."""
    first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    written: Set[torch.fx.Node] = set()
    name = _name(node.target)
    if node.op == "call_module":
        module = _module(gm, str(node.target))
        if module is None or not all(is_torch_module(m) for m in module.modules()):
            for argument in node.all_input_nodes:  # a user-defined leaf may do anything
                written |= roots[argument]
            return written, Writes(modules=(str(node.target),), rng=True, python_rng=True)
        if any(getattr(m, "inplace", False) is True for m in module.modules()) and first is not None:
            written |= roots[first]
        stateful = module.training and any(True for _ in module.buffers())
        return written, Writes(buffers=(str(node.target),) if stateful else (),
                               rng=module.training and module_may_draw(module))
    if node.op not in ("call_function", "call_method"):
        return written, Writes()
    user_code = node.op == "call_function" and not callable_from_torch(node.target)
    if user_code:  # a wrapped function of the user's may write to anything it is given
        for argument in node.all_input_nodes:
            written |= roots[argument]
    elif first is not None and (node.target in INPLACE_FUNCTIONS or (name.endswith("_") and not name.startswith("_"))
                                or node.kwargs.get("inplace") is True
                                or (node.op == "call_method" and node.target in _MUTATING_METHODS)):
        written |= roots[first]
    out = node.kwargs.get("out")
    for target in (out if isinstance(out, (tuple, list)) else (out,)):
        if isinstance(target, torch.fx.Node):
            written |= roots[target]
    generator = node.kwargs.get("generator")
    draws = user_code or is_random_name(name)
    if isinstance(generator, torch.fx.Node):
        written |= roots[generator]
        draws = False
    return written, Writes(rng=draws, python_rng=user_code)


def writes_before(gm: torch.fx.GraphModule, guards: Set[torch.fx.Node]) -> Writes:
    """What the ops before the last of ``guards`` may change (``Writes()``: nothing)."""
    if not guards:
        return Writes()
    roots = _aliases(gm.graph)
    written: Set[torch.fx.Node] = set()
    total = Writes()
    for node in gm.graph.nodes:
        if node in guards:
            guards = guards - {node}
            if not guards:
                break
            continue
        more, other = _node_writes(node, gm, roots)
        written |= more
        if other:
            total = Writes(rng=total.rng or other.rng, python_rng=total.python_rng or other.python_rng,
                           buffers=total.buffers + other.buffers, modules=total.modules + other.modules)
    return dataclasses.replace(
        total, inputs=any(n.op == "placeholder" for n in written),
        state=tuple(sorted(str(n.target) for n in written if n.op == "get_attr")))


def _guard_key(node: torch.fx.Node) -> Tuple[Any, ...]:
    return (node.target, tuple(a for a in node.args if not isinstance(a, torch.fx.Node)))


def late_and_early_guards(gm: torch.fx.GraphModule, prologue: Optional[torch.fx.GraphModule]
                          ) -> Tuple[Set[torch.fx.Node], Set[torch.fx.Node]]:
    """``gm``'s guards the prologue does not check, and those it does."""
    early = set() if prologue is None else {_guard_key(n) for n in prologue.graph.nodes if _is_guard(n)}
    guards = [n for n in gm.graph.nodes if _is_guard(n)]
    return {n for n in guards if _guard_key(n) not in early}, {n for n in guards if _guard_key(n) in early}


def saved_paths(writes: Writes, gm: torch.fx.GraphModule) -> Tuple[str, ...]:
    """The attribute paths (on ``gm``) of every tensor or generator ``writes`` names,
    resolved at each call, so that a reassigned buffer is the one saved."""
    paths = dict.fromkeys(writes.state)
    for target in writes.buffers + writes.modules:
        module = operator.attrgetter(target)(gm)
        paths.update(dict.fromkeys(f"{target}.{name}" for name, _ in module.named_buffers()))
        if target in writes.modules:
            paths.update(dict.fromkeys(f"{target}.{name}" for name, _ in module.named_parameters()))
    return tuple(paths)


class Checkpoint:
    """What an attempt may write (its variant's :class:`Writes`), saved before it
    runs, to put back when a guard fails after the variant wrote to it."""

    __slots__ = ("_tensors", "_containers", "_generators", "_rng", "_keepers")

    def __init__(self, writes: Writes, paths: Tuple[str, ...], args: Any, kwargs: Any,
                 gm: torch.fx.GraphModule) -> None:
        self._containers: List[Tuple[Any, Any]] = []
        saved: List[Any] = [operator.attrgetter(path)(gm) for path in paths]
        if writes.inputs:
            _remember_containers((args, kwargs), self._containers, 4)
            saved += [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        self._keepers = [StateKeeper(operator.attrgetter(t)(gm), runs_ops=False, retry=True) for t in writes.modules]
        self._tensors: List[Tuple[torch.Tensor, torch.Tensor, bool]] = [
            (t, t.detach().clone(), t.requires_grad) for t in saved
            if isinstance(t, torch.Tensor) and t.device.type != "meta"]
        self._generators = [(g, g.get_state()) for g in saved if isinstance(g, torch.Generator)]
        self._rng = torch.get_rng_state() if writes.rng and not self._keepers else None

    def restore(self) -> None:
        for keeper in self._keepers:  # Python state, RNGs and generators of user-defined leaves
            keeper.restore()
        for container, contents in self._containers:
            restore_contents(container, contents)
        if self._rng is not None:
            torch.set_rng_state(self._rng)
        for generator, state in self._generators:
            generator.set_state(state)
        with torch.no_grad():
            for tensor, saved, requires_grad in self._tensors:
                if tensor.shape != saved.shape or tensor.stride() != saved.stride():
                    tensor.set_(saved.untyped_storage(), 0, saved.size(), saved.stride())  # resized (resize_)
                elif not torch.equal(tensor, saved):
                    tensor.copy_(saved)
                if tensor.requires_grad != requires_grad:
                    tensor.requires_grad_(requires_grad)


def _remember_containers(value: Any, into: List[Tuple[Any, Any]], depth: int) -> None:
    """The lists and dicts the caller passed (a forward may append to them)."""
    if depth == 0 or not isinstance(value, (list, dict, tuple)):
        return
    if isinstance(value, list):
        into.append((value, list(value)))
    elif isinstance(value, dict):
        into.append((value, dict(value)))
    for item in value.values() if isinstance(value, dict) else value:
        _remember_containers(item, into, depth - 1)
