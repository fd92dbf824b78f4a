"""``Specializer``: a module that traces on first use and re-specializes when
its guards fail, keeping every variant inspectable.

Selecting a variant is cheap: for each variant, the guards whose inputs are
input metadata only (shapes, lengths, dict keys, ``is None``, predicates on
those) are extracted into a small *prologue* graph that runs before the
variant. Guards on data (``if x.sum() > 0``) can only be checked by running
the variant itself; when such a late guard fails the next variant is tried,
so a miss costs at most the part of one forward before that guard.
"""

from __future__ import annotations

import operator
import threading
from typing import Any, Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.fx

from .guards import GUARD_FUNCTIONS
from ._messages import short_repr
from ._report import explain as explain_graph
from ._report import specializations
from ._structure import entry_only
from .errors import GuardError, VariantLimitError  # VariantLimitError: defined with the other errors

__all__ = ["Specializer", "VariantLimitError"]

_GUARD_FUNCTIONS = GUARD_FUNCTIONS
# Ops that only read input metadata: a guard depending on nothing else can run up front.
_METADATA_FUNCTIONS = frozenset(
    {getattr, len, operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
     operator.truediv, operator.mod, operator.neg, operator.eq, operator.ne, operator.lt,
     operator.le, operator.gt, operator.ge, operator.and_, operator.or_, operator.not_,
     operator.contains}
)
_METADATA_METHODS = frozenset({"size", "dim", "numel", "nelement", "keys", "items", "values"})
_METADATA_ATTRIBUTES = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "layout"})


def _is_metadata_node(node: torch.fx.Node) -> bool:
    if node.op in ("placeholder", "get_attr"):
        return True
    if node.op == "call_method":
        return node.target in _METADATA_METHODS
    if node.op == "call_function":
        if node.target is getattr:
            return len(node.args) > 1 and node.args[1] in _METADATA_ATTRIBUTES
        return node.target in _METADATA_FUNCTIONS
    return False


def build_prologue(gm: torch.fx.GraphModule) -> Optional[torch.fx.GraphModule]:
    """A graph with the same inputs as ``gm`` that runs only ``gm``'s guards on
    input metadata (None if there are none)."""
    cone: Dict[torch.fx.Node, bool] = {}

    def metadata_only(node: torch.fx.Node) -> bool:
        if node not in cone:
            cone[node] = _is_metadata_node(node) and all(metadata_only(n) for n in node.all_input_nodes)
        return cone[node]

    keep = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _GUARD_FUNCTIONS:
            if all(metadata_only(n) for n in node.all_input_nodes):
                keep.add(node)
                stack = list(node.all_input_nodes)
                while stack:
                    dependency = stack.pop()
                    if dependency not in keep:
                        keep.add(dependency)
                        stack.extend(dependency.all_input_nodes)
    if not any(n.op == "call_function" and n.target in _GUARD_FUNCTIONS for n in keep):
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
    return torch.fx.GraphModule(gm, graph, f"{type(gm).__name__}Prologue")


class _Variant:
    __slots__ = ("graph", "prologue", "key", "inputs", "run", "check")

    def __init__(self, graph: torch.fx.GraphModule, key: Hashable, inputs: str) -> None:
        self.graph = graph
        self.prologue = build_prologue(graph)
        self.key = key
        self.inputs = inputs
        # The generated functions themselves: the variants carry no hooks, so skipping
        # nn.Module.__call__ saves microseconds on every call.
        self.run = graph.forward
        self.check = self.prologue.forward if self.prologue is not None else None


