"""Input and output structure of traced graphs.

A graph traced with examples takes its inputs the way the model did (dicts,
lists, tuples, dataclasses, any pytree node) and returns exactly the output
types eager returns (transformers ``ModelOutput``, ``OrderedDict``...). One
mechanism does it, torch.fx's pytree code generation (as make_fx and export
use it): the placeholders are the leaves of the inputs, and the generated
``forward`` keeps the model's signature, checks the structure, flattens, and
rebuilds the output from its spec::

    def forward(self, batch, n):
        batch_x, n, = specfx_flatten_inputs((batch, n), self._in_spec, 'ti')
        ...
        return specfx_rebuild_outputs([mul, add], self._out_spec)

``specfx_flatten_inputs`` is the entry guard: before any compute it checks
every input's structure (container types, keys, lengths, ``None``-ness) and
each leaf's kind (a tensor, an ``int``, a ``float``...), naming the input by
its key path. Outputs that torch.fx represents itself (tensors, tuples,
lists, plain dicts) keep torch.fx's plain ``return``.

Re-tracing the generated code (unpickling, ``specfx.trace(gm)``) restores the
same placeholders and code generation; foreign tracers (``symbolic_trace``,
FX quantization) see both helpers record themselves as nodes, so the
structure check and the output types survive there too.
"""

from __future__ import annotations

import ast
import copyreg
import enum
import inspect
import re
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
from torch.fx.node import has_side_effect
from torch.fx.proxy import Proxy
from torch.utils import _pytree as pytree

from .._frames import caught as _caught
from .._checks.defaults import LEFT_OUT, register_default
from .._checks.kinds import IDENTITY, fingerprint, identity_print
from .._frames.bytecode import type_checks
from ..errors import GuardError
from ..guards import GUARD_FUNCTIONS
from .._policy.messages import entry_structure_failure
from .caught import raise_caught, retraced
from .input_writes import ContainerSnapshot
from .retrace import keep_leaves

__all__ = ["StructuredCodeGen", "entry_only", "flatten_inputs", "is_plain", "leaf_kind", "rebuild_outputs", "structured_root"]

# Leaf kinds checked at entry: code -> (description, test). '-' is not checked.
_KINDS: Dict[str, Tuple[str, Callable[[Any], bool]]] = {
    "t": ("a Tensor", lambda v: isinstance(v, torch.Tensor)),
    # a parameter whose default is a tensor: None means "left out" (see _render_default)
    "T": ("a Tensor or left out", lambda v: v is None or isinstance(v, torch.Tensor)),
    "i": ("an int", lambda v: type(v) is int or isinstance(v, torch.SymInt)),
    "f": ("a float", lambda v: type(v) is float or isinstance(v, torch.SymFloat)),
    "c": ("a complex", lambda v: type(v) is complex),
    "b": ("a bool", lambda v: type(v) is bool),
    "s": ("a str", lambda v: type(v) is str),
}
# Python values a trace cannot keep symbolic (identity, hashing, formatting): passed to the
# code as themselves and checked for equality at entry (a "value" decision).
BAKED_TYPES = (bool, str, bytes, enum.Enum, torch.dtype, torch.device)


def _is_proxy(value: Any) -> bool:
    """A tracer's proxy: torch.fx's, or a copy of torch.fx's (Brevitas' backport) by name."""
    return isinstance(value, Proxy) or any(cls.__name__ == "Proxy" for cls in type(value).__mro__)


def is_plain(codegen: Any) -> bool:
    """Whether ``codegen`` only checks kinds: every input a leaf, torch.fx's own ``return``."""
    return (isinstance(codegen, StructuredCodeGen) and codegen.pytree_info.out_spec is None
            and all(child.is_leaf() for child in codegen.pytree_info.in_spec.children()))


def leaf_kind(value: Any) -> str:
    """The kind code that the entry check tests for an input leaf like ``value``."""
    if isinstance(value, torch.Tensor):
        return "t"
    for code in "ifcbs":
        if _KINDS[code][1](value):
            return code
    return "-"


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return "a Tensor"
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    article = "an" if type(value).__name__[:1].lower() in "aeiou" else "a"
    return f"{article} {type(value).__name__} ({shown})"


