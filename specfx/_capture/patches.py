"""Every global change specfx makes while it traces, in one place.

A trace runs user code that asks torch.fx whether it is tracing, or for the grad
mode; specfx has to change those answers for the tracing code only. Each change
is made through :func:`patch` inside a :func:`tracing` session:

- the attribute is replaced by a *dispatcher* that looks at a ``ContextVar``:
  calls from the tracing thread (more exactly, its context) reach the
  replacement, every other thread reaches the previous value, unchanged;
- the previous value (not the builtin: whatever was there, a user's or another
  library's patch included) is put back when the last session using the
  attribute ends; sessions may end in any order, from any thread;
- nested sessions (a trace inside a trace) see their own replacements first.

>>> import math
>>> from specfx._capture import patches as _patches
>>> with _patches.tracing():
...     _patches.patch(math, "floor", lambda x: "patched")
...     math.floor(2.5)
'patched'
>>> math.floor(2.5)
2

A thread that is not tracing pays for one ``ContextVar.get`` per call of a
patched function while a trace runs; between traces nothing is patched.
``builtins.isinstance`` is never patched: a traced value answers ``isinstance``
through its ``__class__`` (see _type_reads.py), so no other object and no other
thread is affected.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import gc
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import torch.fx._symbolic_trace as _fx_trace

__all__ = ["ModelType", "Session", "active", "answer_type", "confine_fx_tracing_flag", "fx_tracing_off",
           "no_full_collections", "patch", "patch_calls", "patch_classmethod", "shadow_type",
           "previous", "restore_fx_tracing", "tracing", "unpatched", "autowrap_ids"]

_ABSENT: Any = object()
_Key = Tuple[int, str]


class Session:
    """One tracing context's replacements (see :func:`tracing`)."""

    __slots__ = ("parent", "replacements", "keys", "fx_token")

    def __init__(self, parent: Optional["Session"]) -> None:
        self.parent = parent
        self.fx_token: Optional[contextvars.Token[bool]] = None  # confine_fx_tracing_flag's
        self.replacements: Dict[_Key, Callable[..., Any]] = {}
        self.keys: List[_Key] = []  # install order, undone in reverse

    def lookup(self, key: _Key) -> Optional[Callable[..., Any]]:
        session: Optional[Session] = self
        while session is not None:
            replacement = session.replacements.get(key)
            if replacement is not None:
                return replacement
            session = session.parent
        return None


_SESSION: contextvars.ContextVar[Optional[Session]] = contextvars.ContextVar("specfx_patch_session", default=None)
_session_now = _SESSION.get


class _Slot:
    """An attribute specfx has replaced: its previous value, the value installed
    and how many sessions use it."""

    __slots__ = ("owner", "name", "previous", "before", "installed", "users")

    def __init__(self, owner: Any, name: str, previous: Any, before: Any) -> None:
        self.owner = owner
        self.name = name
        self.previous = previous  # what to put back (_ABSENT: delete)
        self.before = before  # what a call reached before the patch
        self.installed: Any = None
        self.users = 0


_LOCK = threading.Lock()
_SLOTS: Dict[_Key, _Slot] = {}


def _read(owner: Any, name: str) -> Any:
    """The value to put back: a class's own entry (absent if inherited), else the attribute."""
    if isinstance(owner, dict):
        return owner.get(name, _ABSENT)
    return owner.__dict__.get(name, _ABSENT) if isinstance(owner, type) else getattr(owner, name, _ABSENT)


def _callable(owner: Any, name: str) -> Any:
    """What a call reached before the patch (for a class, inherited methods included)."""
    return owner.get(name, _ABSENT) if isinstance(owner, dict) else getattr(owner, name, _ABSENT)


def _write(owner: Any, name: str, value: Any) -> None:
    if isinstance(owner, dict):
        if value is _ABSENT:
            owner.pop(name, None)
        else:
            owner[name] = value
    elif value is _ABSENT:
        delattr(owner, name)
    else:
        setattr(owner, name, value)


def active() -> bool:
    """Whether the calling context is inside a :func:`tracing` session."""
    return _session_now() is not None


