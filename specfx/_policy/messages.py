"""The texts of ``SpecializationError``: what happened, why, how to fix it, where.

Kept apart from the tracer so that the wording, which users read and tests
pin, lives in one place.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, List, Optional, Sequence, Tuple

from .describe import depends_on_text
from .policy import Resolved, Specialize, keyword_of
from .spelling import spelling
from .._frames.source import SourceLocation
from ..errors import SpecializationError, compatible_error_class

__all__ = ["GENERATOR_CONTROL_REFUSAL", "RNG_CONTROL_REFUSAL", "TENSOR_STATE", "attribute_write", "autograd_function_argument", "backward_in_forward", "calibration_path_differs", "calibration_sizes_not_symbolic", "calibration_structure_differs", "call_overridden", "caught_error", "caught_error_failure", "caught_lost_by_retrace", "check_eager_raised", "check_guard_failed", "check_outputs_differ", "concrete_arg_mismatch", "degenerate_decisions", "denied_error", "describe_identity", "entry_structure_failure", "export_input_check_failure", "export_refused_data_branch", "exported_guard_failure", "fit_variant_limit", "frozen_python_draw", "generator_in_forward", "global_module_hooks", "guard_failure", "hook_holds_traced_value", "hooks_with_kwargs", "identity_of_traced_number", "input_container_writes", "keyword_batch_positional", "lazy_modules", "list_example_failed", "list_is_one_argument", "meta_error", "mode_changed", "model_changed", "model_class_given", "model_state_changes", "module_made_in_forward", "no_value_error", "numpy_example", "parameter_made_in_forward", "python_draw_decides", "python_state_changes", "refused_inside_code", "short_repr", "short_text", "training_mode", "type_of_traced_value", "unknown_type_reader_error", "unrepresentable_output", "without_fx_types", "wrong_input_type"]

# What torch.fx.symbolic_trace says for the same operation; kept verbatim so that
# code matching on FX's messages keeps working when specfx runs without examples.
FX_MESSAGES = {
    Specialize.BOOL: "symbolically traced variables cannot be used as inputs to control flow",
    Specialize.ITER_LEN: (
        "Proxy object cannot be iterated. This can be attempted when the Proxy is used "
        "in a loop or as a *args or **kwargs function argument. See the torch.fx docs on "
        "pytorch.org for a more detailed explanation of what types of control flow can "
        "be traced, and check out the Proxy docstring for help troubleshooting Proxy "
        "iteration errors"
    ),
    "len": (
        "'len' is not supported in symbolic tracing by default. If you want this call "
        "to be recorded, please call torch.fx.wrap('len') at module scope"
    ),
}
# `item in proxy`: a torch.fx Proxy has no __contains__, so Python iterates it, and torch.fx
# raises its iteration error
FX_MESSAGES["contains"] = FX_MESSAGES[Specialize.ITER_LEN]


# The builtin exception torch.fx raises for these operations on a Proxy.
_FX_EXCEPTION_OF_KIND = {"len": RuntimeError, "int": TypeError, "float": TypeError, "index": TypeError}


def _first_few(items: Sequence[str], separator: str, limit: int) -> str:
    """The first ``limit`` items joined, and an ellipsis when more were left out."""
    shown = separator.join(items[:limit])
    return shown + (separator + "..." if len(items) > limit else "")


def _error_class(kind: Optional[str]) -> type:
    builtin = _FX_EXCEPTION_OF_KIND.get(kind or "")
    return compatible_error_class(builtin) if builtin else SpecializationError


def short_text(text: str, limit: int = 120) -> str:
    """``text`` on one line, shortened for messages (an exception's own message)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` of a traced value, shortened for messages (tensors by shape)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "meta" and value.numel() == 1:
            return f"tensor({value.item()!r})"
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(location: Optional[SourceLocation]) -> str:
    return f"\n  at {location.describe()}" if location else ""


def denied_error(
    operation: str,
    flag: Specialize,
    value: Any,
    location: Optional[SourceLocation],
    resolved: Resolved,
    module_path: str,
    extra_fix: Optional[str] = None,
    kind: Optional[str] = None,
    depends_on: Tuple[str, ...] = (),
) -> SpecializationError:
    """The error for an operation whose flag the policy in force does not grant."""
    keyword = keyword_of(flag)
    decider = resolved.decider(flag)
    if decider is not None and flag in decider.policy.denied:
        why = f"Specialize.{flag.name} is forbidden here by {decider.origin}"
        fixes = [f"remove {keyword}=False from {decider.origin}, or keep `{operation}` out of that code"]
    else:
        why = f"Specialize.{flag.name} is not allowed by the policy in force"
        fixes = [spelling().grant(keyword)]
        if location is not None and not location.filename.startswith("<"):
            fixes.append(f"decorate {location.function} with @specialize({keyword}=True)")
        if module_path:
            fixes.append(f"allow it in this submodule only: {spelling().grant_in(module_path, keyword)}")
    if extra_fix:
        fixes.append(extra_fix)
    message = (
        f"{operation} ({depends_on_text(depends_on)}) needs a concrete value "
        f"(traced value: {short_repr(value)}), but {why}.\n"
        f"Fix: {'; or '.join(fixes)}."
        f"{_where(location)}"
    )
    return _error_class(kind)(
        message, operation=operation, flag=flag, value=value, location=str(location) if location else None
    )


def no_value_error(
    operation: str, flag: Any, location: Optional[SourceLocation], name: str, kind: Optional[str] = None
) -> SpecializationError:
    """The error for an operation on a value traced without example inputs."""
    keyword = keyword_of(flag) if isinstance(flag, Specialize) else "iter"
    fx_message = FX_MESSAGES.get(kind if kind in FX_MESSAGES else flag, "")
    message = (
        f"{operation} needs a concrete value, but `{name}` was traced without example inputs, "
        f"so it has none{f' ({fx_message})' if fx_message else ''}.\n"
        f"Fix: pass representative example inputs, e.g. {spelling().example_call(keyword)}, so the value "
        f"can be specialized and guarded."
        f"{_where(location)}"
    )
    real_flag = flag if isinstance(flag, Specialize) else Specialize.ITER_LEN
    return _error_class(kind)(
        message, operation=operation, flag=real_flag, value=None, location=str(location) if location else None
    )


def meta_error(
    operation: str, flag: Specialize, location: Optional[SourceLocation], name: str, kind: Optional[str] = None
) -> SpecializationError:
    """The error for a data-dependent decision on a tensor on the meta device."""
    message = (
        f"{operation} depends on tensor data, but `{name}` is on the meta device: meta tensors "
        f"carry shapes and dtypes but no data, so there is no value to decide on.\n"
        f"Fix: trace with real example tensors of the same shapes (e.g. torch.randn), or keep "
        f"this decision out of the traced code (a leaf module or a torch.fx.wrap'ed function)."
        f"{_where(location)}"
    )
    return _error_class(kind)(
        message, operation=operation, flag=flag, value=None, location=str(location) if location else None
    )


def caught_error(operation: str, error: BaseException, location: Optional[SourceLocation]) -> SpecializationError:
    """The error for an op that raised while tracing and whose exception model code caught."""
    message = (
        f"`{operation}` raised {type(error).__name__} ({short_repr(str(error), 80)}) on the example "
        f"inputs and the model code caught it, so the trace took the code's fallback: the graph "
        f"would keep that fallback even for inputs on which `{operation}` does not raise.\n"
        f"Fix: trace with example inputs on which it does not raise, or move the try/except out of "
        f"the traced code (into a leaf module, or around the call of the traced graph)."
    )
    return _refusal(message, operation, location)


def type_of_traced_value(name: str, value: Any, location: Optional[SourceLocation]) -> SpecializationError:
    """The error for ``type(x)`` compared (``is``, ``==``, ``in``, ``.__name__``) on a traced value."""
    kind = f" (its example is of type {type(value).__name__})" if value is not None else ""
    message = (
        f"`type({name})` is compared, but `{name}` is a traced value{kind}: while tracing, "
        f"type() answers specfx's proxy class, so the comparison would take the other branch "
        f"silently (Python's type() cannot be intercepted).\n"
        f"Fix: write `isinstance({name}, torch.Tensor)` (or `torch.is_tensor({name})`, or "
        f"`isinstance({name}, <class>)`), which specfx answers as the value does and guards."
    )
    return _refusal(message, f"type({name})", location)


def unknown_type_reader_error(name: str, value: Any, location: SourceLocation) -> SpecializationError:
    """The error for a call in user code that reads a traced value's class while specfx
    cannot tell from the bytecode which function it calls (isinstance, or a torch function)."""
    message = (
        f"this line calls a computed function (a subscript, a call's result, a property) that asks "
        f"whether `{name}` (traced value: {type(value).__name__}) is an instance of a class; specfx "
        f"cannot tell whether it is isinstance(), which must see the {type(value).__name__}, or a torch "
        f"function, which must see the traced Proxy.\n"
        f"Fix: call it through a plain name or module attribute (`check = fns[0]; check(x, ...)`, "
        f"`torch.add(x, y)`), or call isinstance() itself."
    )
    return _refusal(message, f"a class check of `{name}`", location)


def identity_of_traced_number(name: str, value: Any, location: Optional[SourceLocation]) -> SpecializationError:
    """The error for ``x is <value>`` / ``id(x)`` on a traced Python number."""
    message = (
        f"`{name}` is compared by identity (`is`, `is not` or `id()`), but it is a traced "
        f"{type(value).__name__} (example {value!r}): while tracing it is specfx's proxy, never the "
        f"same object as another value, so the test would answer differently from eager silently "
        f"(Python's `is` cannot be intercepted).\n"
        f"Fix: compare values, `{name} == ...` (specfx answers it from the value and guards it)."
    )
    return _refusal(message, f"{name} is ...", location)


def identity_of_traced_object(name: str, value: Any, location: Optional[SourceLocation]) -> SpecializationError:
    """The error for ``obj is SENTINEL`` on a Python object the trace carries as a proxy (an
    argument forward passes on to a function that tests it)."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    message = (
        f"`{name}` is compared by identity (`is`, `is not` or `id()`), but it is a traced "
        f"{type(value).__name__} (example {shown}) that forward passes on: while tracing it is "
        f"specfx's proxy, never the same object as another value, so the test would answer "
        f"differently from eager silently (Python's `is` cannot be intercepted).\n"
        f"Fix: test it in forward itself (specfx passes an argument that forward tests by identity "
        f"as itself, and guards it), or compare with `==`."
    )
    return _refusal(message, f"{name} is ...", location)


def _refusal(message: str, operation: str, location: Optional[SourceLocation]) -> SpecializationError:
    """A refusal that is no policy flag's: the message, then where it happened."""
    return SpecializationError(message + _where(location), operation=operation, flag=None, value=None,
                               location=str(location) if location else None)


def describe_identity(kind: str, subject: str, holds: bool) -> str:
    """``x is None`` / ``x is not None`` / ``x is a Tensor`` / ``x is not a Tensor``."""
    if kind == "is_none":
        return f"{subject} is None" if holds else f"{subject} is not None"
    return f"{subject} is a Tensor" if holds else f"{subject} is not a Tensor"


def guard_failure(what: str, expected: Any, actual: Any, where: str, *, claim: str = "",
                  observed: str = "", changed: str = "", branch: bool = False) -> str:
    """The message of a guard that failed at call time: the assumption, what this input gives,
    the user's line, and the ways out. ``changed`` says what changed since the trace, when a
    dtype or device guard knows (the model's parameters cast or moved, or the inputs);
    ``branch``: the guard is a branch's condition (``if pad > 0:``, Swin's window padding),
    which no policy keeps symbolic: a Specializer, a graph per way, is the answer."""
    assumption = claim or f"{what} == {expected!r}"
    observation = observed or f"{what} == {actual!r}"
    head = (f"specfx guard failed: the graph was traced assuming {assumption}, "
            f"but for this input {observation}.\n  assumed at {where}\n")
    if branch:
        return head + (
            "Eager goes the other way at that line for this input, and a graph holds the one way it was "
            "traced. Keep a graph per way with a Specializer, called as the model is: "
            "spec = specfx.Specializer(model, policy), then spec(...) traces a variant the first time an "
            "input goes another way and runs, on each call, the variant whose guards hold "
            "(spec.fit(batches) traces them ahead of time). Or retrace with an example input like this "
            "one (specfx.trace(model, example_inputs, policy=...))."
        )
    if changed == "model":
        return head + (
            f"The model's own tensor `{what.rsplit('.', 1)[0]}` was cast or moved since the trace "
            f"(gm.to(...), model.to(...)), and the model decides on it at that line. Retrace the cast "
            f"model (specfx.trace(model.to({actual!r}), example_inputs, policy=...)), or let "
            f"specfx.Specializer(model, policy) keep one graph per dtype and device."
        )
    moved = (f"This input was cast or moved since the trace ({expected!r} then, {actual!r} now): pass it as "
             f"{expected!r}, or r" if changed == "input" else "The graph is only valid for inputs that keep "
             "this assumption. R")
    return head + (
        f"{moved}etrace with an "
        f"example input like this one (specfx.trace(model, example_inputs, policy=...)), "
        f"let specfx.Specializer(model, policy) keep one graph per set of assumptions, "
        f"or narrow the policy so that this value stays symbolic."
    )


def exported_guard_failure(assumption: str, broken: str, where: str) -> str:
    """The message an exported or compiled program's check carries (the same facts as
    :func:`guard_failure`, for a program made by ``specfx.export``)."""
    return (
        f"specfx guard failed: the graph was specialized assuming {assumption}, "
        f"but for this input {broken}.\n  assumed at {where}\n"
        "The program is only valid for inputs that keep this assumption. Retrace or export again with an "
        "example input like this one (specfx.export(model, example_inputs, policy=...))."
    )


def caught_error_failure(operation: str, where: str, error: BaseException, handler: str) -> str:
    """An op traced inside the model's ``try`` block raised at call time, where eager runs
    the ``except`` handler the graph does not have."""
    return (
        f"specfx guard failed: the graph was traced where `{operation}` at {where} "
        f"succeeded, inside a try block; for this input it raised {type(error).__name__}: "
        f"{short_text(str(error))}, and eager runs the except handler at {handler} instead, which the "
        f"graph does not have.\n"
        f"Fix: test the condition instead of catching its error (e.g. compare the shapes: a decision "
        f"specfx guards and a Specializer can trace both ways), or move the try/except out of the traced "
        f"code (into a leaf module: {spelling().leaf()}, or around the graph's call)."
    )


def entry_structure_failure(path: str, actual: str, traced: str) -> str:
    """The graph's entry check: an input's structure differs from the example's."""
    return (
        f"specfx guard failed: {path} {actual}, traced {traced}.\n"
        f"  checked at the graph's entry, before any compute\n"
        f"The graph takes its inputs with the structure and types it was traced with. Call it "
        f"like the example inputs, or retrace with an example like this input "
        f"(specfx.trace(model, example_inputs, policy=...)), or let specfx.Specializer(model, policy) "
        f"keep one graph per input structure."
    )


def wrong_input_type(name: str, given: str, shown: str, traced: str) -> str:
    """The graph's entry check: an input traced as a tensor is not one in this call."""
    return (
        f"wrong input type: {name} was traced as a torch.Tensor, but this call passes a {given} "
        f"({shown}).\n  input {name} of {traced}\n"
        f"Pass a tensor for {name}, or trace a graph for this kind of input "
        f"(specfx.trace with such an example, or specfx.Specializer)."
    )


def concrete_arg_mismatch(name: str, expected: Any, shown: str) -> str:
    """The graph's entry check: a ``concrete_args`` value differs in this call."""
    return (
        f"concrete_args mismatch: the graph was traced with {name}={expected!r} baked in "
        f"(concrete_args={{{name!r}: {expected!r}}}), but this call passes {name}={shown}.\n"
        f"Pass {name}={expected!r}, trace another graph with concrete_args={{{name!r}: ...}} for this "
        f"value, or let specfx.Specializer(model, concrete_args=...) keep one graph per value."
    )


def refused_inside_code(what: str, why: str, fix: str, location: Optional[SourceLocation]) -> str:
    """A call the traced code makes that the graph cannot reproduce (RNG of Python or numpy,
    autocast regions...)."""
    where = f"\n  at {location.describe()}" if location else ""
    return f"{what} inside the traced code: {why}.\nFix: {fix}.{where}"


def generator_in_forward(location: Optional[SourceLocation]) -> str:
    """A ``torch.Generator`` made inside ``forward``."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        "torch.Generator() made inside the traced code: eager makes (and seeds) a new generator on every "
        "call, the graph would keep this one and continue its draws from call to call.\n"
        "Fix: make the generator once, outside forward (`self.generator = torch.Generator().manual_seed(0)` "
        f"in __init__), or pass it to forward as an argument.{where}"
    )


def module_made_in_forward(class_name: str, holder: str, location: Optional[SourceLocation]) -> str:
    """A module built inside ``forward`` whose parameters or buffers are made on every call."""
    where = f"\n  at {location.describe()}" if location else ""
    inner = "" if holder == class_name else f" (its {holder})"
    return (
        f"{class_name}(...) is built inside the traced code and called: its parameters or buffers{inner} are "
        "made anew on every eager call (randomly initialized, for most layers), which a graph that keeps the "
        "trace's copy would not reproduce.\n"
        f"Fix: build it once in __init__ (`self.layer = {class_name}(...)`) so that it is a submodule whose "
        f"weights the graph reads, or use the functional form (torch.nn.functional) with weights the model owns.{where}"
    )


def python_draw_decides(draw: str, expression: str, location: Optional[SourceLocation]) -> str:
    """A decision taken on a value drawn from Python's ``random`` in the traced code."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"`{expression}` decides on a value drawn by {draw} inside the traced code: the graph draws anew "
        "on every call, but the path taken here would follow this one draw.\n"
        "Fix: keep the draw's use in tensor ops (`torch.where(torch.rand(()) < p, a, b)`), or draw outside "
        f"forward and pass the value in as an argument.{where}"
    )