def _spec_type_name(spec: pytree.TreeSpec) -> str:
    if spec.type is type(None):
        return "None"
    kind = spec.context if spec.type is pytree.namedtuple else spec.type  # type: ignore[attr-defined]
    name = getattr(kind, "__name__", str(kind))
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}"


def _one_level(value: Any) -> Tuple[List[Any], pytree.TreeSpec]:
    """``value``'s own node: its children (unflattened) and its one-level spec."""
    return pytree.tree_flatten(value, is_leaf=lambda node: node is not value)


def _first_difference(value: Any, spec: pytree.TreeSpec, path: str) -> Tuple[str, str, str]:
    """(path, what the input is, what was traced) at the first place ``value`` leaves ``spec``."""
    children, actual = _one_level(value)
    if actual.is_leaf() or str(actual.type) != str(spec.type):
        return path, "is " + (_describe(value) if actual.is_leaf() else _spec_type_name(actual)), \
            "as " + _spec_type_name(spec)
    if actual.context != spec.context:
        if isinstance(spec.context, list) and isinstance(actual.context, list):
            return path, f"has keys {tuple(actual.context)}", f"with keys {tuple(spec.context)} (in this order)"
        return path, f"has context {actual.context!r}", f"with {spec.context!r}"
    if actual.num_children != spec.num_children:
        return path, f"has {actual.num_children} elements", f"with {spec.num_children}"
    keyed = isinstance(spec.context, list) and len(spec.context) == spec.num_children
    for index, (child, child_spec) in enumerate(zip(children, spec.children())):
        key = f"[{spec.context[index]!r}]" if keyed else f"[{index}]"
        if not child_spec.is_leaf() and pytree.tree_flatten(child)[1] != child_spec:
            return _first_difference(child, child_spec, path + key)
    return path, "has another structure", "differently"


def _entry_error(path: str, actual: str, traced: str) -> GuardError:
    return GuardError(
        entry_structure_failure(path, actual, traced),
        expression=path,
        kind="structure",
        expected=traced,
        actual=actual,
        location="graph entry",
    )


def _leaf_paths(spec: pytree.TreeSpec, prefix: str) -> List[str]:
    """The key path of each leaf of ``spec`` (dict keys, else positions)."""
    if spec.is_leaf():
        return [prefix]
    context = spec.context
    keyed = isinstance(context, list) and len(context) == spec.num_children
    if spec.type is pytree.namedtuple:  # type: ignore[attr-defined]
        fields = getattr(context, "_fields", ())
        keys = [f".{f}" for f in fields] if len(fields) == spec.num_children else None
    else:
        keys = [f"[{k!r}]" for k in context] if keyed else None
    paths: List[str] = []
    for index, child in enumerate(spec.children()):
        paths.extend(_leaf_paths(child, prefix + (keys[index] if keys else f"[{index}]")))
    return paths


