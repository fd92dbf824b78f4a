"""Example values computed in batches, when something first needs them.

Computing each node's value the moment the node is recorded interleaves torch's kernels
with the tracer's Python code, and each runs with the other's instructions and data in the
caches: on models of small tensors a module call inside a trace took two to three times
what the same call takes in an eager forward. Most values are not needed at once: nothing
reads ``linear(norm(x))``'s value until a decision does (``if``, ``len``, a shape read) or
the trace ends. So while specfx traces with example inputs, an op of torch's own (a
``torch``/``operator``/``math`` function, a tensor method, a leaf of torch's own modules) is
recorded with a *pending* value; the first read of any pending value computes every
pending one, in the order the ops were recorded, with the grad mode each was recorded
under. The values, and what they do to the trace's private copies of the model's state
(``_state.py``), are the same as if computed one by one.

What is not deferred: code that may read Python state the traced code changes meanwhile
(user-defined leaf modules, wrapped user functions, modules run with forward hooks of their
own or global ones, tensor subclasses),
and calls whose values specfx needs to build the graph. If a deferred op raises, the trace
is run again with every value computed at once (:class:`DeferredFailure`), so that the error
names the op's own line and model code that catches it behaves as it does in eager.
"""

from __future__ import annotations

from typing import Any, Dict, List, NoReturn, Optional, Tuple

import torch

from .evaluation import runs_only_torch_code
from .values import PENDING, ValueProxy

__all__ = ["DeferredFailure", "DeferredValues", "Pending"]


class DeferredFailure(BaseException):
    """An op whose value was computed late raised: trace again without deferring.
    A BaseException, so that ``except Exception`` in model code cannot swallow it."""


# (proxy, kind, target, args, kwargs, leaf module of a call_module node, grad mode when recorded)
Pending = Tuple[ValueProxy, str, Any, Tuple[Any, ...], Dict[str, Any], Optional[torch.nn.Module], bool]

_CONTAINERS = frozenset({list, dict, tuple})


def _as_now(value: Any) -> Any:
    """``value`` with its lists and dicts (at any depth) copied: their contents as they are now."""
    kind = type(value)
    if kind is list:
        return [_as_now(item) for item in value]
    if kind is tuple:
        return tuple(_as_now(item) for item in value)
    if kind is dict:
        return {key: _as_now(item) for key, item in value.items()}
    return value


# Types of values that torch's ops, tensor methods and Python's operators on them handle
# without calling code of the user's (a tensor subclass may, through __torch_function__).
_PLAIN_VALUES = frozenset({
    torch.Tensor, torch.nn.Parameter, torch.Size, int, float, bool, complex, str, bytes, tuple, list, dict,
    slice, type(None), type(...), torch.dtype, torch.device, torch.memory_format, torch.layout,
})
_PLAIN_MODULES = ("torch", "_operator", "operator", "math", "builtins")
_GUARDS_MODULE = "specfx.guards"


class DeferredValues:
    """The ops recorded so far whose values are not computed yet, in graph order."""

    __slots__ = ("pending", "failure", "_functions", "_modules")

    def __init__(self) -> None:
        self.pending: List[Pending] = []
        self.failure: Optional[DeferredFailure] = None  # raised again at the trace's end if caught
        self._functions: Dict[Any, bool] = {}  # call_function target -> deferrable
        self._modules: Dict[int, Tuple[torch.nn.Module, bool]] = {}  # id(leaf) -> (leaf, deferrable)

    def add(self, proxy: ValueProxy, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
            leaf: Optional[torch.nn.Module]) -> None:
        """Record ``proxy``'s op to compute its value later."""
        proxy.__dict__["_specfx"] = PENDING
        # The op reads its list and dict arguments now, as eager does: the code may append to
        # them before the value is computed (DenseNet's `features.append(layer(features))`).
        if any(type(arg) in _CONTAINERS for arg in args):
            args = _as_now(args)
        if kwargs and any(type(arg) in _CONTAINERS for arg in kwargs.values()):
            kwargs = _as_now(kwargs)
        self.pending.append((proxy, kind, target, args, kwargs, leaf, torch._C.is_grad_enabled()))

    def take(self) -> List[Pending]:
        """The pending ops, in order; none are pending afterwards (``pending`` stays the same list)."""
        pending = self.pending[:]
        self.pending.clear()
        return pending

    def fail(self, reason: str, cause: Optional[BaseException] = None) -> NoReturn:
        """Raise (and remember) the :class:`DeferredFailure` for ``reason``."""
        self.failure = DeferredFailure(reason)
        raise self.failure from cause

    def deferrable(self, kind: str, target: Any, args: Tuple[Any, ...], leaf: Optional[torch.nn.Module]) -> bool:
        """Whether the value of a new ``kind``/``target`` node on ``args`` may be computed later."""
        if kind == "call_module":
            if leaf is None or not self._pure_module(leaf):
                return False
        elif kind == "call_function":
            if not self._pure_function(target):
                return False
        elif kind != "call_method":
            return False
        for arg in args:
            if type(arg) is ValueProxy:
                state = arg.__dict__.get("_specfx")
                if state is not PENDING and (state is None or type(state.value) not in _PLAIN_VALUES):
                    return False
            elif type(arg) not in _PLAIN_VALUES and not isinstance(arg, (torch.fx.Proxy, torch.nn.Module)):
                return False  # (a module: torch.fx passes none; a user object: its methods may run)
        return True

    def _pure_function(self, target: Any) -> bool:
        try:
            known = self._functions.get(target)
        except TypeError:  # an unhashable callable object
            return False
        if known is None:
            module = getattr(target, "__module__", None) or ""
            known = self._functions[target] = (
                module == _GUARDS_MODULE or (module.split(".")[0] in _PLAIN_MODULES and not module.startswith("torch.fx")))
        return known

    def _pure_module(self, leaf: torch.nn.Module) -> bool:
        known = self._modules.get(id(leaf))
        if known is None:
            pure = runs_only_torch_code(leaf) if not leaf._modules else all(map(runs_only_torch_code, leaf.modules()))
            known = self._modules[id(leaf)] = (leaf, pure)  # (the module is kept: its id stays its own)
        return known[1]
