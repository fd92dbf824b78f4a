"""Objects a graph returns that hold traced tensors: transformers' caches.

``forward`` of a decoder returns a ``DynamicCache`` (an ``EncoderDecoderCache``,
a ``StaticCache``...): a Python object whose tensors the graph computes. The tracer
keeps a *template* of it (a copy with those tensors left out, stored on the graph
like torch.fx's tensor constants) and records :func:`rebuild_object`, which at run time
copies the template and puts the run-time tensors in their places: the graph returns
eager's type, with eager's structure.
"""

from __future__ import annotations

import copy
from typing import Any, Tuple

from torch.fx.proxy import Proxy

from ..guards import _is_foreign_proxy

__all__ = ["Path", "rebuild_object", "set_at"]

# Where a tensor sits in an object: ("attribute", name) and ("item", index or key) steps.
Path = Tuple[Tuple[str, Any], ...]


def set_at(obj: Any, path: Path, value: Any) -> None:
    """Put ``value`` at ``path`` inside ``obj``."""
    *steps, (kind, last) = path
    for step_kind, step in steps:
        obj = getattr(obj, step) if step_kind == "attribute" else obj[step]
    if kind == "attribute":
        object.__setattr__(obj, last, value)
    else:
        obj[last] = value


def rebuild_object(template: Any, paths: Tuple[Path, ...], *values: Any) -> Any:
    """A copy of ``template`` with ``values`` at ``paths``; called by generated code.

    >>> class Box:
    ...     def __init__(self):
    ...         self.items = [None, 2]
    >>> rebuild_object(Box(), ((("attribute", "items"), ("item", 0)),), 1).items
    [1, 2]
    """
    for value in (template, *values):  # re-tracing the graph (deepcopy, unpickling): record the call again
        if isinstance(value, Proxy) or _is_foreign_proxy(value):
            tracer = value.tracer
            if not (isinstance(template, Proxy) or _is_foreign_proxy(template)):
                # the re-traced code read the template off the graph module: read it as a node again
                name = next(n for n, v in vars(tracer.root).items() if v is template)
                template = tracer.create_proxy("get_attr", name, (), {})
            return tracer.create_proxy("call_function", rebuild_object, (template, paths, *values), {})
    rebuilt = copy.deepcopy(template)
    for path, value in zip(paths, values):
        set_at(rebuilt, path, value)
    return rebuilt


rebuild_object.__module__ = "specfx"  # generated code imports it from the package