def _records_itself(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "specfx"  # generated code imports it from the public package
    return fn


def flatten_inputs(values: Tuple[Any, ...], spec: pytree.TreeSpec, kinds: Optional[str]) -> Any:
    """The graph's entry: check ``values`` (one per parameter) against the traced
    structure ``spec`` and leaf ``kinds``, and return the leaves (the placeholders).
    Called by generated code; raises :class:`GuardError` naming the input."""
    # Runs on every call: the common case (tensors and numbers as parameters) stays a few
    # attribute reads and type tests per input; anything unusual goes to _check_leaf.
    leaves: List[Any] = []
    children = spec.children()
    for index, value in enumerate(values):
        child = children[index]
        if child.num_nodes == 1 and child.num_leaves == 1:
            leaves.append(value)
            continue
        if (type(value) is child.type and child.type in _PLAIN and child.num_leaves == child.num_children
                and child.num_nodes == child.num_leaves + 1 == len(value) + 1):
            # one level of a tuple/list/dict of leaves: no pytree walk (a dict's keys in order)
            if child.type is dict:
                if list(value) == child.context:
                    leaves.extend(value.values())
                    continue
            elif child.type in (list, tuple):
                leaves.extend(value)
                continue
        if _is_proxy(value):  # re-traced by a tracer that does not know the structure
            _retraced_by(value.tracer)
            return value.tracer.create_proxy(
                "call_function", flatten_inputs, (values, _spec_argument(value.tracer, spec), kinds), {})
        flat, actual = pytree.tree_flatten(value)
        if actual != child and not _sizes_being_retraced(flat, actual, child):
            raise _entry_error(*_first_difference(value, child, spec.context[index]))
        leaves.extend(flat)
    if kinds is None:
        return leaves
    traced = False
    for position, kind in enumerate(kinds):
        leaf = leaves[position]
        if kind == "t":
            if isinstance(leaf, torch.Tensor):
                continue
        elif kind == "-" or type(leaf) is _EXACT.get(kind):
            continue
        traced = _check_leaf(leaf, kind, position, spec) or traced
    if traced:
        tracer = next(leaf.tracer for leaf in leaves if _is_proxy(leaf))
        if _retracing_own_code(tracer, spec):  # keep the checks in the new graph
            tracer.note_input_kinds(kinds)
        else:
            _retraced_by(tracer)
    return leaves


_PLAIN = (tuple, list, dict)


def _sizes_being_retraced(flat: List[Any], actual: pytree.TreeSpec, traced: pytree.TreeSpec) -> bool:
    """A re-trace of the graph's own code (loading a pickle) hands a ``torch.Size`` input over
    as a tuple of its sizes' proxies (no ``torch.Size`` holds proxies): the same structure."""
    def same(a: pytree.TreeSpec, t: pytree.TreeSpec) -> bool:
        if a.is_leaf() or t.is_leaf():
            return a.is_leaf() and t.is_leaf()
        if not (a.type is t.type or (a.type is tuple and t.type is torch.Size)):
            return False
        return (a.context == t.context and a.num_children == t.num_children
                and all(same(x, y) for x, y in zip(a.children(), t.children())))

    return any(_is_proxy(leaf) for leaf in flat) and same(actual, traced)
_EXACT = {"i": int, "f": float, "c": complex, "b": bool, "s": str}


def _check_leaf(leaf: Any, kind: str, position: int, spec: pytree.TreeSpec) -> bool:
    """The slow path of the entry check: True for a tracer's proxy, else raise unless
    ``leaf`` is of ``kind`` (a SymInt/SymFloat passes as an int/float)."""
    if _is_proxy(leaf):
        return True
    if not _KINDS[kind][1](leaf):
        paths = [p for i, c in enumerate(spec.children()) for p in _leaf_paths(c, spec.context[i])]
        raise _entry_error(paths[position], "is " + _describe(leaf), "as " + _KINDS[kind][0])
    return False


def _retraced_by(tracer: Any) -> None:
    """Another tracer than specfx's re-traces a specfx graph (its entry sees that tracer's
    proxies first): the graph's leaves stay leaves and its try-block marks stay (or that
    tracer is refused). A specfx re-trace restores both itself."""
    if not hasattr(tracer, "note_input_kinds"):
        keep_leaves(tracer)
        retraced(tracer)


def _retracing_own_code(tracer: Any, spec: pytree.TreeSpec) -> bool:
    """A specfx tracer re-tracing the root whose generated code passed ``spec`` (not a
    specfx graph called inside another model)."""
    root = getattr(tracer, "root", None)
    return (hasattr(tracer, "note_input_kinds") and root is not None
            and any(root.__dict__.get(name) is spec for name in ("_in_spec", "_out_spec")))


class _Rebuilt:
    """What ``rebuild_outputs`` hands a specfx re-trace: the flat outputs and their spec."""

    __slots__ = ("leaves", "spec")

    def __init__(self, leaves: List[Any], spec: pytree.TreeSpec) -> None:
        self.leaves = leaves
        self.spec = spec


def rebuild_outputs(leaves: List[Any], spec: pytree.TreeSpec) -> Any:
    """The graph's exit: the output rebuilt with the container types eager returned.
    Called by generated code."""
    for leaf in leaves:
        if _is_proxy(leaf):
            if _retracing_own_code(leaf.tracer, spec):
                return _Rebuilt(list(leaves), spec)
            return leaf.tracer.create_proxy(
                "call_function", rebuild_outputs, (list(leaves), _spec_argument(leaf.tracer, spec)), {})
    return unflatten(leaves, spec)


def unflatten(leaves: List[Any], spec: pytree.TreeSpec) -> Any:
    """``pytree.tree_unflatten``, except that a ``torch.Size`` comes back as a ``torch.Size``.
    torch registers ``torch.Size`` as a pytree node that unflattens to a plain tuple (for
    make_fx, whose sizes are proxies then); eager returns and takes a ``torch.Size``, and
    ``out.shape == torch.Size(...)`` holds for a tuple too, but ``type()``, ``.numel()`` and
    pickled outputs tell them apart."""
    if not _holds_size(spec):
        return pytree.tree_unflatten(leaves, spec)
    if len(leaves) != spec.num_leaves:
        return pytree.tree_unflatten(leaves, spec)  # (pytree's own message)
    remaining = iter(leaves)

    def build(node: pytree.TreeSpec) -> Any:
        if node.is_leaf():
            return next(remaining)
        children = [build(child) for child in node.children()]
        if node.type is torch.Size and all(type(c) is int or type(c) is torch.SymInt for c in children):
            return torch.Size(children)
        return pytree.tree_unflatten(children, _one_level_spec(node))

    return build(spec)


def _holds_size(spec: pytree.TreeSpec) -> bool:
    if spec.is_leaf():
        return False
    return spec.type is torch.Size or any(_holds_size(child) for child in spec.children())


def _one_level_spec(node: pytree.TreeSpec) -> pytree.TreeSpec:
    """``node`` with leaves for children: rebuilds one level from children built already."""
    return pytree.TreeSpec(node.type, node.context, [pytree.treespec_leaf()] * node.num_children)


def _spec_argument(tracer: Any, spec: pytree.TreeSpec) -> Any:
    """``spec`` as an argument of a node ``tracer`` records. A tracer that takes any
    constant (torch.fx's) gets the spec; one that refuses a TreeSpec constant (Brevitas'
    copy of torch.fx: "argument of type TreeSpec") gets a read of the attribute of the
    traced graph that holds it (``self._out_spec``), which every GraphModule copies."""
    if isinstance(tracer, torch.fx.Tracer):
        return spec
    root = getattr(tracer, "root", None)
    if isinstance(root, torch.nn.Module):
        for path, module in root.named_modules():
            for name in ("_out_spec", "_in_spec"):
                if module.__dict__.get(name) is spec:
                    return tracer.create_proxy("get_attr", f"{path}.{name}" if path else name, (), {})
    return spec


def _reduce_leaf(spec: Any) -> Any:
    return pytree.treespec_leaf, ()


# Saved graphs hold their input/output specs. torch pickles a leaf spec by re-creating the
# deprecated LeafSpec class, which warns on every load and copy; pickle it as the call
# that returns the shared leaf instead (same object, no warning, any loader with a torch that
# has treespec_leaf). Process-wide and permanent, not a _patches session: graphs are pickled
# after and outside any trace (torch.save, any thread). docs/guarantees.md states it.
copyreg.pickle(type(pytree.treespec_leaf()), _reduce_leaf)

_records_itself(flatten_inputs, "flatten_inputs")
_records_itself(rebuild_outputs, "rebuild_outputs")
has_side_effect(flatten_inputs)  # as a node (foreign re-trace) it is the entry guard: keep it


# -- code generation -------------------------------------------------------------------------


def _native(spec: pytree.TreeSpec) -> bool:
    """Outputs torch.fx's own ``return`` rebuilds exactly: tuples, lists, dicts, None, leaves."""
    if spec.is_leaf():
        return True
    return spec.type in (tuple, list, dict, type(None)) and all(_native(c) for c in spec.children())


_COUNTER = "# COUNTER: "  # torch.fx's marker fragment before each node's statement


def guard_statements(nodes: Sequence[torch.fx.Node]) -> Optional[Callable[[List[str]], List[str]]]:
    """A torch.fx body transformer that writes each guard as a bare call,
    ``specfx_guard_len(chunk, 2, 'len(x.chunk(2))', 'model.py:7: a, b = x.chunk(2)')``,
    where torch.fx binds the result and drops it (``guard_len = specfx_guard_len(...);
    guard_len = None``). A guard returns nothing; the shorter statement reads better
    and costs a third less to compile, which is the peak memory of a trace with
    many guards. None when ``nodes`` have no guard."""
    names = {i: node.name for i, node in enumerate(nodes)
             if node.op == "call_function" and node.target in GUARD_FUNCTIONS and not node.users}
    if not names:
        return None

    def transform(body: List[str]) -> List[str]:
        out = []
        name: Optional[str] = None  # the guard whose fragments come next
        for fragment in body:
            if fragment.startswith(_COUNTER):
                name = names.get(int(fragment[len(_COUNTER):]))
            elif name is not None:
                if fragment.startswith(f"{name} = "):  # the call
                    fragment = fragment[len(name) + 3:]
                elif fragment.startswith(";  "):  # the deletions after it end with the guard's own
                    own = f"{name} = None"
                    if f" = {own}" in fragment:
                        fragment = fragment.replace(f" = {own}", " = None")
                    elif own in fragment:
                        fragment = "\n"
                    name = None
            out.append(fragment)
        return out

    return transform


_STARS: Dict[Any, str] = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}


