"""Ops traced inside model code's ``try`` blocks, where they worked on the example.

Traced where ``x @ y`` worked, the graph computes ``x @ y``; on an input where it raises,
eager runs the ``except`` handler, which the graph does not have. So the tracer marks each
node traced while an ``except`` clause of the model code could catch its exception
(``node.meta[CAUGHT]``, found from the exception tables of the frames being traced:
:func:`specfx._frames.bytecode.exception_handlers`), the generated ``forward`` runs its body in
one ``try`` (no node is changed: FX passes and quantization see the same graph), and an
exception from a marked node that the model's handler would catch becomes a ``GuardError``
that names the op, the exception and the handler's line.

Marks survive deepcopy (node meta), and pickling: ``gm._specfx_caught`` holds them by node
name, and re-tracing the saved code (:func:`restore`) puts them back.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .bytecode import TypeCheck, clause_types, exception_handlers, has_exception_handlers, type_checks
from .source import SourceLocation, is_internal_file

__all__ = ["ATTRIBUTE", "CAUGHT", "Caught", "Clauses", "Handlers", "joined", "protect_body", "protection",
           "rebuild_caught",
           "read_clauses", "restore"]

CAUGHT = "specfx_caught"  # node.meta key
ATTRIBUTE = "_specfx_caught"  # GraphModule attribute: node name -> Caught, kept by pickling
_RAISE_NAME = "specfx_raise_caught"  # the generated code's name for raise_caught

# Handlers: (exception classes, None for any; "file:line" of the handler)
Handlers = Tuple[Tuple[Optional[Tuple[type, ...]], str], ...]
# Clauses: the handlers as found, not yet read: (the clause's instructions, None for a bare
# `except:`; the frame it is read in; "file:line"). Read with read_clauses, at each op.
Clauses = Tuple[Tuple[Any, types.FrameType, str], ...]


class Caught:
    """A node traced inside handlers that may catch its exception: which classes each
    handler catches (innermost first; None: any exception), the op and where it was traced."""

    __slots__ = ("handlers", "operation", "where", "target")

    def __init__(self, handlers: Handlers, operation: str, where: str, target: str) -> None:
        self.handlers = handlers
        self.operation = operation
        self.where = where
        self.target = target  # the node's target, to check that a restored mark is its node's

    def handler_for(self, error: BaseException) -> Optional[str]:
        """The line of the first handler that catches ``error``, or None."""
        for caught, line in self.handlers:
            if caught is None or isinstance(error, caught):
                return line
        return None

    def __reduce__(self) -> Any:  # classes by name: a class local to a test cannot be pickled
        names = tuple((None if caught is None else tuple(_name(c) for c in caught), line)
                      for caught, line in self.handlers)
        return (rebuild_caught, (names, self.operation, self.where, self.target))

    def __repr__(self) -> str:
        return f"Caught({self.operation!r} at {self.where!r}, handlers={self.handlers!r})"


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _class(name: str) -> Optional[type]:
    module, _, qualname = name.partition(":")
    try:
        value: Any = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        return None
    return value if isinstance(value, type) else None


def rebuild_caught(names: Any, operation: str, where: str, target: str) -> Caught:
    """Unpickle a :class:`Caught` mark (its exception classes are found again by name)."""
    handlers: List[Tuple[Optional[Tuple[type, ...]], str]] = []
    for caught_names, line in names:
        classes = None if caught_names is None else tuple(_class(n) for n in caught_names)
        # a class that cannot be found again is taken as catching anything (a GuardError, not a wrong answer)
        known = None if classes is None or None in classes else tuple(c for c in classes if c is not None)
        handlers.append((known, line))
    return Caught(tuple(handlers), operation, where, target)


# -- while tracing -------------------------------------------------------------------------------

# id(code) -> (the code, kept so that its id stays its own; whether it is model code with try
# blocks; its compared ``type(x)`` calls; what it is: _RELAY, _MODEL, or _RESUMABLE)
_Entry = Tuple[types.CodeType, bool, Tuple[TypeCheck, ...], int]
_WALKED: Dict[int, _Entry] = {}
_NOTHING: Tuple[TypeCheck, ...] = ()
_RELAY, _MODEL, _RESUMABLE = 0, 1, 2  # specfx's and torch's code; model code; a model generator or coroutine
_RESUMABLE_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


# torch._assert compares type(condition) to hand a traced condition to __torch_function__:
# torch's own relay, not the model's comparison
_TORCH_ASSERT = torch._assert.__code__


def _remember(code: types.CodeType) -> _Entry:
    """What the walk looks at in ``code``'s frames: whether it is model code (not specfx,
    torch, or specfx's generated forward) with try blocks, and its compared ``type(x)`` calls."""
    model_code = (not is_internal_file(code.co_filename) and _RAISE_NAME not in code.co_names
                  and code is not _TORCH_ASSERT)
    kind = _RELAY if not model_code else _RESUMABLE if code.co_flags & _RESUMABLE_FLAGS else _MODEL
    entry = _WALKED[id(code)] = (code, model_code and has_exception_handlers(code),
                                 type_checks(code) if model_code else _NOTHING, kind)
    return entry


