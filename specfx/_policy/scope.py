"""``@specialize``: policy annotations in model code, scoped with ``contextvars``.

The stack of policy layers in force lives in a ``ContextVar``, so scopes are
per thread (and per asyncio task) and re-entrant. Outside a trace the
decorator costs one ``ContextVar.get`` per call and changes nothing.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import types
from typing import Any, Callable, Dict, Optional, Tuple, Type, TypeVar, Union, overload

import torch
from typing_extensions import ParamSpec  # typing.ParamSpec is 3.10+; the decorator keeps signatures on 3.9

from .policy import FLAG_KEYWORDS, Layer, Policy, Specialize, _flags_from_keywords

__all__ = ["annotations_active", "current_layers", "fresh_layers", "push_layer", "reset_layers", "specialize"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_M = TypeVar("_M", bound=Type[torch.nn.Module])

# Layers pushed by annotations and module scopes, outermost first (the trace
# policy itself is the tracer's base layer and is not on this stack).
_LAYERS: contextvars.ContextVar[Tuple[Layer, ...]] = contextvars.ContextVar("specfx_layers", default=())
# True while a specfx trace that honours annotations runs in this context.
_ANNOTATIONS_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "specfx_annotations_active", default=False
)


def current_layers() -> Tuple[Layer, ...]:
    """The annotation and scope layers in force in this context, outermost first.

    A ``with specialize(...)`` layer is in force only while the frame that entered it
    runs: a generator suspended inside the block does not lend it to its caller."""
    layers = _LAYERS.get()
    if not _WITH_FRAMES or not layers:
        return layers
    live: Optional[set] = None
    kept = []
    for layer in layers:
        frame = _WITH_FRAMES.get(id(layer))
        if frame is not None:
            if live is None:
                live = set()
                walker: Optional[types.FrameType] = sys._getframe(1)
                while walker is not None:
                    live.add(id(walker))
                    walker = walker.f_back
            if id(frame) not in live:
                continue
        kept.append(layer)
    return tuple(kept)


# id of a `with specialize(...)` layer -> the frame that entered it (removed on exit)
_WITH_FRAMES: Dict[int, types.FrameType] = {}


def annotations_active() -> contextvars.ContextVar[bool]:
    """The ContextVar the tracer sets while ``@specialize`` is honoured."""
    return _ANNOTATIONS_ACTIVE


def push_layer(layer: Layer) -> contextvars.Token[Tuple[Layer, ...]]:
    """Push ``layer``; the caller resets the returned token in a ``finally``."""
    return _LAYERS.set(_LAYERS.get() + (layer,))


def fresh_layers() -> contextvars.Token[Tuple[Layer, ...]]:
    """Start an empty stack (a trace does not inherit its caller's scopes)."""
    return _LAYERS.set(())


def reset_layers(token: contextvars.Token[Tuple[Layer, ...]]) -> None:
    """Undo :func:`push_layer` or :func:`fresh_layers`."""
    _LAYERS.reset(token)


class specialize:
    """Grant (or forbid) specialization flags while the annotated code is traced.

    Use it as a decorator on a function, a method or an ``nn.Module`` subclass
    (meaning its ``forward``), or as a context manager inside model code. The
    keywords mirror :class:`Specialize`: ``iter=`` (``ITER_LEN``), ``bool=``,
    ``shapes=``, ``scalars=``; ``True`` grants, ``False`` forbids. Scopes nest
    and the innermost one that names a flag wins. Outside ``specfx.trace`` the
    code runs unchanged.

    >>> import torch, specfx
    >>> from torch import nn
    >>> class Block(nn.Module):
    ...     @specfx.specialize(iter=True)
    ...     def forward(self, x):
    ...         a, b, c = torch.chunk(x, 3, dim=1)
    ...         return torch.cat([c, *torch.split(a + b, 1, dim=1)], dim=1)
    >>> gm = specfx.trace(Block(), torch.randn(1, 6))
    >>> [str(s.kind) for s in gm.specializations]
    ['unpack', 'iter']

    As a context manager:

    >>> def f(x):
    ...     with specfx.specialize(bool=True):
    ...         return x + 1 if x.sum() > 0 else x - 1
    >>> specfx.trace(f, torch.ones(2))(torch.ones(2))
    tensor([2., 2.])
    """

    __slots__ = ("_policy", "_description")

    def __init__(
        self,
        flags: Union[Specialize, str] = Specialize.NONE,
        *,
        iter: Optional[bool] = None,
        bool: Optional[bool] = None,
        shapes: Optional[bool] = None,
        scalars: Optional[bool] = None,
    ) -> None:
        if callable(flags) and not isinstance(flags, (Specialize, str)):
            raise TypeError(
                "specialize needs the flags to grant: write @specialize(iter=True) "
                "(or @specialize(Specialize.ITER_LEN)), not a bare @specialize"
            )
        keywords = {"iter": iter, "bool": bool, "shapes": shapes, "scalars": scalars}
        granted, denied = _flags_from_keywords(flags, keywords)
        policy = Policy(granted)
        if denied:
            forbidden: Dict[str, Any] = {k: False for k, f in FLAG_KEYWORDS.items() if f in denied}
            policy = policy | Policy(**forbidden)
        self._policy = policy
        self._description = policy.describe_keywords() or "Specialize.NONE"

    @property
    def policy(self) -> Policy:
        """The policy layer this annotation pushes."""
        return self._policy

    def __repr__(self) -> str:
        return f"specialize({self._description})"

    # Type checkers see the decorated object unchanged: a module class stays that class,
    # a function keeps its parameters and return type.
    @overload
    def __call__(self, target: _M) -> _M: ...

    @overload
    def __call__(self, target: Callable[_P, _R]) -> Callable[_P, _R]: ...

    def __call__(self, target: Any) -> Any:
        if isinstance(target, type):
            return self._decorate_class(target)
        if isinstance(target, (staticmethod, classmethod)):
            return type(target)(self._decorate_function(target.__func__))
        if not callable(target):
            raise TypeError(
                f"@specialize decorates functions, methods and nn.Module subclasses; "
                f"got {target!r} ({type(target).__name__})"
            )
        return self._decorate_function(target)

    def _decorate_class(self, cls: type) -> type:
        if not issubclass(cls, torch.nn.Module):
            raise TypeError(
                f"@specialize on a class needs an nn.Module subclass (it annotates forward); "
                f"{cls.__name__} is not one - decorate its methods instead"
            )
        cls.forward = self._decorate_function(cls.forward)
        return cls

    def _decorate_function(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        layer = Layer(self._policy, f"@specialize({self._description}) on {name}")
        active = _ANNOTATIONS_ACTIVE

        @functools.wraps(fn)
        def annotated(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if not active.get():
                return fn(*args, **kwargs)
            token = _LAYERS.set(_LAYERS.get() + (layer,))
            try:
                return fn(*args, **kwargs)
            finally:
                _LAYERS.reset(token)

        annotated.__specfx_policy__ = self._policy  # type: ignore[attr-defined]
        return annotated

    def __enter__(self) -> "specialize":
        if not _ANNOTATIONS_ACTIVE.get():  # eager, or a trace with Policy(annotations=False)
            return self
        frame = sys._getframe(1)
        origin = f"with specialize({self._description}) at {frame.f_code.co_filename}:{frame.f_lineno}"
        layer = Layer(self._policy, origin)
        _WITH_FRAMES[id(layer)] = frame
        _LAYERS.set(_LAYERS.get() + (layer,))
        return self

    def __exit__(self, *exc_info: object) -> None:
        layers = _LAYERS.get()
        # Pop our own entry; the stack is per context, so nesting and threads stay balanced.
        for index in range(len(layers) - 1, -1, -1):
            if layers[index].policy is self._policy and layers[index].origin.startswith("with "):
                _WITH_FRAMES.pop(id(layers[index]), None)
                _LAYERS.set(layers[:index] + layers[index + 1 :])
                return
        # Nothing to pop: __enter__ ran outside an annotation-honouring trace.