class StructuredCodeGen(_PyTreeCodeGen):
    """torch.fx pytree code generation with specfx's entry check: ``forward`` keeps
    the traced function's signature (``signature``, rendered), checks and flattens
    the inputs, and rebuilds non-native outputs from ``out_spec``."""

    def __init__(self, in_spec: pytree.TreeSpec, signature: str, kinds: Optional[str],
                 default_globals: Sequence[Tuple[str, Any]] = ()) -> None:
        super().__init__(_PyTreeInfo(list(in_spec.context), in_spec, None))
        self.signature = signature
        self.kinds = kinds
        self.default_globals = list(default_globals)

    def additional_globals(self) -> List[Tuple[str, Any]]:
        return [("specfx_flatten_inputs", flatten_inputs), ("specfx_rebuild_outputs", rebuild_outputs),
                ("specfx_raise_caught", raise_caught), *self.default_globals]

    def _gen_python_code(self, nodes: Any, *args: Any, **kwargs: Any) -> Any:
        nodes = list(nodes)
        bare = guard_statements(nodes)
        # ops traced inside the model's try blocks: the body runs in one try (_caught.py)
        protect = _caught.protect_body if _caught.is_marked(nodes) else None
        if bare is None and protect is None:
            return super()._gen_python_code(nodes, *args, **kwargs)
        previous = self._body_transformer

        def transform(body: List[str]) -> List[str]:
            for step in (bare, previous, protect):
                if step is not None:
                    body = step(body)
            return body

        self._body_transformer = transform
        try:
            return super()._gen_python_code(nodes, *args, **kwargs)
        finally:
            self._body_transformer = previous

    def process_inputs(self, *inputs: Any) -> Any:
        # one value per parameter, in order (``*args``/``**kwargs`` as their tuple/dict)
        return flatten_inputs(tuple(inputs), self.pytree_info.in_spec, None)

    def gen_fn_def(self, free_vars: List[str], maybe_return_annotation: str, *, expanded_def: bool = False) -> str:
        names = [v.split(":")[0].split("=")[0].strip() for v in free_vars]
        values = ", ".join(self.pytree_info.in_spec.context)
        kinds = repr(self.kinds) if self.kinds is not None else "None"
        head = f"def {self._func_name}(self{', ' if self.signature else ''}{self.signature}){maybe_return_annotation}:"
        if not names:
            return f"{head}\n    specfx_flatten_inputs(({values}{',' if values else ''}), self._in_spec, {kinds})"
        return (f"{head}\n    {', '.join(names)}, = specfx_flatten_inputs(({values},), self._in_spec, {kinds})")

    def generate_output(self, output_args: Any, *, descs: Any = None, repr_fn: Any = None) -> str:
        if self.pytree_info.out_spec is None:
            return super(_PyTreeCodeGen, self).generate_output(output_args, descs=descs, repr_fn=repr_fn)
        return f"return specfx_rebuild_outputs({(repr_fn or repr)(output_args)}, self._out_spec)"

    def process_outputs(self, out: Any) -> Any:
        if self.pytree_info.out_spec is None:
            return out
        return unflatten(out, self.pytree_info.out_spec)

    def set_outputs(self, result: Any) -> Any:
        """Take the traced function's result: flat leaves plus an output spec unless
        torch.fx's own ``return`` keeps its types."""
        if isinstance(result, _Rebuilt):
            leaves, spec = result.leaves, result.spec
        else:
            leaves, spec = pytree.tree_flatten(result)
            if _native(spec):
                return result
        self.pytree_info = self.pytree_info._replace(out_spec=spec)
        return leaves


