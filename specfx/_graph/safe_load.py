"""Reading the specialization records out of a saved file without running it.

A pickled ``GraphModule`` cannot be loaded safely: unpickling it executes the
generated Python code stored in the file (``torch.fx.graph_module.
reduce_graph_module``), so ``torch.load(weights_only=True)`` refuses it and
allowing it would defeat the point. The records do not need the module,
though. This reader runs the pickle of a ``torch.save`` archive with a
restricted ``find_class`` (Python's documented way to restrict unpickling):
only the record types and a few inert builtin and torch value types are
real; every other global — module classes, tensor rebuilders,
``reduce_graph_module`` and ``specfx.rebuild_graph_module`` themselves — becomes
an inert :class:`Opaque` that just keeps the arguments it was called with, and
tensor storages are never read.
The records are then found in the arguments the graph module would have been
rebuilt from.
"""

from __future__ import annotations

import collections
import enum
import pickle
import zipfile
from typing import IO, Any, Iterator, List, Optional, Tuple

import torch

from .legacy import LEGACY_PATHS
from .specialization import Specialization
from .._policy.policy import Specialize
from .._frames.source import SourceLocation
from ..guards import GUARDS

__all__ = ["Opaque", "UnsafeFileError", "read_specializations"]


class UnsafeFileError(ValueError):
    """The file holds no records that can be read without running it."""


class Opaque:
    """Stands for an object the reader does not build; keeps its call arguments."""

    args: Tuple[Any, ...] = ()  # also when made by __new__ alone (a pickled dataclass such as a TreeSpec)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __call__(self, *args: Any, **kwargs: Any) -> Opaque:
        return Opaque(*args)  # e.g. a method fetched with getattr, then called

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _record_types() -> Tuple[type, ...]:
    """The classes a record is made of (the kind's class comes from the guard table,
    so a typed kind enum is covered wherever it lives)."""
    kind_classes = {type(kind) for kind in GUARDS if isinstance(kind, enum.Enum)}
    return (Specialization, Specialize, SourceLocation, *sorted(kind_classes, key=lambda c: c.__name__))


_BUILTINS = {"set": set, "frozenset": frozenset, "complex": complex, "slice": slice, "range": range}


class _RecordUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._allowed = {(cls.__module__, cls.__qualname__): cls for cls in _record_types()}
        by_name = {cls.__qualname__: cls for cls in _record_types()}
        for path, names in LEGACY_PATHS.items():  # where 0.1 and 0.2 pickled them
            self._allowed.update({(path, old): by_name[new] for old, new in names.items() if new in by_name})

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._allowed:
            return self._allowed[(module, name)]
        if module == "builtins" and name in _BUILTINS:
            return _BUILTINS[name]
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch":
            value = getattr(torch, name, None)
            if isinstance(value, torch.dtype) or value in (torch.device, torch.Size):
                return value
        return Opaque

    def persistent_load(self, pid: Any) -> Any:
        return Opaque()  # a tensor storage: never read


def _unpickle(path: str) -> Any:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise UnsafeFileError(f"{path} is not a torch.save archive (or uses the legacy format)") from None
    with archive:
        names = [name for name in archive.namelist() if name.endswith("/data.pkl") or name == "data.pkl"]
        if len(names) != 1:
            raise UnsafeFileError(f"{path} is a zip file but not a torch.save archive")
        with archive.open(names[0]) as data:
            return _RecordUnpickler(data).load()


def _candidates(obj: Any, depth: int = 0) -> Iterator[Any]:
    """Every value reachable from ``obj`` through containers and opaque calls, outermost first."""
    if depth > 8:
        return
    yield obj
    if isinstance(obj, dict):
        children: Any = obj.values()
    elif isinstance(obj, (list, tuple)):
        children = obj
    elif isinstance(obj, Opaque):
        children = obj.args
    else:
        return
    for child in children:
        yield from _candidates(child, depth + 1)


def _records_in(obj: Any) -> Optional[List[Specialization]]:
    if isinstance(obj, dict) and isinstance(obj.get("specializations"), list):
        obj = obj["specializations"]
    if isinstance(obj, (list, tuple)) and all(isinstance(item, Specialization) for item in obj):
        return list(obj)
    return None


def read_specializations(path: str) -> List[Specialization]:
    """The records of the first specfx graph (or list of records) in the file at
    ``path``, read without running anything the file contains.

    Raises ``OSError`` if the file cannot be read and :class:`UnsafeFileError` if
    it holds no records readable this way (a graph that lost its records, a legacy
    format, not a torch.save file).
    """
    saved = _unpickle(path)
    for candidate in _candidates(saved):
        if isinstance(candidate, Opaque) and not candidate.args:
            continue
        records = _records_in(candidate)
        if records is not None and (records or candidate is saved or isinstance(candidate, dict)):
            return records
    raise UnsafeFileError(
        f"{path} holds no specfx records that can be read without loading it (a graph that lost its "
        f"records, e.g. after FX quantization, is explained from its guard nodes, which needs loading it)"
    )
