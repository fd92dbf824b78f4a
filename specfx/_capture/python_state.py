"""Python state that traced code reads and writes: caches, globals, closures, warnings.

A graph computes tensors; it cannot repeat what forward does to Python objects outside
the model and the inputs. While specfx traces with example inputs:

- ``functools.lru_cache`` / ``functools.cache`` functions that the model's code can
  name (the globals of the modules that define the traced function or the model's
  classes, and the methods of those classes) are called *around* their cache: a value
  computed from traced values (a proxy) never enters the user's cache, where eager
  would get it back later, and an entry eager filled is not baked into the graph
  as a constant from before the trace. The caches are left exactly as they were.
- Module globals, class attributes of those modules' classes, the contents of lists,
  dicts and sets those globals hold, and the variables the traced function's closure
  holds (``nonlocal``) are compared with what they were when the trace began. Forward
  that changed one (a step counter, a memo of tensors, a log) is refused, naming it;
  the trace puts it back first, so tracing never changes them.
- ``warnings.warn`` called by model code is a graph node: the graph warns on every call,
  as eager does (and raises under an ``error`` filter, as eager does); the trace itself
  does not warn.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

import torch
from torch.fx.node import has_side_effect

from . import patches as _patches
from .._frames.bytecode import store_line
from .._frames.source import SourceLocation, caller_outside_specfx, is_user_file
from .session import TraceSession

__all__ = ["PythonState", "install_cache_bypass", "install_warnings", "namespaces", "store_location"]

has_side_effect(warnings.warn)  # dead-code elimination must keep the graph's warnings

_CacheWrapper = type(functools.lru_cache(maxsize=None)(lambda: None))


def namespaces(root: Any) -> List[Dict[str, Any]]:
    """The module dicts whose names the traced code can call: the traced function's module
    and the modules defining the model's classes (torch's own excluded)."""
    found: Dict[int, Dict[str, Any]] = {}
    function = root.forward if isinstance(root, torch.nn.Module) else root
    function = getattr(function, "__func__", function)
    if isinstance(getattr(function, "__globals__", None), dict):
        found[id(function.__globals__)] = function.__globals__
    classes = {type(m) for m in root.modules()} if isinstance(root, torch.nn.Module) else set()
    for cls in classes:
        for base in cls.__mro__:
            module = sys.modules.get(base.__module__)
            if module is not None and is_user_file(getattr(module, "__file__", None) or "<unknown>"):
                found.setdefault(id(module.__dict__), module.__dict__)
    return [d for d in found.values() if d.get("__name__", "").split(".")[0] not in ("torch", "specfx")]


def _classes(namespace: Dict[str, Any]) -> Iterable[type]:
    name = namespace.get("__name__")
    return [v for v in namespace.values() if isinstance(v, type) and v.__module__ == name]


def install_cache_bypass(tracer: TraceSession, spaces: List[Dict[str, Any]]) -> None:
    """Route calls of the cached functions in ``spaces`` (and their classes) around the cache."""
    for space in spaces:
        owners: List[Any] = [space, *_classes(space)]
        for owner in owners:
            items = list(owner.items() if isinstance(owner, dict) else vars(owner).items())
            for name, value in items:
                if isinstance(value, _CacheWrapper) and hasattr(value, "__wrapped__"):
                    _patches.patch(owner, name, _around_cache(tracer, value))


def _around_cache(tracer: TraceSession, cached: Any) -> Callable[..., Any]:
    function = cached.__wrapped__

    def call(*args: Any, **kwargs: Any) -> Any:
        if tracer.records_factories():
            return function(*args, **kwargs)
        return cached(*args, **kwargs)

    functools.update_wrapper(call, function)
    return call


class PythonState:
    """What forward may change outside the model and the inputs, remembered at the trace's
    start: :meth:`changes` names what differs after, :meth:`restore` puts it back."""

    def __init__(self, root: Any, spaces: List[Dict[str, Any]]) -> None:
        self._bindings: List[Tuple[str, Any, Dict[str, Any]]] = []  # (what, owner, copy of its entries)
        self._contents: List[Tuple[str, Any, Any]] = []  # (what, container, shallow copy)
        self._cells: List[Tuple[str, Any, Any]] = []  # (what, cell, value)
        self._generators: List[Tuple[torch.Generator, torch.Tensor]] = []  # (a module's generator, its state)
        self.controlled: List[torch.Generator] = []  # those forward seeded (refused): put back
        self.excused: Set[str] = set()
        for space in spaces:
            module = space.get("__name__", "?")
            self._bindings.append((module, space, dict(space)))
            for cls in _classes(space):
                self._bindings.append((f"{module}.{cls.__qualname__}", cls, dict(vars(cls))))
            for name, value in list(space.items()):
                if type(value) in (list, dict, set) and not name.startswith("__"):
                    self._contents.append((f"{module}.{name}", value, _copy(value)))
                elif isinstance(value, torch.Generator):  # seeded in forward before specfx refuses it
                    self._generators.append((value, value.get_state()))
                elif isinstance(value, types.FunctionType) and value.__closure__:  # a counter kept by a closure
                    self._keep_cells(value)
        function = root.forward if isinstance(root, torch.nn.Module) else root
        self._keep_cells(getattr(function, "__func__", function))

    def _keep_cells(self, function: Any) -> None:
        """Remember the variables ``function``'s closure holds (``nonlocal`` counters)."""
        code = getattr(function, "__code__", None)
        kept = {id(cell) for _, cell, _ in self._cells}
        for name, cell in zip(code.co_freevars if code is not None else (), getattr(function, "__closure__", None) or ()):
            if id(cell) in kept:
                continue
            try:
                self._cells.append((f"{function.__qualname__}: {name}", cell, cell.cell_contents))
            except ValueError:  # an empty cell
                pass

    @contextlib.contextmanager
    def excusing(self) -> Iterator[None]:
        """Changes made inside the ``with`` block are the graph's to repeat (a user-defined leaf
        module or wrapped function ran for its value: the graph calls it again): not refused,
        and still put back when the trace ends."""
        before = set(self.changes())
        try:
            yield
        finally:
            self.excused |= set(self.changes()) - before

    def refused_changes(self) -> List[str]:
        """The changes forward's traced code made, which no graph call repeats."""
        return [change for change in self.changes() if change not in self.excused]

    def changes(self) -> List[str]:
        """What forward changed, one line each."""
        found = []
        for what, owner, before in self._bindings:
            now = owner if isinstance(owner, dict) else vars(owner)
            for name in set(before) | set(now):
                if name.startswith("__") and name.endswith("__"):  # (__warningregistry__, ...)
                    continue
                if before.get(name, _ABSENT) is not now.get(name, _ABSENT):
                    found.append(f"{what}.{name}" if not isinstance(owner, dict) else f"global `{name}` of {what}")
        for what, container, before in self._contents:
            if not _same(container, before):
                found.append(f"the contents of {what}")
        for what, cell, before in self._cells:
            try:
                changed = cell.cell_contents is not before
            except ValueError:
                changed = True
            if changed:
                found.append(f"the variable {what.split(': ')[1]} of {what.split(': ')[0]}'s closure")
        return found

    def restore(self) -> None:
        """Put back every binding, container and closure variable as it was."""
        for generator, state in self._generators:
            if any(g is generator for g in self.controlled):  # (not another thread's draws)
                generator.set_state(state)
        for _, owner, before in self._bindings:
            if isinstance(owner, dict):
                for name in [n for n in owner if n not in before and not _dunder(n)]:
                    del owner[name]
                for name, value in before.items():
                    if not _dunder(name) and owner.get(name, _ABSENT) is not value:
                        owner[name] = value
            else:
                now = vars(owner)
                for name in [n for n in now if n not in before and not _dunder(n)]:
                    delattr(owner, name)
                for name, value in before.items():
                    if not _dunder(name) and now.get(name, _ABSENT) is not value:
                        setattr(owner, name, value)
        for _, container, before in self._contents:
            if not _same(container, before):
                container.clear()
                container.update(before) if not isinstance(container, list) else container.extend(before)
        for _, cell, before in self._cells:
            cell.cell_contents = before


