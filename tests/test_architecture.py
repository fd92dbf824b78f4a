"""The package's layers (docs/architecture.md): every import of specfx's own modules runs down
the layers, and no two modules import each other, type-only imports included."""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set, Tuple

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "specfx"

# bottom to top; a module may import from its own layer and from the layers below it
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("errors",),
    ("_frames",),
    ("_policy",),
    ("_checks",),
    ("guards",),
    ("_graph",),
    ("_capture",),
    ("_trace",),
    ("_specializer",),
    ("integrations",),
    ("cli",),
    ("__init__", "_api", "__main__", "brevitas", "quantize_fx"),  # the public face
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _is_package(path: pathlib.Path) -> bool:
    return path.name == "__init__.py" and path.parent != PACKAGE


def _imports(path: pathlib.Path) -> Set[str]:
    """The specfx modules ``path`` imports anywhere (functions and TYPE_CHECKING blocks too),
    as dotted names under specfx (``_capture.tracer``, ``errors``)."""
    name = _module_name(path)
    package = name.split(".") if _is_package(path) else name.split(".")[:-1]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and (node.module == "specfx" or node.module.startswith("specfx.")):
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:  # `from . import x` / `from .pkg import module`
                candidate = target + [alias.name]
                if (PACKAGE.joinpath(*candidate).with_suffix(".py").exists()
                        or PACKAGE.joinpath(*candidate, "__init__.py").exists()):
                    found.add(".".join(candidate))
                elif target:
                    found.add(".".join(target))
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("specfx."))
    found.discard(name)
    return found


def _layer(module: str) -> int:
    top = module.split(".")[0] if module else "__init__"
    return RANK[top]


GRAPH: Dict[str, Set[str]] = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    """A new folder or top-level module is placed in LAYERS (and in docs/architecture.md)."""
    assert [m for m in GRAPH if (m.split(".")[0] or "__init__") not in RANK] == []


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_run_down(module: str):
    """No module imports from a layer above its own."""
    upward = sorted(target for target in GRAPH[module] if _layer(target) > _layer(module))
    assert upward == [], f"specfx.{module} imports upward: {upward}"


def test_no_import_cycle():
    """No chain of imports returns to where it started (type-only imports count)."""
    cycles: List[List[str]] = []
    state: Dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: List[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH.get(module, ())):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target] if target in path else [module, target])
            elif target in GRAPH and not state.get(target):
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(GRAPH):
        if not state.get(module):
            visit(module, [module])
    # a package's __init__ re-exporting its own module is not a cycle of design
    cycles = [c for c in cycles if not (len(c) == 3 and c[0] == c[2] and c[1].startswith(c[0] + "."))]
    assert cycles == []


def test_the_check_sees_a_violation(tmp_path):
    """The import reader finds relative, absolute and function-level imports."""
    path = PACKAGE / "_frames" / "source.py"
    assert "errors" not in _imports(path) or _layer("errors") < _layer("_frames.source")
    tracer = _imports(PACKAGE / "_capture" / "tracer.py")
    assert {"_capture.decisions", "_policy.policy", "_graph.structure", "guards"} <= tracer
    specializer = _imports(PACKAGE / "_specializer" / "specializer.py")
    assert "_trace.trace" in specializer  # imported inside a function