def parameter_made_in_forward(location: Optional[SourceLocation]) -> str:
    """``nn.Parameter(...)`` made inside ``forward`` (a layer built there: ``nn.Linear(4, 3)(x)``)."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        "a parameter (torch.nn.Parameter) is made inside the traced code, e.g. by a layer built in forward "
        "(`nn.Linear(4, 3)(x)`): eager makes new, randomly initialized weights on every call, which a graph "
        "that keeps the trace's copy would not reproduce.\n"
        "Fix: build the layer once in __init__ (`self.layer = nn.Linear(4, 3)`) so that it is a submodule whose "
        f"weights the graph reads, or use the functional form (torch.nn.functional) with weights the model owns.{where}"
    )


def unrepresentable_output(path: str, kind: type, cause: BaseException, advice: str) -> str:
    """``forward`` returns a value no FX graph can return."""
    return (
        f"forward returns {path}, a {kind.__module__}.{kind.__qualname__}, which an FX graph cannot "
        f"return ({cause}).\nFix: {advice}."
    )


# torch.fx's own words for a module whose forward takes `self` inside `*args`
SELF_IN_VARARGS = "``self`` argument cannot be part of *args expansion!"


def cache_output_advice(fix: str, by_argument: bool) -> str:
    """The fix for a transformers cache forward returns that the graph cannot rebuild: turn
    ``use_cache`` off the way it reaches this model (``fix``: an argument, or the config)."""
    after = ("the graph then returns no cache, and a call with use_cache=True fails its check" if by_argument
             else "the graph then returns no cache")
    return f"{fix} (transformers returns a cache when use_cache is on, the config's default); {after}"


def hooks_with_kwargs(class_name: str) -> str:
    """The root has forward hooks registered with ``with_kwargs=True``."""
    return (
        f"{class_name} has forward hooks registered with with_kwargs=True, which specfx "
        f"does not trace.\nFix: trace a module whose forward calls this one (its hooks then run "
        f"inside the trace), or remove those hooks before tracing."
    )


def check_eager_raised(index: int, error: BaseException) -> str:
    """``check_inputs``: the eager model itself raised on one of the inputs."""
    return f"{spelling().check_input(index)}: the eager model itself raised {type(error).__name__}: {error}"


def check_guard_failed(index: int, error: BaseException) -> str:
    """``check_inputs``: a guard of the graph failed on one of the inputs. The guard's own
    facts (what, where) are kept; its advice is for a call, this one for a check."""
    lines = str(error.args[0] if error.args else error).splitlines() or [""]
    facts = [lines[0], *itertools.takewhile(lambda line: line.startswith("  "), lines[1:])]
    return (
        f"{spelling().check_input(index)}: a guard failed, so the graph does not cover this input:\n"
        + "\n".join(facts) + f"\nFix: check with inputs the graph is meant to cover; for inputs like this one, "
        f"{spelling().other_assumptions()}."
    )


def check_outputs_differ(index: int, problem: str) -> str:
    """``check_inputs``: graph and eager returned different outputs."""
    return f"{spelling().check_input(index)}: the traced graph's output differs from the eager model's: {problem}"


def fit_variant_limit(index: int, limit: int, misses: Sequence[Tuple[int, str, str]]) -> str:
    """``Specializer.fit`` needs one variant more than ``max_variants`` for batch ``index``;
    ``misses``: (variant number, what it was traced on, the assumption this batch breaks)."""
    lines = [f"Specializer.fit: batch {index} needs a variant of its own and max_variants={limit} is reached:"]
    lines += [f"  variant {number} (traced on {inputs}) assumes {failure}" for number, inputs, failure in misses]
    lines.append("Raise max_variants, narrow the policy so these values stay symbolic, or pass cache_key= to "
                 "keep variants for different inputs apart.")
    return "\n".join(lines)


def _calibration_batch(index: int, failing: Sequence[int], given: bool) -> Tuple[str, str]:
    example = "the example inputs" if given else "the example (batch 0)"
    shown = _first_few([str(i) for i in failing], ", ", 5)
    others = f"{len(failing)} batches fail: {shown}" if len(failing) > 1 else "the only batch that fails"
    return f"batch {index} of the calibration set ({others})", example


def calibration_path_differs(index: int, failing: Sequence[int], given: bool, assumption: str, seen: str,
                             where: str) -> str:
    """``trace(..., calibration=)``: a decision differs between the example and batch ``index``."""
    batch, example = _calibration_batch(index, failing, given)
    return (f"{batch} takes another path than {example}: the trace decided {assumption}, but on batch "
            f"{index} {seen}.\n"
            f"One graph cannot serve both: keep a graph per path with specfx.Specializer(model, policy)"
            f".fit(batches) (as few as the decisions need), or change the code so that this value does not "
            f"decide the path.\n  at {where}")


def calibration_structure_differs(index: int, failing: Sequence[int], given: bool, seen: str) -> str:
    """``trace(..., calibration=)``: batch ``index`` has another structure than the example."""
    batch, example = _calibration_batch(index, failing, given)
    return (f"{batch} has other inputs than {example}: {seen}.\n"
            f"One graph takes one input structure: keep a graph per structure with "
            f"specfx.Specializer(model, policy).fit(batches), or give batches of one structure.")

def model_class_given(caller: str, qualname: str, example: str) -> str:
    """``specfx.trace(Tiny, x)``: the class, not an instance."""
    return f"{caller}() takes a model instance, but got the class {qualname} itself. Pass an instance, e.g. {example}"


def keyword_batch_positional(kind: str, keys: Sequence[str], owner: str, first: str) -> str:
    """A dict of the model's keyword arguments (a tokenizer batch) given as the positional example."""
    shown = ", ".join(keys[:4]) + (", ..." if len(keys) > 4 else "")
    return (
        f"the example is a {kind} whose keys ({shown}) are parameters of {owner}, passed positionally: "
        f"forward would receive the whole {kind} as `{first}`. A dict of keyword arguments (a tokenizer "
        f"batch) goes in example_kwargs: pass example_kwargs=batch, e.g. specfx.trace(model, "
        f"example_kwargs=batch)"
    )


