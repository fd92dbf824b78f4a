"""The import paths that graphs pickled by earlier releases name, kept loadable.

Since 0.3 every class and function a pickle names reports a public path (``specfx.X``,
``specfx.guards.X``; the frozen list is in ``docs/guarantees.md``). Graphs saved by 0.1
and 0.2 name private module paths of their time instead: each of those paths becomes a
small module, registered when ``specfx`` is imported, that holds exactly the names those
pickles look up there (unpickling imports ``specfx`` first, so they are always found).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types
from typing import Any, Dict

__all__ = ["LEGACY_PATHS", "install_legacy_paths"]

# old module path -> {name pickles of 0.1/0.2 read from it: its public name in `specfx`}
LEGACY_PATHS: Dict[str, Dict[str, str]] = {
    "specfx._decisions": {"Specialization": "Specialization"},
    "specfx._guards": {"Specialization": "Specialization"},
    "specfx._policy": {"Policy": "Policy", "Specialize": "Specialize"},  # a package now, which re-exports both
    "specfx._source": {"SourceLocation": "SourceLocation"},
    "specfx._tracer": {"SpecTracer": "SpecTracer", "autocast_enabled": "autocast_enabled"},
    "specfx._options": {name: name for name in ("check_concrete_arg", "check_input_type", "default_argument")},
    "specfx._records": {"keep_records": "keep_records", "rebuild_graph_module": "rebuild_graph_module"},
    "specfx._caught": {"_caught_from_names": "rebuild_caught", "raise_caught": "raise_caught"},
}


def install_legacy_paths(package: Any) -> None:
    """Register one small module per old path, holding the names read from ``package``
    (the ``specfx`` module, passed in so that this layer imports nothing above it)."""
    for path, names in LEGACY_PATHS.items():
        if path in sys.modules or importlib.util.find_spec(path) is not None:
            continue  # a real module of that name (the `_policy` package)
        module = types.ModuleType(path, "Import path of an earlier specfx release, kept for its pickles.")
        # Resolved when a pickle looks a name up: `import specfx` loads its contents on first use.
        module.__getattr__ = functools.partial(_resolve, package, path, names)  # type: ignore[method-assign]
        sys.modules[path] = module
        setattr(package, path.rsplit(".", 1)[1], module)


def _resolve(package: Any, path: str, names: Dict[str, str], name: str) -> Any:
    """``name`` looked up in the old module ``path``: the public object it became."""
    if name not in names:
        raise AttributeError(f"module {path!r} has no attribute {name!r}")
    return getattr(package, names[name])
