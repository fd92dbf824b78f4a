"""A parameter's default that generated code cannot spell: a sentinel, a function, an object.

``def forward(self, x, k=SENTINEL)`` traced without ``k`` passes ``SENTINEL`` itself to
forward (``k is SENTINEL`` answers as eager) and guards at entry that the caller left ``k``
out or passed that very object. Generated code cannot write the object, and no graph node can
hold it: the graph's signature reads ``k = 'specfx-left-out:mod:M.forward:k:7f..'``, text that
stands for "left out" (the graph reads ``k`` only in that guard), and the guard finds the
object itself with :func:`default_object`: in this process, from the trace's registry; in
another one (a graph saved and loaded), as the default of ``k`` of the importable function
``mod.M.forward``, the object the model's own code uses there.

>>> SENTINEL = object()
>>> def forward(x, k=SENTINEL):
...     return x
>>> default_object(register_default(forward, "k", SENTINEL)) is SENTINEL
True
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict

__all__ = ["LEFT_OUT", "default_object", "register_default"]

LEFT_OUT = "specfx-left-out:"  # the text a graph's signature defaults such a parameter to, then its key
_NOT_FOUND = object()

# key -> the default object (held: a function's default lives as long as the function anyway)
_DEFAULTS: Dict[str, Any] = {}


def register_default(function: Callable[..., Any], parameter: str, value: Any) -> str:
    """The key under which :func:`default_object` finds ``value``, ``parameter``'s default of ``function``."""
    key = f"{function.__module__}:{function.__qualname__}:{parameter}:{id(value):x}"
    _DEFAULTS[key] = value
    return key


def default_object(key: str) -> Any:
    """The default object registered under ``key`` (module docstring); a fresh object that is
    no one's value when it cannot be found (a class defined inside a function, in another process)."""
    if key in _DEFAULTS:
        return _DEFAULTS[key]
    module_name, qualname, parameter, _ = key.split(":")
    try:
        owner: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            owner = getattr(owner, part)
        default = inspect.signature(owner).parameters[parameter].default
    except (ImportError, AttributeError, KeyError, ValueError, TypeError):
        return _NOT_FOUND
    if default is inspect.Parameter.empty:
        return _NOT_FOUND
    _DEFAULTS[key] = default
    return default