def numpy_example(path: str, shape: Tuple[int, ...], dtype: Any, location: Optional[SourceLocation]) -> str:
    """A numpy array among the example inputs."""
    return (
        f"example input {path} is a numpy.ndarray (shape {shape}, dtype {dtype}); specfx traces tensors, and "
        f"the graph takes tensors (held as a constant, the array would be this example's for every call).\n"
        f"Fix: pass torch.from_numpy({path}) as the example, and convert arrays the same "
        f"way before calling the graph (if forward converts arrays itself, with torch.as_tensor or "
        f"torch.from_numpy, move that conversion out of forward)" + _where(location)
    )


def without_fx_types(text: str) -> str:
    """``text`` with torch.fx's container types named as the user's: a traced list or dict
    argument is FX's ``immutable_list``/``immutable_dict``, which the user never made.

    >>> without_fx_types("must be Tensor, not immutable_list")
    'must be Tensor, not list'
    """
    return re.sub(r"\bimmutable_(list|dict)\b", r"\1", text)


def list_example_failed(error: BaseException, where: str, count: int, kinds: Sequence[str], first: str) -> str:
    """The trace failed on an example given as a list, which is one argument."""
    text = without_fx_types(str(error).strip().splitlines()[0] if str(error).strip() else "")
    return (
        f"the model failed on the example: {type(error).__name__}: {text}{where}\n"
        f"The example is a list ({count} item(s) of type {', '.join(kinds) or '-'}), and a list is passed as "
        f"one argument, `{first}`, as model(example) would. Pass positional arguments as a tuple: "
        f"specfx.trace(model, tuple(example)) (or, if forward takes a list, check what the list holds)"
    )


