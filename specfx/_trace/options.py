"""Checking what ``trace()`` and ``Specializer`` are given, before any work.

Options are refused up front with the expected form, the given value and the
fix; a root that is a bound method or a ``functools.partial`` is turned into
what torch.fx can trace; ``concrete_args`` checks become specfx guards, so a
different value raises :class:`~specfx.GuardError` (which a ``Specializer``
answers by retracing) instead of torch.fx's ``AssertionError``.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

import torch
import torch.fx
from torch.fx import _symbolic_trace

from torch.fx.proxy import Proxy

from ..errors import GuardError
from ..guards import _is_foreign_proxy
from .._checks.kinds import fingerprint
from .._policy.messages import concrete_arg_mismatch, wrong_input_type
from .._graph.model_watch import check_model

__all__ = ["ENTRY_CHECKS", "check_autowrap", "check_concrete_arg", "check_leaf_modules", "check_input_type", "check_trace_options", "default_argument",
           "guard_concrete_args", "guard_input_types", "split_concrete", "tensor_defaults_as_inputs",
           "traceable_root"]

# trace() keywords a Specializer forwards (examples and check_inputs come from the call)
_FORWARDED = ("concrete_args", "guards", "leaf_modules", "autowrap_functions", "autowrap_modules")


def check_autowrap(functions: Any, modules: Any) -> Tuple[Tuple[Callable[..., Any], ...], Tuple[types.ModuleType, ...]]:
    """The autowrap options as tuples, or TypeError naming the first bad item."""
    functions = tuple(functions) if isinstance(functions, Iterable) and not isinstance(functions, str) else functions
    if not isinstance(functions, tuple) or not all(callable(f) and hasattr(f, "__name__") for f in functions):
        bad = functions if not isinstance(functions, tuple) else next(
            f for f in functions if not (callable(f) and hasattr(f, "__name__")))
        raise TypeError(f"autowrap_functions= takes a tuple of functions (e.g. (my_helper,)); got {bad!r} "
                        f"of type {type(bad).__name__}")
    modules = tuple(modules) if isinstance(modules, Iterable) and not isinstance(modules, str) else modules
    if not isinstance(modules, tuple) or not all(isinstance(m, types.ModuleType) for m in modules):
        bad = modules if not isinstance(modules, tuple) else next(
            m for m in modules if not isinstance(m, types.ModuleType))
        raise TypeError(f"autowrap_modules= takes a tuple of Python modules (e.g. (math,)); got {bad!r} "
                        f"of type {type(bad).__name__}")
    return functions, modules


def check_leaf_modules(modules: Optional[Iterable[Any]], keyword: str) -> Tuple[Any, ...]:
    """``leaf_modules=``/``trace_through=`` as a tuple, or TypeError naming the first bad item."""
    if modules is None:
        return ()
    if isinstance(modules, (str, type)):
        modules = (modules,)
    checked = tuple(modules)
    for item in checked:
        if not (isinstance(item, str) or (isinstance(item, type) and issubclass(item, torch.nn.Module))):
            raise TypeError(
                f"{keyword}= takes nn.Module subclasses or qualified module names; got {item!r}"
            )
    return checked


def check_trace_options(options: Mapping[str, Any], *, caller: str) -> None:
    """Refuse unknown option names and malformed values (TypeError/ValueError)."""
    unknown = sorted(set(options) - set(_FORWARDED))
    if unknown:
        raise TypeError(f"{caller}() got unknown option(s) {', '.join(unknown)}; "
                        f"the options it passes to specfx.trace are {', '.join(_FORWARDED)}")
    if "guards" in options and not isinstance(options["guards"], bool):
        raise TypeError(f"guards= takes True or False; got {options['guards']!r}")
    concrete = options.get("concrete_args")
    if concrete is not None and not (isinstance(concrete, Mapping) and all(isinstance(k, str) for k in concrete)):
        raise TypeError(f"concrete_args= takes a dict from parameter name to value; got {concrete!r}")
    check_autowrap(options.get("autowrap_functions", ()), options.get("autowrap_modules", ()))
    check_leaf_modules(options.get("leaf_modules"), "leaf_modules")


def traceable_root(root: Any) -> Any:
    """``model.forward`` (bound) traces as ``model``; a ``functools.partial`` of a
    function traces as a function of the parameters it leaves open."""
    if isinstance(root, types.MethodType) and isinstance(root.__self__, torch.nn.Module):
        owner = root.__self__
        if getattr(root.__func__, "__name__", None) == "forward" and getattr(type(owner), "forward", None) is root.__func__:
            return owner
        raise TypeError(
            f"trace() takes a module or a function; got the bound method {type(owner).__name__}.{root.__name__}. "
            f"Trace the module (its forward), or wrap the method in a module whose forward calls it")
    if isinstance(root, functools.partial):
        return _partial_as_function(root)
    return root


def _partial_as_function(partial: functools.partial) -> Callable[..., Any]:
    """A plain function with the partial's open parameters as its own (torch.fx reads
    parameter names from the code object), calling the partial."""
    signature = inspect.signature(partial)
    namespace: Dict[str, Any] = {"__partial": partial}
    params, call = [], []
    for index, p in enumerate(signature.parameters.values()):
        default = ""
        if p.default is not inspect.Parameter.empty:
            namespace[f"__default{index}"] = p.default
            default = f"=__default{index}"
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            params.append(f"*{p.name}")
            call.append(f"*{p.name}")
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            params.append(f"**{p.name}")
            call.append(f"**{p.name}")
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            if not any(s.startswith("*") for s in params):
                params.append("*")
            params.append(f"{p.name}{default}")
            call.append(f"{p.name}={p.name}")
        else:
            params.append(f"{p.name}{default}")
            call.append(p.name)
    name = getattr(partial.func, "__name__", "partial")
    if not name.isidentifier():  # a lambda, or a callable object's odd name: the function still needs one
        name = "partial"
    source = f"def {name}({', '.join(params)}):\n    return __partial({', '.join(call)})\n"
    exec(compile(source, f"<specfx partial of {name}>", "exec"), namespace)
    function = namespace[name]
    function.__qualname__ = f"partial({getattr(partial.func, '__qualname__', name)})"
    return function


def _entry_check(check: Callable[..., None]) -> Callable[..., Any]:
    """Checks at graph entry: kept by dead-code elimination, and recorded as a node
    (not run) when the graph is traced again (``symbolic_trace(gm)``, unpickling).
    They are not decisions (no record): they check what the call must be at all."""

    @functools.wraps(check)
    def entry_check(value: Any, *args: Any) -> Any:
        if isinstance(value, Proxy) or _is_foreign_proxy(value):  # brevitas.fx has its own Proxy
            return value.tracer.create_proxy("call_function", entry_check, (value, *args), {})
        return check(value, *args)

    return torch.fx.node.has_side_effect(entry_check)


@_entry_check
def check_input_type(value: Any, name: str, traced: str) -> None:
    """Raise GuardError unless the input ``name``, traced as a tensor, is one (or
    behaves as one: defines ``__torch_function__``, as Brevitas' QuantTensor does)."""
    if not isinstance(value, torch.Tensor) and not hasattr(type(value), "__torch_function__"):
        given = type(value).__name__
        raise GuardError(
            wrong_input_type(name, given, _short(value), traced),
            expression=name, expected="torch.Tensor", actual=given, location=f"input {name} of {traced}")


@_entry_check
def check_concrete_arg(value: Any, expected: Any, name: str) -> None:
    """Raise GuardError unless ``value`` is the value ``concrete_args`` baked in for ``name``."""
    holds = value is None if expected is None else fingerprint(value) == fingerprint(expected)
    if not holds:
        raise GuardError(
            concrete_arg_mismatch(name, expected, _short(value)),
            expression=name, expected=expected, actual=value, location=f"concrete_args[{name!r}]")


# the functions that check a graph's entry: its inputs' types and concrete_args, and the model
ENTRY_CHECKS = frozenset({check_input_type, check_concrete_arg, check_model})


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def guard_concrete_args(gm: torch.fx.GraphModule) -> None:
    """Replace torch.fx's ``concrete_args`` asserts with specfx guards."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is _symbolic_trace._assert_is_none and isinstance(node.args[0], torch.fx.Node):
            placeholder = node.args[0]
            name = str(placeholder.target).rsplit("_", 1)[0]
            with gm.graph.inserting_before(node):
                gm.graph.call_function(check_concrete_arg, (placeholder, None, name))
            changed = True
        elif node.target is torch._assert and isinstance(node.args[0], torch.fx.Node):
            comparison = node.args[0]
            if (comparison.op == "call_function" and len(comparison.args) == 2
                    and isinstance(comparison.args[0], torch.fx.Node) and comparison.args[0].op == "placeholder"
                    and "has been specialized to have value" in str(node.args[1])):
                placeholder, value = comparison.args[0], comparison.args[1]
                name = str(node.args[1]).split(" has been specialized")[0]
                # before torch.fx's own check (kept, so the graph stays torch.fx's plus checks)
                with gm.graph.inserting_before(comparison):
                    gm.graph.call_function(check_concrete_arg, (placeholder, value, name))
                changed = True
    if changed:
        gm.recompile()


def split_concrete(root: Any, args: Tuple[Any, ...], kwargs: Mapping[str, Any], names: Iterable[str]
                   ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A call's arguments as ``(example_kwargs, concrete_args)``: the parameters named
    in ``names`` take the call's values as concrete, the rest stay examples."""
    fn = type(root).forward if isinstance(root, torch.nn.Module) else root
    signature = inspect.signature(inspect.unwrap(fn))
    leading = (root,) if isinstance(root, torch.nn.Module) else ()
    bound = signature.bind_partial(*leading, *args, **kwargs)
    examples: Dict[str, Any] = {}
    concrete: Dict[str, Any] = {}
    for index, (name, value) in enumerate(bound.arguments.items()):
        if leading and index == 0:
            continue
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            examples.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError("concrete_args= with a Specializer needs a forward without *args")
        elif name in names:
            concrete[name] = value
        else:
            examples[name] = value
    for name in names:  # not passed: the default is the concrete value
        if name not in concrete and signature.parameters[name].default is not inspect.Parameter.empty:
            concrete[name] = signature.parameters[name].default
    return examples, concrete


def default_argument(value: Any, default: Any) -> Any:
    """``default`` when the caller left the parameter out (``value`` is None), else ``value``:
    a parameter whose default is a tensor (generated code cannot spell a tensor default).
    Re-traced (unpickling, ``symbolic_trace(gm)``) it records itself, so the choice stays
    in the graph instead of being answered for the proxy."""
    if isinstance(value, torch.fx.Proxy):
        return value.tracer.create_proxy("call_function", default_argument, (value, default), {})
    return default if value is None else value


torch.fx.node.has_side_effect(default_argument)
# generated code and pickles name them by the public package's path
check_input_type.__module__ = check_concrete_arg.__module__ = default_argument.__module__ = "specfx"


def tensor_defaults_as_inputs(graph: torch.fx.Graph) -> None:
    """``def forward(self, x, w=torch.ones(2))``: torch.fx stores the default tensor as a
    constant and writes ``w = _tensor_constant0`` into the signature, which does not
    run. Give the parameter the default None and pick the constant inside the graph."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for placeholder in placeholders:
        if not (placeholder.args and isinstance(placeholder.args[0], torch.fx.Node)):
            continue
        constant = placeholder.args[0]
        placeholder.args = (None,)
        placeholders[-1].append(constant)
        with graph.inserting_after(constant):
            chosen = graph.call_function(default_argument, (placeholder, constant))
        placeholder.replace_all_uses_with(chosen, delete_user_cb=lambda user, chosen=chosen: user is not chosen)
        chosen.meta = dict(placeholder.meta)


def guard_input_types(gm: torch.fx.GraphModule, where: str) -> None:
    """Check at graph entry that each input traced as a tensor is a tensor, so that
    ``gm(None)`` or ``gm([1, 2])`` raise a GuardError naming the input and its type,
    not an error from inside the graph or a claim about a size."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not placeholders:
        return
    anchor = placeholders[-1]
    for placeholder in reversed(placeholders):
        kind = placeholder.meta.get("type")
        if not (isinstance(kind, type) and issubclass(kind, torch.Tensor)) or str(placeholder.target).startswith("*"):
            continue
        if any(user.target is default_argument for user in placeholder.users) or (
                placeholder.args and placeholder.args[0] is None):
            continue  # optional (default None): the graph's own `is None` guard speaks for it
        name = str(placeholder.target)
        with gm.graph.inserting_after(anchor):
            gm.graph.call_function(check_input_type, (placeholder, name, where))
    gm.recompile()