def entry_only(codegen: Any) -> Any:
    """The code generation for a graph with ``codegen``'s inputs that returns nothing."""
    if not isinstance(codegen, StructuredCodeGen):
        return torch.fx.graph.CodeGen()
    return StructuredCodeGen(codegen.pytree_info.in_spec, codegen.signature, codegen.kinds, codegen.default_globals)


# -- tracing -------------------------------------------------------------------------------------


def _identifier(text: str) -> str:
    name = re.sub(r"_+", "_", re.sub(r"\W+", "_", text)).strip("_")
    return name if name and not name[0].isdigit() else f"_{name}"


def plain_object(value: Any) -> bool:
    """A Python object that is neither a tensor, a number, None, a container nor a value
    passed as itself anyway (:data:`BAKED_TYPES`): a sentinel, a function, a class, a
    dataclass instance. (A generator or a module stays a traced input.)"""
    return not (value is None or isinstance(value, (torch.Tensor, int, float, complex, torch.SymInt, torch.SymFloat,
                                                    torch.SymBool, torch.Generator, torch.nn.Module, list, tuple,
                                                    dict, set, frozenset, range, slice) + BAKED_TYPES)
                or type(value).__module__ == "numpy")


def _render_default(default: Any, may_omit: bool, needed: List[Tuple[str, Any]], fn: Callable[..., Any],
                    name: str, keys: Dict[str, str]) -> Tuple[str, bool]:
    """`` = value`` for a parameter's default when code can spell it (a literal, an enum
    member of an importable class, whose class goes to ``needed``; an object, the text that
    stands for it, ``'specfx-left-out:<key>'``), else `` = None`` where Python requires a
    default after others; and whether the parameter now has one."""
    if default is not inspect.Parameter.empty:
        if isinstance(default, enum.Enum) and "<locals>" not in type(default).__qualname__:
            needed.append((type(default).__name__, type(default)))
            return f" = {type(default).__name__}.{default.name}", True
        try:
            if type(default) is torch.dtype or ast.literal_eval(repr(default)) == default:
                return f" = {default!r}", True
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        if isinstance(default, torch.Tensor):
            # code cannot spell a tensor: None stands for it, and the graph picks the traced
            # constant when the caller leaves the parameter out (_options.default_argument)
            return " = None", True
        if plain_object(default) or isinstance(default, enum.Enum):
            keys[name] = register_default(fn, name, default)
            return f" = {LEFT_OUT + keys[name]!r}", True
    return ("", False) if may_omit else (" = None", True)


