"""A module attribute that ``forward`` rebinds to a tensor, rebound by the graph on every call.

``self.avg = 0.9 * self.avg + 0.1 * x.mean(0)`` on a buffer, or ``self.last = x`` on a
plain attribute, gives the module a new tensor on each eager call, which the next call
reads. The trace computes that tensor as a node; :func:`assign_attribute`, recorded
after it, binds it on the graph module at the same path on every call, as eager binds it
on the model, so the graph's next call reads it too (a buffer stays a buffer, a plain
attribute a plain attribute, as ``nn.Module.__setattr__`` decides).

The call names the module it writes as ``self`` in the generated code (the GraphModule
running its ``forward``): :data:`SELF` is the node argument that prints as ``self``. A
re-trace of the graph (deepcopy, unpickling, ``symbolic_trace(gm)``, FX quantization)
runs that code with proxies and records the call again.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.node import has_side_effect
from torch.fx.proxy import Proxy

from ..guards import _is_foreign_proxy

__all__ = ["SELF", "assign_attribute"]


class _GraphModuleItself(str):
    """A node argument that generated code prints as ``self``, the GraphModule whose
    ``forward`` runs. A ``str`` so that every tracer's ``create_arg`` keeps it as it is."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "self"

    def __reduce__(self) -> Any:
        return (_graph_module_itself, ())

    def __deepcopy__(self, memo: Any) -> "_GraphModuleItself":
        return self


def _graph_module_itself() -> "_GraphModuleItself":
    return SELF


SELF = _GraphModuleItself("self")


def assign_attribute(module: Any, path: str, value: Any) -> None:
    """Bind ``value`` to the attribute ``path`` (``"avg"``, ``"block.cache"``) of ``module``,
    as ``setattr`` in ``forward`` would; called by generated code with ``self``.

    >>> import torch
    >>> holder = torch.nn.Module()
    >>> holder.register_buffer("avg", torch.zeros(2))
    >>> assign_attribute(holder, "avg", torch.ones(2))
    >>> holder.avg, "avg" in holder._buffers
    (tensor([1., 1.]), True)
    """
    if isinstance(value, Proxy) or _is_foreign_proxy(value):  # re-tracing the graph: record the call again
        value.tracer.create_proxy("call_function", assign_attribute, (SELF, path, value), {})
        return None
    if isinstance(module, _GraphModuleItself):
        raise RuntimeError(
            f"specfx.assign_attribute rebinds `{path}` on the GraphModule that runs it; it was called "
            f"without one (torch.fx.Interpreter runs nodes outside the generated code). Call the "
            f"GraphModule itself so that the attribute forward rebinds is rebound on it.")
    owner_path, _, name = path.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    setattr(owner, name, value)
    return None


assign_attribute.__module__ = "specfx"  # generated code imports it from the package
has_side_effect(assign_attribute)  # (dead-code elimination keeps it: it returns nothing)
_ = torch  # (the docstring's example)
