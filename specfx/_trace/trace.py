"""``trace``: example inputs + policy in, a guarded ``torch.fx.GraphModule`` out."""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import math
import operator
import types
import warnings
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Type, Union

import torch
import torch.fx

from .._frames import caught as _caught

from .._capture import patches as _patches
from .._graph.specialization import Specialization
from .._capture.deferred import DeferredFailure
from .options import (check_autowrap, check_concrete_arg, check_leaf_modules, guard_concrete_args,
                      tensor_defaults_as_inputs, traceable_root)
from .._policy.policy import Policy, Specialize, parse_flags
from .._policy.spelling import spelling
from .._policy import messages as _messages
from .._graph.records import keep_records
from .._graph.report import specializations
from .._graph.guard_flow import thread_guards
from .._graph.retrace import retraceable
from .._capture.model_entry import refuse_module_machinery, watch_model
from .._capture.module_writes import repeat_module_writes
from .._capture.state import clone_example, preserved_state
from .calibration import trace_calibrated
from .check import check
from .._capture.tracer import TRACE_LOCK, SpecTracer
from ..errors import SpecfxError, SpecializationWarning, docs_pointer
from .examples import explain_list_failure, refuse_model_class, refuse_numpy, refuse_positional_batch, warn_training_mode

__all__ = ["trace"]

PolicyLike = Union[Policy, Specialize, str, None]