def list_is_one_argument() -> str:
    """Said when a list example does not fit the signature."""
    return (" (the example is a list, which is one argument, as model(example) takes it: positional arguments "
            "go in a tuple)")


def training_mode(model: str, modules: Sequence[Tuple[str, str]]) -> str:
    """A model traced in training mode, with modules (qualified name, class) for which the mode matters."""
    shown = _first_few([f"{name} ({kind})" for name, kind in modules], ", ", 3)
    return (
        f"{model} is traced in training mode, and {len(modules)} of its modules compute differently in "
        f"training ({shown}), so the graph computes as training does (dropout drawn, batch "
        f"statistics used). Models start in training mode, models built from a config too: for an inference "
        f"graph, {spelling().eval_mode()}. The mode is guarded: where forward reads self.training, "
        f"the graph raises GuardError when called after gm.eval() (its leaf modules, such as nn.Dropout, "
        f"follow gm.eval()); specfx.Specializer keeps one graph per mode."
    )


def degenerate_decisions(count: int, lines: str) -> str:
    """Decisions taken on a size of 0 or 1, listed once per source line with the inputs they depend on."""
    return (
        f"{count} specialization(s) were decided on an empty container, a length of 0 or 1 or a size-0/1 "
        f"dimension; the example inputs may not be representative (the guards reject inputs that "
        f"differ), e.g. a batch of 1 where real batches are larger:\n{lines}\n"
        f"Trace with examples shaped like real inputs (a batch of 2 or more, non-empty)."
    )