def new_memo() -> List[Any]:
    """A memo for :func:`protection` walks that end at one ``stop``."""
    return [None, ()]


def protection(stop: Optional[types.FrameType],
               on_type_checks: Optional[Callable[[types.FrameType], None]] = None,
               start: Optional[types.FrameType] = None, memo: Optional[List[Any]] = None) -> Optional[Clauses]:
    """The ``except`` clauses of the frames being traced (from ``start``, by default the
    caller's, up to, not including, ``stop``) that an exception raised now would reach,
    innermost first; None when there are none (``finally`` and ``with`` blocks re-raise and
    are passed through). Frames whose code compares ``type(x)`` are handed to
    ``on_type_checks``. Called for every op: one dict lookup per frame (and, on Python >= 3.11,
    a frame object made for each frame not walked before: callers start above their own).

    ``memo`` (from :func:`new_memo`, one per ``stop``) remembers the first model frame walked
    and the ``except`` clauses of the frames above it: those frames wait in the calls that
    led to it, so while it runs they are at the same clauses, and a walk that reaches it
    again stops there. (Not a generator's frame: it is resumed from anywhere.) The classes
    a clause names are not read here (:func:`read_clauses`): walks are kept (the memo, the
    frames above a module call), and code run since may have rebound them (``self.errors``)."""
    found: List[Tuple[Any, types.FrameType, str]] = []  # (clause, its frame, its line)
    walked = _WALKED
    frame: Optional[types.FrameType] = sys._getframe(1) if start is None else start
    first: Optional[types.FrameType] = None
    mark = -1
    while frame is not None and frame is not stop:
        code = frame.f_code
        entry = walked.get(id(code))
        if entry is None or entry[0] is not code:
            entry = _remember(code)
        if entry[2] and on_type_checks is not None:
            on_type_checks(frame)
        if entry[1]:
            for handler in exception_handlers(code, frame.f_lasti):
                if handler.kind != "except":
                    continue
                line = str(SourceLocation(code.co_filename, handler.line, code.co_name))
                for clause in handler.clauses:
                    found.append((clause, frame, line))
        if entry[3] and mark < 0:  # the first model frame
            if memo is not None and entry[3] == _MODEL:
                if memo[0] is frame:
                    found.extend(memo[1])
                    break
                first = frame
            mark = len(found)
        frame = frame.f_back
    else:
        if first is not None and memo is not None:
            memo[0], memo[1] = first, tuple(found[mark:])
    return tuple(found) if found else None


def read_clauses(clauses: Clauses) -> Handlers:
    """The classes each clause names now, as eager reads them when an error arrives (code
    run since the walk may have rebound ``self.errors``): called for each op."""
    # a bare `except:` catches anything; an expression specfx cannot read, too
    return tuple((clause_types(clause, frame) if clause else None, line) for clause, frame, line in clauses)


def joined(inner: Optional[Clauses], outer: Optional[Clauses]) -> Optional[Clauses]:
    """The clauses of two stretches of frames, the inner one's first."""
    if inner is None or outer is None:
        return inner if outer is None else outer
    return inner + outer


def target_name(node: torch.fx.Node) -> str:
    """A node's target as a stable string (functions by their qualified name)."""
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__qualname__", None) or repr(target)


def marks(graph: torch.fx.Graph) -> Dict[str, Caught]:
    """The graph's marks by node name (stored on the GraphModule for pickling)."""
    return {node.name: node.meta[CAUGHT] for node in graph.nodes if CAUGHT in node.meta}


def restore(graph: torch.fx.Graph, root: Any) -> None:
    """Re-tracing a specfx graph's code (unpickling, ``specfx.trace(gm)``): put the marks
    that the saved graph held back on the nodes of the same name and target."""
    saved = getattr(root, "__dict__", {}).get(ATTRIBUTE)
    if not saved:
        return
    for node in graph.nodes:
        caught = saved.get(node.name)
        if caught is not None and caught.target == target_name(node):
            node.meta[CAUGHT] = caught


# -- the generated code ------------------------------------------------------------------------


# Under torch.compile, the frame of a forward with marked ops runs eagerly: dynamo would stop at an
# op that fails for an input with its own error (a failed fake-tensor call) and never reach the
# handler. skip_frame must be called in that frame itself; outside dynamo it does nothing.
_EAGER_UNDER_COMPILE = 'torch._dynamo.skip_frame("specfx: ops traced inside try blocks run eagerly")\n'


def protect_body(body: List[str]) -> List[str]:
    """torch.fx's body transformer: forward's body (after the entry check) inside one ``try``
    whose handler hands the exception to :func:`raise_caught` and re-raises it otherwise
    (run eagerly under ``torch.compile``)."""
    indented = ["".join("    " + line if line.strip() else line for line in chunk.splitlines(True))
                for chunk in body]
    return [_EAGER_UNDER_COMPILE, "try:\n", *indented,
            f"except Exception as specfx_error:\n    {_RAISE_NAME}(self, specfx_error)\n    raise\n"]


def is_marked(nodes: Any) -> bool:
    """Whether any of ``nodes`` is marked (the code generation wraps the body then)."""
    return any(CAUGHT in node.meta for node in nodes)


rebuild_caught.__module__ = "specfx"  # pickles of marked graphs name it by the public path