def trace(
    root: Union[torch.nn.Module, Callable[..., Any]],
    example_inputs: Any = None,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    *,
    policy: PolicyLike = None,
    concrete_args: Optional[Dict[str, Any]] = None,
    guards: bool = True,
    check_inputs: Optional[Sequence[Any]] = None,
    check_tolerance: Optional[Tuple[float, float]] = None,
    leaf_modules: Optional[Iterable[Any]] = None,
    autowrap_functions: Tuple[Callable[..., Any], ...] = (),
    autowrap_modules: Tuple[types.ModuleType, ...] = (math,),
    trace_through: Optional[Iterable[Any]] = None,
    tracer_class: Type[SpecTracer] = SpecTracer,
    calibration: Optional[Iterable[Any]] = None,
    progress: Optional[bool] = None,
) -> torch.fx.GraphModule:
    """Trace ``root`` into a ``torch.fx.GraphModule``, running the example inputs
    alongside so that the code may iterate, branch and read shapes as far as
    ``policy`` allows. Every value baked in is listed in ``gm.specializations``
    and checked by a guard at call time.

    ``example_inputs`` is a tuple of positional arguments (a single
    non-tuple value is one argument) and ``example_kwargs`` a dict; both
    ``None`` traces symbolically, like ``torch.fx.symbolic_trace``. A
    parameter that no example gives keeps its default. ``policy`` is a
    :class:`Policy` (or a :class:`Specialize` / string like ``"iter,bool"``).
    ``check_inputs`` lists further inputs (tuples, single values, or dicts of
    keyword arguments) on which the graph must pass its guards and match the
    eager model, else :class:`TraceCheckError`: the same dtype, shape,
    ``requires_grad`` and aliasing, and values bit for bit unless
    ``check_tolerance=(rtol, atol)`` allows a difference. ``guards=False`` emits no
    guards: the graph is then silently wrong on inputs that break an
    assumption. ``concrete_args``, ``leaf_modules`` (types or qualified
    names), ``autowrap_functions`` and ``autowrap_modules`` mean what they
    mean for ``torch.fx``. ``trace_through`` (``nn.Module`` types or qualified
    names) are traced into although torch.fx keeps them as leaves (the
    ``torch.nn`` built-ins, e.g. ``nn.MultiheadAttention``); ``leaf_modules``
    wins where both name a module. ``tracer_class`` is a :class:`SpecTracer`
    subclass to trace with (the extension point: override torch.fx's hooks).
    Tracing leaves the model, the inputs and the RNG state as they were.

    ``calibration`` is a set of batches (items as a DataLoader yields them: see
    :func:`specfx.coverage`) that the one graph must serve; with no example inputs
    its first batch is the example. When every batch takes the example's path the
    result is the plain trace; when sizes differ between batches, shape reads stay
    symbolic where the code allows, even under ``SHAPES`` (a size that only flows
    into ops is no decision); a decision that still differs raises
    :class:`SpecializationError` naming the batch (``error.batch``), the decision
    and both values (a :class:`Specializer` ``.fit(batches)`` keeps a graph per
    path). ``progress`` shows a bar while the set is checked (see
    :func:`specfx.coverage`).

    >>> import torch, specfx
    >>> from torch import nn
    >>> class TestModule(nn.Module):
    ...     def call_cat(self, *args):
    ...         return torch.cat(args, dim=1)
    ...     def forward(self, x):
    ...         x = torch.split(x, 2, dim=1)
    ...         return self.call_cat(*x)
    >>> gm = specfx.trace(TestModule(), torch.randn(1, 4, 10, 10), policy=specfx.Policy(iter=True))
    >>> gm(torch.randn(3, 4, 5, 5)).shape
    torch.Size([3, 4, 5, 5])
    >>> [s.guard_description for s in gm.specializations]
    ['len(x) == 2']
    >>> gm = specfx.trace(lambda x: x.view(x.size(0), -1), policy="shapes",
    ...                   calibration=[torch.ones(2, 3), torch.ones(4, 3)])
    >>> gm(torch.ones(7, 3)).shape
    torch.Size([7, 3])
    """
    if calibration is not None:
        return trace_calibrated(
            trace, root, example_inputs, example_kwargs, calibration, progress, policy=policy,
            concrete_args=concrete_args, guards=guards, check_inputs=check_inputs, check_tolerance=check_tolerance,
            leaf_modules=leaf_modules, autowrap_functions=autowrap_functions, autowrap_modules=autowrap_modules,
            trace_through=trace_through, tracer_class=tracer_class)
    if progress is not None:
        raise TypeError("progress= goes with calibration=: a trace from example inputs shows no progress")
    policy = _as_policy(policy)
    refuse_model_class(root, "trace")
    root = traceable_root(root)
    autowrap_functions, autowrap_modules = check_autowrap(autowrap_functions, autowrap_modules)
    if not isinstance(guards, bool):
        raise TypeError(f"guards= takes True or False; got {guards!r}")
    if not (isinstance(root, torch.nn.Module) or callable(root)):
        raise TypeError(f"trace() takes an nn.Module or a function; got {type(root).__name__}")
    leaf_modules = check_leaf_modules(leaf_modules, "leaf_modules")
    trace_through = check_leaf_modules(trace_through, "trace_through")
    if not (isinstance(tracer_class, type) and issubclass(tracer_class, SpecTracer)):
        raise TypeError(f"tracer_class= takes a subclass of specfx.SpecTracer; got {tracer_class!r}")
    if isinstance(root, torch.nn.Module):
        _warn_unmatched_scopes(policy, root)
        _warn_unmatched_leaves(leaf_modules, trace_through, root)
    examples = bind_examples(root, example_inputs, example_kwargs, concrete_args)
    if examples is not None:
        refuse_numpy(examples, root)
        refuse_module_machinery(root, _raise)
        warn_training_mode(root)
    name = type(root).__name__ if isinstance(root, torch.nn.Module) else getattr(root, "__name__", "function")
    try:
        gm, tracer, keeper = _run_tracer(root, examples, concrete_args, name, tracer_class, policy, guards,
                                         leaf_modules, trace_through, autowrap_functions, autowrap_modules)
    except (TypeError, AttributeError) as error:
        if isinstance(error, SpecfxError):
            raise
        explained = explain_list_failure(error, example_inputs, next(iter(examples or {}), None))
        if explained is None:
            raise
        raise explained from error
    _unbind_traced_assignments(gm, root)
    repeat_module_writes(gm, root, keeper.table_changes, keeper.changed)
    if guards and examples is not None:
        watch_model(gm, root)  # (the graph's first node: the model is still the one traced)
    if guards and examples is not None:  # (without examples the graph is torch.fx's, node for node)
        if concrete_args:
            guard_concrete_args(gm)
    retraceable(gm)  # before the records: a re-trace by any tracer reproduces this graph
    # the output depends on the guards: consumers that delete unused nodes or assertions keep them
    if guards and thread_guards(gm.graph, lambda target: target is check_concrete_arg):
        gm.recompile()
    attach(gm, [*_inherited_records(root), *tracer.specializations], policy)
    _warn_degenerate(tracer.specializations)
    if check_inputs is not None:
        check(gm, root, check_inputs, check_tolerance, concrete_args)
    return gm