def caught_lost_by_retrace(tracer: str, operation: str, where: str, count: int) -> str:
    """A tracer whose graphs cannot keep the try-block marks re-traces a marked graph."""
    return (
        f"specfx: {tracer} cannot re-trace this graph: `{operation}` at {where} was traced inside a "
        f"try block ({count} such op(s)), and the graph it would make raises that op's error where "
        f"eager runs the except handler.\n"
        f"Fix: test the condition instead of catching its error, or keep the try/except out of the "
        f"traced code (in a leaf module), then trace again."
    )


def export_input_check_failure(condition: str, name: str, decisions: str) -> str:
    """torch.export's own input check of an exported specfx program failed; ``decisions`` lists
    the graph's decisions on that input (empty: none reads it)."""
    related = (f"the graph's decisions on `{name}`:\n{decisions}" if decisions
               else f"no decision of the graph reads `{name}`")
    return (
        f"specfx guard failed: the program was exported assuming {condition}, which this input breaks.\n"
        f"  torch.export fixed it while exporting (a dimension exported static, or one the graph's code "
        f"needs); {related}\n"
        f"The program is only valid for inputs that keep these assumptions. Export again with an example "
        f"input like this one (specfx.export(model, example_inputs, policy=...)), or pass dynamic_shapes."
    )