def _describe_inputs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    parts = [short_repr(a) for a in args] + [f"{k}={short_repr(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _first_line(error: BaseException) -> str:
    lines = str(error).splitlines()
    return (lines[0] + (f" ({lines[1].strip()})" if len(lines) > 1 else "")) if lines else repr(error)


class Specializer(torch.nn.Module):
    """Wrap ``model`` so that it is traced with the actual inputs on its first
    call and re-traced into a new variant when an input breaks the guards of
    every variant so far (at most ``max_variants`` per cache key).

    Calls run the first variant whose guards hold: guards on input metadata
    are checked up front by a small prologue graph, guards on data by running
    the variant. ``on_guard_failure="raise"`` never retraces after the first
    variant: a broken guard raises its ``GuardError``. ``cache_key(*args,
    **kwargs)`` partitions variants (the training flag always does: a mode
    change selects other variants). Further keyword arguments go to
    :func:`specfx.trace`. The wrapper shares the model's parameters, buffers
    and submodules, so ``state_dict()`` is the model's; moving it
    (``.to()``, ``.half()``) drops the variants, which retrace on next use.

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else x - 1
    >>> spec = specfx.Specializer(f, specfx.Policy(bool=True))
    >>> spec(torch.ones(2)), spec(-torch.ones(2))
    (tensor([2., 2.]), tensor([-2., -2.]))
    >>> len(spec.variants)
    2
    """

    _model: Any  # set with object.__setattr__; declared so type checkers do not read it via Module.__getattr__

    def __init__(
        self,
        model: Any,
        policy: Any = None,
        *,
        max_variants: int = 8,
        on_guard_failure: str = "retrace",
        cache_key: Optional[Callable[..., Hashable]] = None,
        **trace_options: Any,
    ) -> None:
        super().__init__()
        if not (isinstance(model, torch.nn.Module) or callable(model)):
            raise TypeError(f"Specializer wraps an nn.Module or a function; got {type(model).__name__}")
        if not isinstance(max_variants, int) or isinstance(max_variants, bool) or max_variants < 1:
            raise ValueError(f"max_variants= takes a positive int; got {max_variants!r}")
        if on_guard_failure not in ("retrace", "raise"):
            raise ValueError(f"on_guard_failure= takes 'retrace' or 'raise'; got {on_guard_failure!r}")
        if cache_key is not None and not callable(cache_key):
            raise TypeError("cache_key= takes a function of the call's arguments returning a hashable key")
        for name in ("check_inputs", "example_inputs", "example_kwargs"):
            if name in trace_options:
                raise TypeError(f"{name}= is not a Specializer option: the actual call's inputs are the examples")
        object.__setattr__(self, "_model", model)  # not a submodule: the model's tables are shared below
        if isinstance(model, torch.nn.Module):
            # Share the model's state so state_dict(), parameters() and .to() are the model's.
            self._parameters = model._parameters
            self._buffers = model._buffers
            self._non_persistent_buffers_set = model._non_persistent_buffers_set
            self._modules = model._modules
            self.training = model.training
        self.policy = policy
        self.max_variants = max_variants
        self.on_guard_failure = on_guard_failure
        self.cache_key = cache_key
        self.trace_options = trace_options
        self._lock = threading.Lock()
        self._by_key: Dict[Hashable, Tuple[_Variant, ...]] = {}
        self._all: List[_Variant] = []

    @property
    def model(self) -> Any:
        """The wrapped model (or function)."""
        return self._model

    @property
    def variants(self) -> List[torch.fx.GraphModule]:
        """Every traced variant, oldest first; each has ``.specializations``."""
        return [variant.graph for variant in self._all]

    def train(self, mode: bool = True) -> "Specializer":
        """Set training mode on the model (variants are kept per mode)."""
        super().train(mode)
        if isinstance(self._model, torch.nn.Module):
            self._model.training = mode
        return self

    def _apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Specializer":
        # .to()/.half()/... replace buffers: variants would hold the old ones.
        result = super()._apply(fn, *args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.reset()
        return result

    def reset(self) -> None:
        """Drop every variant; the next call traces afresh."""
        with self._lock:
            self._by_key = {}
            self._all = []

    def _key(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Hashable:
        mode = self._model.training if isinstance(self._model, torch.nn.Module) else None
        if self.cache_key is None:
            return mode
        return (mode, self.cache_key(*args, **kwargs))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the first variant whose guards hold for these inputs, tracing a new one if none does."""
        key = self._key(args, kwargs)
        failures: List[Tuple[_Variant, GuardError]] = []
        variants = self._by_key.get(key, ())
        for variant in variants:
            # With one variant the graph's own guards decide; prologues only choose among several.
            if variant.check is not None and len(variants) > 1:
                try:
                    variant.check(*args, **kwargs)
                except GuardError as error:
                    failures.append((variant, error))
                    continue
            try:
                return variant.run(*args, **kwargs)
            except GuardError as error:  # a guard on data, after part of the forward ran
                failures.append((variant, error))
        return self._call_new_variant(key, args, kwargs, failures)

    def _call_new_variant(
        self, key: Hashable, args: Tuple[Any, ...], kwargs: Dict[str, Any],
        failures: List[Tuple[_Variant, GuardError]],
    ) -> Any:
        from ._trace import trace

        with self._lock:
            existing = self._by_key.get(key, ())
            tried = {id(variant) for variant, _ in failures}
            for variant in existing:  # another thread may have traced a fitting variant meanwhile
                if id(variant) not in tried:
                    try:
                        return variant.run(*args, **kwargs)
                    except GuardError as error:
                        failures.append((variant, error))
            if failures and self.on_guard_failure == "raise":
                raise failures[0][1]
            if len(existing) >= self.max_variants:
                raise VariantLimitError(self._limit_message(failures))
            graph = trace(self._model, args, kwargs, policy=self.policy, **self.trace_options)
            variant = _Variant(graph, key, _describe_inputs(args, kwargs))
            self._by_key = {**self._by_key, key: existing + (variant,)}
            self._all = self._all + [variant]
        return variant.run(*args, **kwargs)

    def _limit_message(self, failures: List[Tuple[_Variant, GuardError]]) -> str:
        lines = [f"no variant of the traced model fits this input and max_variants={self.max_variants} is reached:"]
        for variant, error in failures:
            index = self._all.index(variant)
            lines.append(f"  variant {index} (traced on {variant.inputs}): {_first_line(error)}")
        lines.append("Raise max_variants, narrow the policy so these values stay symbolic, or pass "
                     "cache_key= to keep variants for different inputs apart.")
        return "\n".join(lines)

    def explain(self) -> str:
        """Every variant's inputs and specializations, then the decisions on which they differ."""
        name = getattr(self._model, "__name__", type(self._model).__name__)
        lines = [f"Specializer({name}): {len(self._all)} variant(s), max {self.max_variants} per key, "
                 f"policy {self.policy!r}"]
        decisions: Dict[Tuple[str, str, str], Dict[int, str]] = {}
        for index, variant in enumerate(self._all):
            prologue = 0 if variant.prologue is None else sum(
                1 for n in variant.prologue.graph.nodes if n.target in _GUARD_FUNCTIONS)
            lines.append(f"\nvariant {index}: key {variant.key!r}, traced on {variant.inputs}; "
                         f"{prologue} guard(s) checked up front")
            lines.extend("  " + line for line in explain_graph(variant.graph).splitlines())
            for record in specializations(variant.graph):
                decisions.setdefault((record.kind, record.where, record.source), {})[index] = short_repr(record.value)
        differing = [(k, v) for k, v in decisions.items() if len(set(v.values())) > 1 or len(v) < len(self._all)]
        if len(self._all) > 1:
            lines.append("\ndecisions that differ between variants:" if differing else
                         "\nno decision differs between variants")
            for (kind, where, source), values in differing:
                shown = ", ".join(f"v{i}={values.get(i, '-')}" for i in range(len(self._all)))
                lines.append(f"  {kind} at {where} ({source}): {shown}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Specializer({self._model!r}, {self.policy!r}, variants={len(self._all)})"
