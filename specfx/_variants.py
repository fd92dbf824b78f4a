"""One traced variant of a :class:`~specfx.Specializer`: its prologue, whether a
failed attempt may leave effects behind, and how the variant reads the model's
current state.

- The *prologue* holds the guards that read input metadata only (shapes,
  lengths, dict keys, ``is None``, predicates on those), never data, and never a
  container the forward mutates before the guard (``xs.append(x)`` then
  ``len(xs)``); it runs before any of the model.
- A variant is *effectful* when an op that writes (an in-place op on an input or
  on model state, a stateful leaf module such as train-mode BatchNorm, a random
  draw) comes before a guard the prologue cannot check. Before running such a
  variant the Specializer takes a :class:`Checkpoint` of the inputs' tensors, the
  model's buffers and the RNG, and puts them back if the guard fails, so that
  the next attempt starts from what the caller passed.
- Every ``get_attr``/``call_module`` that names the model's state is read
  through the live model (``self._specfx_model.<name>``), so variants see
  ``load_state_dict(assign=True)``, reassigned buffers and parametrizations.
"""

from __future__ import annotations

import operator
import random
from typing import Any, Dict, Hashable, List, Optional, Set, Tuple

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ._evaluation import INPLACE_FUNCTIONS
from ._state import restore_contents
from ._structure import entry_only
from .guards import GUARD_FUNCTIONS

__all__ = ["Checkpoint", "LIVE_MODEL", "Variant", "build_prologue"]

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
# Substrings of the names of ops that draw random numbers.
_RANDOM_NAMES = ("rand", "dropout", "bernoulli", "normal", "multinomial", "uniform", "exponential", "cauchy",
                 "geometric", "log_normal", "rrelu", "poisson")


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


def _writes(node: torch.fx.Node, model: Any) -> bool:
    """Whether running ``node`` may change the caller's inputs, the model or the RNG."""
    name = _name(node.target)
    if node.op == "call_module":
        module = model.get_submodule(str(node.target).removeprefix(LIVE_MODEL + ".")) if isinstance(
            model, torch.nn.Module) else None
        if module is None or not type(module).__module__.startswith(("torch.nn", "torch.ao.nn")):
            return True  # a user-defined leaf may do anything
        stateful = any(True for _ in module.buffers()) and module.training
        return stateful or any(part in name.lower() for part in ("dropout",)) or "Dropout" in type(module).__name__
    if node.op not in ("call_function", "call_method"):
        return False
    if node.target in INPLACE_FUNCTIONS or (name.endswith("_") and not name.startswith("_")):
        return True
    if node.op == "call_method" and node.target in _MUTATING_METHODS:
        return True
    lowered = name.lower()
    return any(part in lowered for part in _RANDOM_NAMES) or node.kwargs.get("inplace") is True


def effects_before_late_guard(gm: torch.fx.GraphModule, prologue: Optional[torch.fx.GraphModule],
                              model: Any) -> bool:
    """Whether a guard the prologue does not check comes after an op that writes."""
    early = set() if prologue is None else {
        (n.target, tuple(a for a in n.args if not isinstance(a, torch.fx.Node))) for n in prologue.graph.nodes
        if _is_guard(n)}
    wrote = False
    for node in gm.graph.nodes:
        if _is_guard(node):
            if wrote and (node.target, tuple(a for a in node.args if not isinstance(a, torch.fx.Node))) not in early:
                return True
        elif not wrote and _writes(node, model):
            wrote = True
    return False


def read_live_state(gm: torch.fx.GraphModule, model: Any) -> None:
    """Make ``gm`` read the model's parameters, buffers and submodules through the
    model itself at call time (not the tensors it held when traced)."""
    if not isinstance(model, torch.nn.Module):
        return
    changed = False
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module") and isinstance(node.target, str):
            try:
                operator.attrgetter(node.target)(model)
            except AttributeError:
                continue  # a constant torch.fx stored on the graph module itself
            node.target = f"{LIVE_MODEL}.{node.target}"
            changed = True
    if changed:
        gm._modules[LIVE_MODEL] = model
        gm.recompile()
        gm.delete_all_unused_submodules()


class Checkpoint:
    """The inputs' tensors, the model's buffers and the RNG before an attempt, to
    put back when a guard fails after the variant has written to them."""

    __slots__ = ("_tensors", "_containers", "_rng", "_python_rng")

    def __init__(self, args: Any, kwargs: Any, model: Any) -> None:
        self._containers: List[Tuple[Any, Any]] = []
        _remember_containers((args, kwargs), self._containers, 4)
        leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if isinstance(model, torch.nn.Module):
            leaves += [b for b in model.buffers() if b.device.type != "meta"]
        with torch.no_grad():
            self._tensors: List[Tuple[torch.Tensor, torch.Tensor]] = [(t, t.detach().clone()) for t in leaves]
        self._rng = torch.get_rng_state()
        self._python_rng = random.getstate()

    def restore(self) -> None:
        for container, contents in self._containers:
            restore_contents(container, contents)
        torch.set_rng_state(self._rng)
        random.setstate(self._python_rng)
        with torch.no_grad():
            for tensor, saved in self._tensors:
                if not torch.equal(tensor, saved):
                    tensor.copy_(saved)


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


class Variant:
    """A traced graph with its prologue and what selecting it needs."""

    __slots__ = ("graph", "prologue", "key", "inputs", "run", "check", "effectful")

    def __init__(self, graph: torch.fx.GraphModule, key: Hashable, inputs: str, model: Any) -> None:
        read_live_state(graph, model)
        self.graph = graph
        self.prologue = build_prologue(graph)
        self.key = key
        self.inputs = inputs
        self.effectful = effects_before_late_guard(graph, self.prologue, model)
        # The generated functions themselves: the variants carry no hooks, so skipping
        # nn.Module.__call__ saves microseconds on every call.
        self.run = graph.forward
        self.check = self.prologue.forward if self.prologue is not None else None