def export_refused_data_branch(leaves: str, cause: str) -> str:
    """torch.export stopped at a data-dependent branch in code specfx did not trace."""
    inside = f" (the leaf modules: {leaves})" if leaves else ""
    return (
        f"specfx.export: torch.export cannot export this graph: code that specfx did not trace{inside} "
        f"branches on tensor data, which torch.export refuses ({cause}).\n"
        f"Fix: let specfx trace that code (leave the module out of leaf_modules, the function out of "
        f"autowrap_functions), so that its branch becomes a guarded decision, then export again."
    )


def calibration_sizes_not_symbolic(index: int, failing: Sequence[int], given: bool, assumption: str, seen: str,
                                   where: str, error: BaseException) -> str:
    """``trace(..., calibration=)``: sizes differ, and the model cannot be traced with them symbolic."""
    batch, example = _calibration_batch(index, failing, given)
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (f"{batch} has other sizes than {example}: the trace read {assumption}, but on batch {index} "
            f"{seen}; tracing again with the sizes kept symbolic failed ({type(error).__name__}: {reason}).\n"
            f"Keep a graph per size with specfx.Specializer(model, policy).fit(batches), or give batches of "
            f"one size.\n  at {where}")


def frozen_python_draw(name: str) -> str:
    """A tracer other than specfx's re-traces a graph that draws from Python's ``random``."""
    return (
        f"specfx: this graph draws random.{name}() from Python's generator at every call; re-traced by "
        f"this tracer, the draw would become one constant (the same number on every call). Re-trace it "
        f"with specfx.trace(gm), which keeps the draw a graph node, or keep the draw out of the traced code."
    )