@contextlib.contextmanager
def tracing() -> Iterator[Session]:
    """Mark the calling context as tracing for the ``with`` block; every patch
    made in it is undone on exit, in reverse order (also when the block raises)."""
    session = Session(_session_now())
    token = _SESSION.set(session)
    try:
        yield session
    finally:
        if session.fx_token is not None:
            _FX_TRACING.reset(session.fx_token)
        _SESSION.reset(token)
        with _LOCK:
            for key in reversed(session.keys):
                _release(key)


def _release(key: _Key) -> None:
    slot = _SLOTS[key]
    slot.users -= 1
    if slot.users:
        return
    del _SLOTS[key]
    # Someone (a user, another library) patched over us meanwhile: theirs stays, and
    # the value they wrapped (our dispatcher) keeps answering as the previous value.
    if _read(slot.owner, slot.name) is slot.installed:
        _write(slot.owner, slot.name, slot.previous)
    if slot.owner is builtins:
        _forget_in_dynamo(slot)


def _forget_in_dynamo(slot: _Slot) -> None:
    """torch._dynamo lists the builtins by id the first time it needs them; if that
    happened during a trace, it listed our dispatcher instead of the builtin, and would
    refuse to compile code calling the builtin: swap the ids back."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    table = getattr(rules, "_builtin_function_ids", None)
    ids, names = getattr(table, "function_ids", None), getattr(table, "function_names", None)
    if ids is None or id(slot.installed) not in ids or slot.before is _ABSENT:
        return
    ids.discard(id(slot.installed))
    ids.add(id(slot.before))
    if names is not None:
        names[id(slot.before)] = names.pop(id(slot.installed), f"builtins.{slot.name}")


def _use_slot(owner: Any, name: str, make_installed: Callable[[Any, _Key], Any]) -> _Key:
    # make_installed(what calls reached so far, key) -> the value to install
    """Install (or reuse) the slot for ``owner.name`` and count the calling session as a user."""
    session = _session_now()
    if session is None:
        raise RuntimeError("specfx._capture.patches.patch() is only valid inside a tracing() session")
    key = (id(owner), name)
    with _LOCK:
        slot = _SLOTS.get(key)
        if slot is None:
            slot = _SLOTS[key] = _Slot(owner, name, _read(owner, name), _callable(owner, name))
            slot.installed = make_installed(slot.before, key)
            _write(owner, name, slot.installed)
        slot.users += 1
        session.keys.append(key)
    return key


def patch(owner: Any, name: str, replacement: Callable[..., Any]) -> None:
    """Within the current :func:`tracing` session, calls of ``owner.name``
    (``owner[name]`` for a dict, e.g. a module's globals) from this context
    go to ``replacement``; calls from anywhere else go to the previous value.

    ``replacement`` takes the arguments of the call; it reaches the previous
    value as ``previous(owner, name)``.
    """
    key = _use_slot(owner, name, lambda before, key: _dispatcher(before, key, name))
    session = _session_now()
    assert session is not None
    session.replacements[key] = replacement


def previous(owner: Any, name: str) -> Any:
    """What ``owner.name`` was before specfx patched it (its current value if unpatched)."""
    with _LOCK:
        slot = _SLOTS.get((id(owner), name))
        return _callable(owner, name) if slot is None else slot.before



# What torch.fx's _Patcher.patch marks its wrappers with (name-mangled in its class body).
_FX_WRAPPER_MARK = "_Patcher__fx_already_patched"


def unpatched(owner: Any, name: str) -> Any:
    """``owner.name`` as it is between traces: without specfx's dispatcher, and without the
    wrapper a torch.fx trace (of any thread) puts there while it runs (``math.sqrt``, autowrapped)."""
    value = previous(owner, name)
    while _FX_WRAPPER_MARK in getattr(value, "__dict__", ()) and hasattr(value, "__wrapped__"):
        value = value.__wrapped__
    return value


def autowrap_ids(modules: Any, functions: Any) -> Set[int]:
    """The ids torch.fx's tracer autowraps: the public functions of ``modules`` and ``functions``.

    torch.fx reads them from the modules' dicts when a tracer is made; made while another
    thread traces, it would list that trace's wrappers of ``math``'s functions, which are freed when
    that trace ends. Their ids then name new objects, such as the wrapper torch.fx makes for a
    ``torch.fx.wrap``-ed function: wrapped twice, it is left in the model's module after the trace.
    """
    ids = {id(unpatched(module, name)) for module in modules for name, value in list(vars(module).items())
           if not name.startswith("_") and callable(value)}
    return ids | {id(function) for function in functions}


# -- `type(x)` in model code ------------------------------------------------------------------
#
# Python's type() cannot be intercepted: a traced value is specfx's proxy, so `type(x) is
# torch.Tensor` would take the other branch. Model code finds `type` by name, in its module's
# globals before the builtins; while a session traces, the module dicts of the traced code hold
# `type` = ModelType (put there by shadow_type, taken away when the session ends), a class that
# calls the session's answer for a one-argument call (the traced value's class) and is the builtin
# for everything else: a call with three arguments makes a class, isinstance(c, type) and
# issubclass(c, type) answer as for the builtin, and any other thread gets the builtin's answers.
# Where the builtin would return itself (`type(SomeClass)`), the call returns ModelType, the
# module's `type`, so `type(cls) is type` holds in the tracing thread and in every other one.


class _TypeOfModelCode(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs:
            session = _session_now()
            answer = session.lookup(_TYPE_ANSWER) if session is not None else None
            kind = answer(args[0]) if answer is not None else builtins.type(args[0])
            # The module's `type` is this class: `type(SomeClass) is type` holds as in eager, in
            # every thread that runs the module's code meanwhile.
            return cls if kind is builtins.type or kind is _TypeOfModelCode else kind
        return builtins.type(*args, **kwargs)

    # `obj.__class__ == type`, `{type: ...}[kind]`: the builtin, compared or hashed, is this class.
    def __eq__(cls, other: Any) -> bool:
        return other is cls or other is builtins.type

    def __hash__(cls) -> int:
        return hash(builtins.type)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, builtins.type)

    def __subclasscheck__(cls, subclass: Any) -> bool:
        return issubclass(subclass, builtins.type)

    def __getattr__(cls, name: str) -> Any:  # type.__name__ is the class's own; type.mro, type.__new__...
        return getattr(builtins.type, name)


class ModelType(metaclass=_TypeOfModelCode):
    """The ``type`` that traced model code finds by name (see :func:`shadow_type`)."""


ModelType.__name__ = ModelType.__qualname__ = "type"
_TYPE_ANSWER: _Key = (id(ModelType), "__call__")


def answer_type(answer: Callable[[Any], Any]) -> None:
    """Within the current :func:`tracing` session, ``type(obj)`` in the namespaces
    :func:`shadow_type` shadows calls ``answer(obj)``."""
    session = _session_now()
    assert session is not None
    session.replacements[_TYPE_ANSWER] = answer


def shadow_type(namespace: Dict[str, Any]) -> None:
    """Within the current :func:`tracing` session, the name ``type`` in ``namespace`` (a
    module's globals) is :class:`ModelType`, unless the module defines its own ``type``."""
    if namespace.get("type", ModelType) is not ModelType:
        return
    key = (id(namespace), "type")
    session = _session_now()
    if session is None or key in session.keys:
        return
    _use_slot(namespace, "type", lambda before, key: ModelType)


def patch_classmethod(owner: type, name: str, replacement: Callable[..., Any]) -> None:
    """As :func:`patch`, for a classmethod of ``owner`` that its subclasses inherit:
    ``replacement`` takes the class the method was called on, then the call's arguments;
    calls from every other context reach the previous classmethod, with that class."""
    function = owner.__dict__[name].__func__

    def make_installed(before: Any, key: _Key) -> Any:
        def dispatch(cls: Any, *args: Any, **kwargs: Any) -> Any:
            session = _session_now()
            if session is not None:
                replacement = session.lookup(key)
                if replacement is not None:
                    return replacement(cls, *args, **kwargs)
            return function(cls, *args, **kwargs)

        dispatch.__name__ = dispatch.__qualname__ = name
        dispatch.__doc__ = function.__doc__
        dispatch.__wrapped__ = function  # type: ignore[attr-defined]
        return classmethod(dispatch)

    key = _use_slot(owner, name, make_installed)
    session = _session_now()
    assert session is not None
    session.replacements[key] = replacement


# -- every call of a function, however it is held ---------------------------------------------
#
# Replacing an attribute misses the references taken before the patch: a bound method stored at
# import (`round_ste_impl = RoundSteFn.apply`, the usual way to export an autograd Function)
# keeps calling the function object it was made from. So the function object's code is swapped
# for a stub that calls a global of the function's module, a dispatcher: this context reaches
# the replacement, every other one a copy of the function with its own code. (A function's code
# can only be swapped for code with as many free variables: the stub names the original's, so
# the closure, `super()`'s `__class__` cell included, stays as it is.)

_CALLS_PREFIX = "_specfx_calls_"


def _copy_function(function: types.FunctionType) -> types.FunctionType:
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    return copy


def _stub_code(function: types.FunctionType, dispatcher: str) -> types.CodeType:
    """Code calling the global ``dispatcher`` with the call's arguments, with ``function``'s
    free variables (named after the return, never read: the symbol table counts them all)."""
    freevars = function.__code__.co_freevars
    source = "def outer():\n"
    source += "".join(f"    {name} = None\n" for name in freevars)
    source += f"    def stub(*args, **kwargs):\n        return {dispatcher}(*args, **kwargs)\n"
    if freevars:
        source += f"        ({', '.join(freevars)},)\n"
    source += "    return stub\n"
    namespace: Dict[str, Any] = {}
    exec(compile(source, "<specfx._capture.patches>", "exec"), namespace)
    code = namespace["outer"]().__code__
    if code.co_freevars != freevars:
        raise RuntimeError(f"specfx cannot swap the code of {function.__qualname__} (free variables {freevars})")
    return code.replace(co_name=function.__code__.co_name)


def patch_calls(function: types.FunctionType, replacement: Callable[..., Any]) -> None:
    """Within the current :func:`tracing` session, every call of ``function`` from this context
    goes to ``replacement(original, *args, **kwargs)``, however the caller holds ``function``
    (an alias or a bound method taken before the trace included); ``original`` runs the
    function's own code. Calls from anywhere else run that code as before.

    >>> import json
    >>> from specfx._capture import patches as _patches
    >>> held = json.dumps  # taken before the patch
    >>> with _patches.tracing():
    ...     _patches.patch_calls(json.dumps, lambda original, value: "patched " + original(value))
    ...     held([1])
    'patched [1]'
    >>> held([1])
    '[1]'
    """
    dispatcher = f"{_CALLS_PREFIX}{function.__name__}_{id(function):x}"

    def make_dispatcher(before: Any, key: _Key) -> Callable[..., Any]:
        original = _copy_function(function)  # (the code slot below is made after this one)

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            session = _session_now()
            if session is not None:
                replacement = session.lookup(key)
                if replacement is not None:
                    return replacement(original, *args, **kwargs)
            return original(*args, **kwargs)

        return dispatch

    key = _use_slot(function.__globals__, dispatcher, make_dispatcher)
    _use_slot(function, "__code__", lambda before, key: _stub_code(function, dispatcher))
    session = _session_now()
    assert session is not None
    session.replacements[key] = replacement


def _dispatcher(previous: Any, key: _Key, name: str) -> Callable[..., Any]:
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        session = _session_now()
        if session is not None:
            replacement = session.lookup(key)
            if replacement is not None:
                return replacement(*args, **kwargs)
        if previous is _ABSENT:
            raise AttributeError(f"{name} is only defined while specfx traces")
        return previous(*args, **kwargs)

    dispatch.__name__ = dispatch.__qualname__ = name
    dispatch.__doc__ = getattr(previous, "__doc__", None)
    dispatch.__wrapped__ = previous  # type: ignore[attr-defined]
    return dispatch


# -- torch.fx's process-wide "is tracing" flag ------------------------------------------------
#
# torch.fx.Tracer.trace sets the module global `_is_fx_tracing_flag` for the whole process;
# `is_fx_tracing()` / `is_fx_symbolic_tracing()` read it, and callers hold those functions by
# direct reference (torch.compile's wrapper binds it at decoration time), so replacing the
# module attribute would not reach them. Instead the functions' code is swapped for code that
# also asks a ContextVar: set in the tracing context (where torch.fx, and higher-order ops, keep
# turning the global flag on and off), unset elsewhere, where its default is the flag from
# before the trace. `ContextVar.get` is a C call, made only while some trace has the flag on.

_FX_HERE = "_specfx_fx_here"
_FX_BEFORE = "_specfx_fx_before"
_FX_SOURCE = f"""
def is_fx_tracing():
    is_fx_tracing_warning()
    return _is_fx_tracing_flag and {_FX_HERE}({_FX_BEFORE})

def is_fx_symbolic_tracing():
    return _is_fx_tracing_flag and {_FX_HERE}({_FX_BEFORE}) and not torch.compiler.is_compiling()
"""
_FX_TRACING: contextvars.ContextVar[bool] = contextvars.ContextVar("specfx_fx_tracing")


def _fx_codes() -> Dict[str, types.CodeType]:
    namespace: Dict[str, Any] = {}
    exec(compile(_FX_SOURCE, "<specfx._capture.patches>", "exec"), namespace)
    codes = {name: namespace[name].__code__ for name in ("is_fx_tracing", "is_fx_symbolic_tracing")}
    for name in codes:
        original = getattr(_fx_trace, name, None)
        # Only where the function still is what we replace: no arguments, no closure, reads the flag.
        if (not isinstance(original, types.FunctionType) or original.__code__.co_argcount
                or original.__code__.co_freevars or "_is_fx_tracing_flag" not in original.__code__.co_names):
            return {}
    return codes


_FX_CODES = _fx_codes()


def confine_fx_tracing_flag() -> None:
    """In the current session, make ``is_fx_tracing()`` answer the torch.fx flag
    in this context only; other threads see the flag as it was before."""
    session = _session_now()
    if not _FX_CODES or session is None:
        return
    session.fx_token = _FX_TRACING.set(True)
    before = bool(_fx_trace._is_fx_tracing_flag)
    _use_slot(_fx_trace.__dict__, _FX_HERE, lambda previous, key: _FX_TRACING.get)
    _use_slot(_fx_trace.__dict__, _FX_BEFORE, lambda previous, key: before)
    for name, code in _FX_CODES.items():
        def install_code(previous: Any, key: _Key, code: types.CodeType = code) -> Any:
            return code

        _use_slot(getattr(_fx_trace, name), "__code__", install_code)


def fx_tracing_off() -> Any:
    """Make ``is_fx_tracing()`` False for the calling context (code run for its value
    inside a trace asks "am I traced?" and must take its eager path); undo with
    :func:`restore_fx_tracing` and the token returned. Outside a confined trace the
    process-wide flag is torch.fx's own and is left alone."""
    session = _session_now()
    if session is None:
        return None
    if session.fx_token is not None:
        return _FX_TRACING.set(False)
    before = _fx_trace._is_fx_tracing_flag  # torch.fx changed and cannot be confined: the global, as torch does
    _fx_trace._is_fx_tracing_flag = False
    return (before,)


def restore_fx_tracing(token: Any) -> None:
    """Undo :func:`fx_tracing_off`."""
    if type(token) is tuple:
        _fx_trace._is_fx_tracing_flag = token[0]
    elif token is not None:
        _FX_TRACING.reset(token)


# A threshold no trace reaches: the oldest generation is collected after that many
# collections of the middle one (ten million young collections at the default 700/10).
_NO_FULL_COLLECTIONS = 1_000_000


@contextlib.contextmanager
def no_full_collections() -> Iterator[None]:
    """Put off the garbage collector's full collections for the ``with`` block (a trace).

    A trace makes long-lived objects (nodes, proxies, names, records) at a steady rate, so
    full collections keep coming, each walking every object of the process: at 100k nodes
    they took a tenth of ``symbolic_trace``'s time and a growing share per node. Young
    collections still run (the short-lived cycles a trace makes are freed as before); the
    threshold is put back at the end, unless someone else changed it meanwhile. Global (one
    setting per process), like the rest of this module; traces are serialized by the trace lock.
    """
    before = gc.get_threshold()
    if before[0] == 0 or before[2] == _NO_FULL_COLLECTIONS:  # no automatic collection, or a nested trace
        yield
        return
    ours = (before[0], before[1], _NO_FULL_COLLECTIONS)
    gc.set_threshold(*ours)
    try:
        yield
    finally:
        if gc.get_threshold() == ours:
            gc.set_threshold(*before)