def _run_tracer(root: Any, examples: Optional[Dict[str, Any]], concrete_args: Any, name: str,
                tracer_class: Type[SpecTracer], policy: Policy, guards: bool, leaf_modules: Tuple[Any, ...],
                trace_through: Tuple[Any, ...], autowrap_functions: Tuple[Callable[..., Any], ...],
                autowrap_modules: Tuple[types.ModuleType, ...]) -> Tuple[torch.fx.GraphModule, SpecTracer, Any]:
    """Drive the tracer over ``root``: the GraphModule, the tracer (its records) and the state keeper."""
    # Values are computed in batches (_deferred.py); if a batched op raises, the trace runs
    # again computing each value at once, which raises at the op's line as eager does.
    for defer in (True, False) if examples is not None else (False,):
        tracer = tracer_class(autowrap_modules, tuple(autowrap_functions), policy=policy,
                              leaf_modules=leaf_modules, guards=guards, trace_through=trace_through)
        tracer.defer_values = defer
        try:
            # The snapshot is taken under the trace lock: two traces of one model from two threads
            # would otherwise each restore what the other had half-changed.
            with TRACE_LOCK, _patches.no_full_collections(), \
                    preserved_state(root, runs_ops=examples is not None) as keeper:
                tracer.state = keeper.trace_state
                tracer.attribute_holders = keeper.attribute_holders
                tracer.model_keeper = keeper
                tracer.set_examples(None if examples is None else clone_example(examples))
                graph = tracer.trace(root, concrete_args)
                # Built before the state is restored: torch.fx stores tensor constants on the root
                # (`_tensor_constant0`), which the GraphModule copies and the restore then removes.
                tensor_defaults_as_inputs(graph)
                gm = torch.fx.GraphModule(tracer.root, graph, name)
            return gm, tracer, keeper
        except DeferredFailure:
            continue
    raise AssertionError("unreachable: the last pass computes values at once and raises no DeferredFailure")


def _raise(error: Exception) -> None:
    raise error