def autograd_function_argument(function: str, kind: str, location: Optional[SourceLocation]) -> str:
    """A custom autograd Function applied to an argument that no graph can hold."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"`{function}.apply(...)` is called with an argument a graph cannot hold (a {kind}): specfx records "
        f"a custom autograd Function as one call, so that its backward runs as in eager.\n"
        f"Fix: pass it tensors, numbers and strings only (keep other objects on the Function or its module), "
        f"or make the module that calls it a leaf (leaf_modules=[...]).{where}"
    )


# (why, fix) of the refusal of RNG control in model code (torch.manual_seed(), get_rng_state()...)
RNG_CONTROL_REFUSAL = (
    "a graph records random draws, not the generator state they start from, so it would draw differently "
    "from eager",
    "seed or set the generator's state before calling the graph (or draw from a torch.Generator passed in)",
)


def hook_holds_traced_value(tensor: str, method: str, held: str, location: Optional[SourceLocation]) -> str:
    """``y.register_hook(hook)`` in forward with a hook that holds another traced value."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"`{tensor}.{method}(hook)` registers a hook that holds a value of this forward ({held}): the graph "
        f"registers the hook again on every call, but the value the hook holds would be the trace's, not "
        f"that call's.\nFix: compute inside the hook from its gradient argument only (and module attributes), "
        f"or register the hook on the graph's output after calling it.{where}"
    )


def backward_in_forward(what: str, location: Optional[SourceLocation]) -> str:
    """``loss.backward()`` / ``torch.autograd.backward`` called by the traced code."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"{what} inside the traced code: the trace would run it on the example values and accumulate "
        f"gradients into the .grad of the model's parameters (in place), and tracing must leave the model as "
        f"it was; no flag changes that.\n"
        f"Fix: call backward on the graph's output, outside forward (`loss = gm(x); loss.backward()`), or take "
        f"the gradient with torch.autograd.grad(...) in forward, which the graph calls as eager does.{where}"
    )


GENERATOR_CONTROL_REFUSAL = (
    "a graph records the draws from a generator, not its seeding or the state set or read, so from the "
    "second call on it would continue the draws where the last call left off while eager starts again",
    "seed the generator (or set its state) before calling the graph, outside forward; or pass a "
    "seeded torch.Generator to forward as an argument",
)


def input_container_writes(writes: List[str], location: Optional[SourceLocation]) -> str:
    """forward wrote to the lists or dicts it was given (``writes``: one line per container)."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"forward writes to the lists or dicts it was given ({'; '.join(writes)}): a graph cannot write to "
        f"its caller's containers, so it would leave them as they were while eager changes them.\n"
        f"Fix: return the new values from forward instead (`return out, cache + [k]`), or write into tensors "
        f"in place (`buffer.copy_(k)`), which the graph repeats.{where}"
    )


# Tensor attributes whose assignment changes what a graph would have to repeat.
TENSOR_STATE = frozenset({"data", "grad", "requires_grad"})


def attribute_write(described: str, name: str, what: str, location: Optional[SourceLocation]) -> str:
    """``x.name = value`` on a traced value (``what``: an input, a tensor of the model, a tensor)."""
    if name == "data":
        fix = (f"write the data in place, `with torch.no_grad(): {described}.copy_(new)`, which the graph "
               f"repeats, or compute with the new tensor instead of `{described}`")
    elif name in TENSOR_STATE:
        fix = f"call `{described}.requires_grad_(...)`, or compute with the new value instead of assigning it"
    else:
        fix = "keep the value in a local variable, or return it from forward"
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"`{described}.{name} = ...` assigns an attribute of {what} while tracing: a graph cannot repeat the "
        f"assignment, so it would compute with `{described}` as it was and leave the caller's object "
        f"unchanged.\nFix: {fix}.{where}"
    )