def _return_annotation(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The model's return annotation, for torch.fx to print on ``forward``: resolved when it is
    a string (``from __future__ import annotations``), which torch.fx would otherwise make a
    global that pickling cannot import; left out when it does not resolve."""
    annotation = fn.__annotations__.get("return")
    if isinstance(annotation, str):
        try:
            annotation = typing.get_type_hints(fn).get("return")
        except Exception:  # an annotation naming what the module does not define at run time
            annotation = None
    return {} if annotation is None else {"return": annotation}


def structured_root(root: Any) -> bool:
    """Whether ``root``'s forward is code generated by :class:`StructuredCodeGen`."""
    code = getattr(getattr(type(root), "forward", None), "__code__", None)
    return (code is not None and "specfx_flatten_inputs" in code.co_names
            and isinstance(root.__dict__.get("_in_spec"), pytree.TreeSpec))


def create_args(tracer: Any, root_fn: Callable[..., Any], is_module: bool,
                examples: Optional[Dict[str, Any]], baked: Callable[[Any, Any, str, Any], None],
                none_input: Callable[[Any], None], call: Callable[..., Any]) -> Tuple[Callable[..., Any], List[Any], StructuredCodeGen]:
    """Placeholders for the leaves of each parameter's value, and a function that
    rebuilds the inputs, calls ``root_fn`` and flattens its output. ``examples`` maps
    parameter names (``*args``/``**kwargs`` with their stars) to example values;
    ``None`` re-traces generated code (the structure comes from ``root._in_spec``). ``call``
    runs ``root_fn`` (with the root's hooks around it)."""
    fn = inspect.unwrap(root_fn)
    parameters = list(inspect.signature(fn).parameters.values())[1 if is_module else 0:]
    # the root's hooks wrap forward as (module, *args): pass it every parameter it can positionally
    by_position = call is not root_fn

    retrace_spec: Optional[pytree.TreeSpec] = None if examples is not None else tracer.root._in_spec
    children: List[pytree.TreeSpec] = []
    values: List[Any] = []
    rendered: List[str] = []
    needed: List[Tuple[str, Any]] = []  # globals the rendered defaults name
    default_keys: Dict[str, str] = {}  # parameter -> the key of its default object (_checks/defaults.py)
    has_default = False
    star = False
    for index, parameter in enumerate(parameters):
        kind = parameter.kind
        if retrace_spec is not None:
            value = None
            child = retrace_spec.child(index)
        else:
            assert examples is not None
            key = _STARS.get(kind, "") + parameter.name
            if key in examples:
                value = examples[key]
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                value = ()
            elif kind is inspect.Parameter.VAR_KEYWORD:
                value = {}
            else:
                value = None if parameter.default is inspect.Parameter.empty else parameter.default
            child = pytree.treespec_leaf() if value is None else pytree.tree_flatten(value)[1]
        values.append(value)
        children.append(child)
        if kind is inspect.Parameter.VAR_POSITIONAL:
            rendered.append(f"*{parameter.name}")
            star = True
        elif kind is inspect.Parameter.VAR_KEYWORD:
            rendered.append(f"**{parameter.name}")
        else:
            if kind is inspect.Parameter.KEYWORD_ONLY and not star:
                rendered.append("*")
                star = True
            text, defaulted = _render_default(parameter.default, kind is inspect.Parameter.KEYWORD_ONLY or not has_default,
                                              needed, fn, parameter.name, default_keys)
            has_default = has_default or (defaulted and kind is not inspect.Parameter.KEYWORD_ONLY)
            rendered.append(parameter.name + text)
    names = [p.name for p in parameters]
    # Parameters the examples leave at a default that the graph guards (None, a bool, a number,
    # a string) are left out of the call, as the user's call leaves them out: a wrapper that
    # reads **kwargs (transformers' deprecate_kwarg: "both `past_key_values` and `cache` are
    # set") sees the call eager sees. (A tensor default stays passed: it is an input.)
    omitted = frozenset() if examples is None else frozenset(
        p.name for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.default is not inspect.Parameter.empty and p.name not in examples
        and (p.default is None or isinstance(p.default, BAKED_TYPES) or plain_object(p.default)))
    # Parameters forward tests by identity (`k is SENTINEL`, `cfg.mode is Mode.A`): an object
    # passed as itself (a proxy is never the object it is compared with), guarded by identity.
    code = getattr(fn, "__code__", None)
    by_identity = frozenset() if code is None else frozenset(
        c.argument[0] for c in type_checks(code) if c.kind == "identity")
    in_spec = pytree.TreeSpec(dict, names, children)
    codegen = StructuredCodeGen(in_spec, ", ".join(rendered), "" if examples is not None else None, needed)
    tracer.graph._codegen = codegen
    if examples is not None:
        tracer.examples = {}

    taken: set = set()
    leaves: List[Any] = []
    kinds: List[str] = []
    pass_in: List[Any] = []
    for parameter, value, child in zip(parameters, values, children):
        if child.is_leaf():
            flat, paths, labels = [value], [parameter.name], [parameter.name]
        else:
            flat = pytree.tree_flatten(value)[0] if retrace_spec is None else [None] * child.num_leaves
            paths = _leaf_paths(child, "")
            labels = [parameter.name + p for p in paths]
            paths = [_identifier(parameter.name + "_" + re.sub(r"\W+", "_", p)) for p in paths]
        for leaf, path, label in zip(flat, paths, labels):
            name = path
            suffix = 1
            while name in taken:
                name, suffix = f"{path}_{suffix}", suffix + 1
            taken.add(name)
            if retrace_spec is None:
                tracer.examples[name] = leaf
            default: Tuple[Any, ...] = ()
            if child.is_leaf() and parameter.name in default_keys:  # (no node holds an object: its key stands for it)
                default = (LEFT_OUT + default_keys[parameter.name],)
            elif child.is_leaf() and parameter.default is not inspect.Parameter.empty:
                default = (parameter.default,)
            annotation = fn.__annotations__.get(parameter.name) if child.is_leaf() else None
            proxy = tracer.create_proxy("placeholder", name, default, {}, type_expr=annotation)
            proxy.node.meta["specfx_input"] = label  # messages name it in the user's terms
            leaves.append(proxy)
            if retrace_spec is not None:
                pass_in.append(proxy)
                continue
            if leaf is None:
                none_input(proxy)
                kinds.append("-")
                pass_in.append(None)
            elif child.is_leaf() and parameter.name in default_keys and parameter.name not in (examples or {}):
                # its default, an object the signature cannot spell (a sentinel forward tests):
                # passed as itself; the guard finds that default as the signature does, in any process
                baked(proxy, leaf, label, f"{IDENTITY}default:{default_keys[parameter.name]}")
                kinds.append(leaf_kind(leaf))
                pass_in.append(leaf)
            elif isinstance(leaf, BAKED_TYPES):
                baked(proxy, leaf, label, fingerprint(leaf))
                kinds.append(leaf_kind(leaf))
                pass_in.append(leaf)
            elif child.is_leaf() and plain_object(leaf) and parameter.name in by_identity:
                baked(proxy, leaf, label, identity_print(leaf))
                kinds.append(leaf_kind(leaf))
                pass_in.append(leaf)
            else:
                tensor_default = child.is_leaf() and isinstance(parameter.default, torch.Tensor)
                kinds.append("T" if tensor_default and isinstance(leaf, torch.Tensor) else leaf_kind(leaf))
                pass_in.append(proxy)
    if retrace_spec is None:
        codegen.kinds = "".join(kinds) if tracer.guards else None  # guards=False: flatten, check nothing
    root = tracer.root

    def flatten_fn(*placeholders: Any) -> Any:
        tree = unflatten(list(pass_in), in_spec)
        # By keyword where Python allows it: decorators such as transformers' check_model_inputs
        # wrap forward in (self, *args, **kwargs) and read some arguments from kwargs only.
        positional: List[Any] = []
        keywords: Dict[str, Any] = {}
        varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL and tree[p.name] for p in parameters)
        given: List[Tuple[str, Any]] = []  # (the argument in the user's terms, its value)
        for parameter in parameters:
            value = tree[parameter.name]
            if parameter.kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, dict):
                given += [(f"{parameter.name}[{k!r}]", v) for k, v in value.items()]
            else:
                given.append((parameter.name, value))
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                positional.extend(value)
            elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
                keywords.update(value)
            elif parameter.kind is inspect.Parameter.POSITIONAL_ONLY or (
                    (varargs or by_position) and parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD):
                positional.append(value)
            elif parameter.name not in omitted:
                keywords[parameter.name] = value
        tracer.entering_root(root_fn, (root, *positional) if is_module else tuple(positional), keywords)
        # (a graph cannot write to its caller's lists and dicts: the tracer refuses such writes)
        snapshot = ContainerSnapshot(given) if retrace_spec is None else None
        result = call(root, *positional, **keywords) if is_module else call(*positional, **keywords)
        writes = snapshot.writes() if snapshot is not None else None
        if writes:
            tracer.refuse_input_writes(root_fn, writes)
        return codegen.set_outputs(result)

    flatten_fn.__annotations__ = _return_annotation(fn)
    return flatten_fn, leaves, codegen
