"""Tracing a root whose ``forward`` is wrapped by a ``functools.wraps`` decorator.

torch.fx reads the placeholders from the innermost function (``inspect.unwrap``)
but, for a signature with keyword-only parameters or ``*args``/``**kwargs``,
rewrites the code object of the *outer* function so that it takes the
placeholders positionally. A wrapper ``wrapper(self, *args, **kwargs)``
(transformers' ``@check_model_inputs``, ``@can_return_tuple``) then has its own
locals overwritten by the inputs. Instead, the root is called as the user calls
it: through the wrapper, with the real signature's parameters by keyword.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List

from torch.fx.proxy import Proxy

from .values import MISSING, value_of

__all__ = ["call_through_wrapper", "is_wrapped"]


def is_wrapped(root_fn: Callable[..., Any]) -> bool:
    """Whether ``root_fn`` is a decorator's wrapper around another function."""
    return inspect.unwrap(root_fn) is not root_fn and hasattr(inspect.unwrap(root_fn), "__code__")


def call_through_wrapper(root_fn: Callable[..., Any], is_module: bool) -> Callable[..., Any]:
    """A function taking torch.fx's root arguments positionally (``self`` first for a
    module, then one per placeholder: named parameters, ``*args``, ``**kwargs``) that
    calls the *wrapper* ``root_fn`` the way ``model(**batch)`` does.

    Named parameters go by keyword (a wrapper may add keywords itself, such as
    ``use_cache``, which would clash with a positional value); a parameter that
    holds its default and no traced value is left out, as the caller left it out.
    """
    inner = inspect.unwrap(root_fn)
    code = inner.__code__
    named = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
    parameters = inspect.signature(inner).parameters
    positional_only = {p.name for p in parameters.values() if p.kind is inspect.Parameter.POSITIONAL_ONLY}
    # With *args in the signature, the parameters before it can only be given positionally.
    by_position = set(named[: code.co_argcount]) if has_varargs else positional_only
    if is_module:
        by_position.add(named[0])

    def call_root(*flat: Any) -> Any:
        values = dict(zip(named, flat))
        rest = list(flat[len(named):])
        positional: List[Any] = [values[name] for name in named if name in by_position]
        keyword: Dict[str, Any] = {}
        for name in named:
            if name in by_position:
                continue
            value = values[name]
            parameter = parameters.get(name)
            default = parameter.default if parameter is not None else inspect.Parameter.empty
            if not isinstance(value, Proxy) and value is default:
                continue
            keyword[name] = value
        # Without example values (a symbolic trace) the wrapper gets no extra arguments.
        if has_varargs:
            extra = rest.pop(0)
            if value_of(extra) is not MISSING:
                positional.extend(extra)
        if has_varkw:
            extra = rest.pop(0)
            if value_of(extra) is not MISSING:
                keyword.update(extra)
        return root_fn(*positional, **keyword)

    call_root.__name__ = getattr(root_fn, "__name__", "forward")
    # torch.fx reads the root's annotations for the generated signature: the root's own, not 'Any'
    call_root.__annotations__ = dict(getattr(root_fn, "__annotations__", {}))
    return call_root