def python_state_changes(changes: List[str], location: Optional[SourceLocation]) -> str:
    """forward changed Python state outside the model and its inputs (put back before raising)."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"forward changes Python state outside the model and its inputs ({_first_few(changes, '; ', 5)}): "
        f"a graph cannot repeat the change, so every call would "
        f"compute with the value the trace saw while eager's moves on (specfx put it back).\n"
        f"Fix: keep such state on the model as a tensor buffer updated in place (`self.steps.add_(1)`), "
        f"which the graph repeats, or pass it in and return it.{where}"
    )


def model_state_changes(changes: List[str], location: Optional[SourceLocation]) -> str:
    """forward changed the model in a way no graph repeats (put back before raising)."""
    where = f"\n  at {location.describe()}" if location else ""
    return (
        f"forward changes the model's state ({_first_few(changes, '; ', 5)}): "
        f"a graph repeats writes to tensors (in place, or a traced tensor bound to an attribute), not "
        f"Python values, new parameters, buffers or submodules, or the model's Python objects, so every "
        f"call would compute with the state the trace saw while eager's moves on (specfx left the model "
        f"as it was).\n"
        f"Fix: keep such state in a tensor buffer, updated in place (`self.steps.add_(1)`) or rebound to "
        f"a traced tensor (`self.avg = 0.9 * self.avg + 0.1 * x.mean(0)`), which the graph repeats on "
        f"every call; register buffers in __init__; or pass the state in and return it.{where}"
    )


def model_changed(changes: List[str]) -> str:
    """A graph's entry check: the model it was traced from changed since (see _graph/model_watch.py)."""
    return (
        f"specfx guard failed: the model changed since the graph was traced ({_first_few(changes, '; ', 5)}). "
        f"The graph holds the tensors and submodules it traced and "
        f"has inlined the hooks of the modules it traced through, so it would not compute what the model "
        f"computes now.\n"
        f"Fix: trace the model again (specfx.trace(model, example_inputs, ...)); to keep this graph as it "
        f"was traced, independent of the model, use a copy of it (copy.deepcopy(gm))."
    )


def mode_changed(traced_training: bool, where: str) -> str:
    """A graph's entry check: the graph module runs in another mode than the one traced."""
    traced, now = ("training", "eval") if traced_training else ("eval", "training")
    call = "gm.train()" if traced_training else "gm.eval()"
    other = "model.eval()" if traced_training else "model.train()"
    at = f"\n  assumed at {where}" if where else ""
    return (
        f"specfx guard failed: the graph was traced in {traced} mode (model.training == {traced_training}) "
        f"and forward reads `self.training`, but the graph module is now in {now} mode "
        f"(training == {not traced_training}); the graph computes {traced} mode only.\n"
        f"Fix: call {call} to run the graph as traced, or trace the model in the mode you run it in "
        f"(specfx.trace({other}, example_inputs, ...)).{at}"
    )


def lazy_modules(names: List[str]) -> str:
    """The model has lazy modules whose parameters are not made yet (refused before tracing)."""
    return (
        f"the model has lazy modules whose parameters are not made yet ({_first_few(names, ', ', 5)}): "
        f"their first forward draws the weights, which a trace "
        f"would do with your model's parameters (tracing never changes the model), and a graph made "
        f"then would hold weights eager's first call draws differently.\n"
        f"Fix: run one forward on an example first (model(example)), so that the weights are made, "
        f"then trace."
    )


def call_overridden(model: str, where: Optional[SourceLocation]) -> str:
    """The root overrides nn.Module.__call__ (refused before tracing)."""
    at = f"\n  at {where.describe()}" if where is not None else ""
    return (
        f"`{model}` overrides `__call__`: eager runs it around forward when the model is called, "
        f"while a trace (torch.fx's too) starts at forward, so the graph would lose what `__call__` adds.\n"
        f"Fix: move that code into forward, or trace a module that calls the model "
        f"(class Calls(nn.Module): forward(self, *a) returns self.model(*a)), whose trace goes through "
        f"`__call__`.{at}"
    )


def global_module_hooks() -> str:
    """Process-wide forward hooks are registered (refused before tracing a module)."""
    return (
        "process-wide module hooks are registered (torch.nn.modules.module.register_module_forward_hook "
        "or register_module_forward_pre_hook): eager runs them around every module call, the model's "
        "own included, and a graph module cannot stand in for the model there (the hooks would get the "
        "graph module).\n"
        "Fix: remove them while tracing (handle.remove()), and register hooks on the modules they are "
        "meant for instead (module.register_forward_hook(...)): the trace runs those as eager does."
    )