def _unbind_traced_assignments(gm: torch.fx.GraphModule, root: Any) -> None:
    """The model's forward stored traced values on itself (``self.count = self.count + 1``):
    the GraphModule was built while those proxies sat on the model, so give it the
    restored originals (the graph binds the new ones on each call, or the trace is refused:
    ``_capture/module_writes.py``)."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            owner_path, _, attr = node.target.rpartition(".")
            owner = gm.get_submodule(owner_path) if owner_path else gm
            if isinstance(getattr(owner, attr, None), torch.fx.Proxy):
                original = operator.attrgetter(node.target)(root)
                held = root.get_submodule(owner_path) if owner_path else root
                if attr in owner._buffers:  # the proxy passed for a tensor and became a buffer
                    owner._buffers[attr] = original
                elif attr in getattr(held, "_buffers", ()):  # a buffer on the model: one on the graph too
                    owner.__dict__.pop(attr, None)
                    owner.register_buffer(attr, original, persistent=attr not in held._non_persistent_buffers_set)
                else:
                    setattr(owner, attr, original)


def _inherited_records(root: Any) -> Sequence[Specialization]:
    """A graph re-traced (``specfx.trace(gm)``) keeps its guards, which record themselves
    as nodes, and so its records: the decisions were taken when it was traced."""
    if not isinstance(root, torch.fx.GraphModule):
        return ()
    try:
        return specializations(root)
    except TypeError:  # a GraphModule that holds no specfx decisions
        return ()


def attach(gm: torch.fx.GraphModule, specializations: Sequence[Specialization], policy: Policy) -> None:
    """Store the records on ``gm`` so they survive deepcopy and pickling."""
    # setattr: nn.Module's __setattr__ is typed for tensors and modules only
    setattr(gm, "specializations", list(specializations))  # noqa: B010
    setattr(gm, "specfx_policy", policy)  # noqa: B010
    caught = _caught.marks(gm.graph)
    if caught:  # ops traced inside the model's try blocks, by name, for the graph's re-trace on unpickling
        setattr(gm, _caught.ATTRIBUTE, caught)
    keep_records(gm)


def _as_policy(policy: PolicyLike) -> Policy:
    if policy is None:
        return Policy()
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, (Specialize, str)):
        return Policy(parse_flags(policy))
    raise TypeError(
        f"policy= takes a specfx.Policy, a specfx.Specialize or a string like 'iter,bool'; "
        f"got {type(policy).__name__}"
    )


def _warn_unmatched_scopes(policy: Policy, root: torch.nn.Module) -> None:
    if not policy.scopes:
        return
    names = [name for name, _ in root.named_modules(remove_duplicate=False) if name]  # every name of a shared submodule
    for pattern in policy.scopes:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            warnings.warn(
                f"Policy scopes pattern {pattern!r} matches no submodule of {type(root).__name__}; "
                f"qualified names look like {', '.join(repr(n) for n in names[:4]) or '(none)'}",
                UserWarning,
                stacklevel=3,
            )


def _warn_unmatched_leaves(leaf_modules: Tuple[Any, ...], trace_through: Tuple[Any, ...],
                           root: torch.nn.Module) -> None:
    """A qualified name in leaf_modules=/trace_through= that names no submodule would be ignored."""
    names = [name for name, _ in root.named_modules(remove_duplicate=False) if name]
    for keyword, given in (("leaf_modules", leaf_modules), ("trace_through", trace_through)):
        for name in given:
            if isinstance(name, str) and name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                warnings.warn(
                    f"{keyword}= names {name!r}, which is no submodule of {type(root).__name__}, so it changes "
                    f"nothing; " + (f"did you mean {close[0]!r}?" if close else
                                    f"qualified names look like {', '.join(repr(n) for n in names[:4]) or '(none)'}"),
                    UserWarning,
                    stacklevel=3,
                )


def _signature_target(root: Any) -> Callable[..., Any]:
    if isinstance(root, torch.nn.Module):
        return inspect.unwrap(type(root).forward)
    return inspect.unwrap(root)


def bind_examples(
    root: Any, example_inputs: Any, example_kwargs: Optional[Mapping[str, Any]], concrete_args: Any
) -> Optional[Dict[str, Any]]:
    """Map example inputs onto the placeholder names torch.fx will create
    (``*args`` becomes ``"*args"``); ``None`` when there are no examples."""
    if example_inputs is None and example_kwargs is None:
        return None
    if example_kwargs is not None and not isinstance(example_kwargs, Mapping):
        raise TypeError(f"example_kwargs= takes a dict of keyword arguments; got {type(example_kwargs).__name__}")
    positional = example_inputs if isinstance(example_inputs, tuple) else (
        () if example_inputs is None else (example_inputs,)
    )
    fn = _signature_target(root)
    signature = inspect.signature(fn)
    owner = f"{type(root).__name__}.forward" if isinstance(root, torch.nn.Module) else getattr(fn, "__qualname__", "fn")
    leading = (root,) if isinstance(root, torch.nn.Module) else ()
    shown = str(signature).replace("(self, ", "(").replace("(self)", "()")
    refuse_positional_batch(example_inputs, list(signature.parameters.values())[len(leading):], owner)
    try:
        bound = signature.bind_partial(*leading, *positional, **dict(example_kwargs or {}))
        missing = [
            p.name for p in signature.parameters.values()
            if p.name not in bound.arguments and p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and p.name not in (concrete_args or {})
        ]
        if missing:
            raise TypeError(f"missing a required argument: {missing[0]!r}")
    except TypeError as error:
        raise TypeError(
            f"the example inputs do not fit {owner}{shown}: {error}. {spelling().examples()}"
            + (_messages.list_is_one_argument() if isinstance(example_inputs, list) else "")
        ) from None
    examples: Dict[str, Any] = {}
    parameters = list(signature.parameters.values())[len(leading):]
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            examples["*" + parameter.name] = tuple(bound.arguments.get(parameter.name, ()))
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            examples["**" + parameter.name] = dict(bound.arguments.get(parameter.name, {}))
        elif parameter.name in bound.arguments:
            examples[parameter.name] = bound.arguments[parameter.name]
    if concrete_args:
        named = {p.name for p in parameters if p.kind not in (inspect.Parameter.VAR_POSITIONAL,
                                                              inspect.Parameter.VAR_KEYWORD)}
        unknown = [name for name in concrete_args if name not in named]
        if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            raise TypeError(f"concrete_args names {unknown[0]!r}, which is no parameter of {owner}{shown}; "
                            f"it takes the names of forward's parameters")
        clash = sorted(set(concrete_args) & {k.lstrip("*") for k in examples})
        if clash:
            raise TypeError(
                f"{', '.join(clash)} given both as example input and in concrete_args; "
                f"give each parameter one way (concrete_args bakes the value in, an example keeps it an input)"
            )
    return examples


def _warn_degenerate(specializations: Sequence[Specialization]) -> None:
    degenerate = [s for s in specializations if s.degenerate]
    if not degenerate:
        return
    sites: Dict[str, Specialization] = {}
    for record in degenerate:  # once per source line: an unrolled loop decides on one line many times
        sites.setdefault(record.where, record)
    lines = [f"  {r.guard_description} at {r.where}"
             + (f" (from input {', '.join(r.depends_on)})" if r.depends_on else "") for r in list(sites.values())[:5]]
    if len(sites) > 5:
        lines.append(f"  ... and {len(sites) - 5} more source line(s)")
    warnings.warn(
        f"{_messages.degenerate_decisions(len(degenerate), chr(10).join(lines))}\n"
        f"{docs_pointer(SpecializationWarning.docs_section)}",
        SpecializationWarning,
        stacklevel=3,
    )