_ABSENT: Any = object()


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _copy(container: Any) -> Any:
    return type(container)(container) if not isinstance(container, dict) else dict(container)


def _same(container: Any, before: Any) -> bool:
    if isinstance(container, dict):
        return len(container) == len(before) and all(
            k in before and before[k] is v for k, v in container.items())
    if isinstance(container, set):
        return len(container) == len(before) and all(any(a is b for b in before) for a in container)
    return len(container) == len(before) and all(a is b for a, b in zip(container, before))


def store_location(changes: List[str], spaces: List[Dict[str, Any]], root: Any) -> Optional[SourceLocation]:
    """The line of model code that stores the first changed global or closure variable, if found."""
    names = {c.split("`")[1] for c in changes if c.startswith("global `")}
    codes: List[types.CodeType] = []
    for space in spaces:
        for value in space.values():
            for function in [value, *(vars(value).values() if isinstance(value, type) else ())]:
                function = getattr(function, "__func__", function)
                if isinstance(getattr(function, "__code__", None), types.CodeType):
                    codes.append(function.__code__)
    function = root.forward if isinstance(root, torch.nn.Module) else root
    function = getattr(function, "__func__", function)
    if isinstance(getattr(function, "__code__", None), types.CodeType):
        codes.insert(0, function.__code__)
    closure = any("closure" in c for c in changes)
    while codes:
        code = codes.pop(0)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        line = store_line(code, frozenset(names), closure)
        if line is not None:
            return SourceLocation(code.co_filename, line, getattr(code, "co_qualname", code.co_name))
    return None


def install_warnings(tracer: TraceSession) -> None:
    """``warnings.warn`` in model code: a graph node (the trace itself does not warn)."""

    def warn(message: Any, category: Any = None, stacklevel: int = 1, *args: Any, **kwargs: Any) -> Any:
        original = _patches.previous(warnings, "warn")
        caller = caller_outside_specfx(sys._getframe(1))
        if not tracer.records_factories() or caller is None or not is_user_file(caller.f_code.co_filename):
            return original(message, category, stacklevel + 2, *args, **kwargs)
        if category is None:
            category = message.__class__ if isinstance(message, Warning) else UserWarning
        holder = tracer.constant_proxy(category, "_warning_")
        text = message if isinstance(message, str) else str(message)
        # a node, not a computed value: the trace does not warn, the graph warns on every call
        tracer.create_node("call_function", original, (text, holder.node), {})
        return None

    _patches.patch(warnings, "warn", warn)
