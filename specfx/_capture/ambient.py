"""State outside the inputs that traced code reads: grad mode, autocast, Python's and
numpy's random generators.

While specfx traces with example inputs (patched through :mod:`specfx._capture.patches`, for
the tracing context only):

- ``torch.is_grad_enabled()`` is a graph node; the code's branch on it is a guarded
  decision (the graph fails with ``GuardError`` when called in the other mode);
- ``torch.no_grad()`` / ``torch.enable_grad()`` / ``torch.set_grad_enabled()``
  regions are recorded as ``torch._C._set_grad_enabled`` nodes, as make_fx does;
- ``torch.inference_mode()`` and ``torch.autocast()`` regions, and draws from Python's
  ``random`` and numpy's ``random``, are refused: the graph cannot reproduce them;
- every other process-wide setting model code reads through torch's getters
  (``torch.get_default_dtype()``, ``torch.are_deterministic_algorithms_enabled()``,
  ``torch.is_inference_mode_enabled()``, ``torch.get_autocast_dtype(...)``...: the getters of
  torch's list of functions that take no tensors) is a graph node with a guarded answer;
- RNG control in model code (``torch.manual_seed``, ``get_rng_state``/``set_rng_state``,
  ``torch.random.fork_rng``, ``initial_seed``) is refused: a graph records draws, not the
  state they start from.

(``torch.is_tensor(x)`` needs no patch: it asks ``isinstance``, see _type_reads.py.)
"""

from __future__ import annotations

import builtins
import random
import sys
import types
from typing import Any, Callable, List, Optional, Tuple

import torch
from torch.fx.node import has_side_effect

from . import patches as _patches
from .._frames.source import caller_outside_specfx, is_user_file, user_location
from .values import MISSING, value_of
from ..errors import SpecializationError
from .session import TraceSession
from .._policy.messages import RNG_CONTROL_REFUSAL, refused_inside_code


__all__ = ["install"]

has_side_effect(torch._C._set_grad_enabled)  # dead-code elimination must keep the mode switches

_GRAD_MODE_FILE = torch.autograd.grad_mode.__file__
_PYTHON_RANDOM = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle", "sample",
                  "gauss", "normalvariate", "betavariate", "expovariate", "getrandbits", "triangular")
# Reading or setting the state random draws start from: a graph records draws, not this.
RNG_CONTROL = ("manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "fork_rng")
# The same for the accelerators' generators (torch.cuda.manual_seed(...), torch.mps.set_rng_state(...)):
# a graph cannot replay them either (on a machine without the device eager only queues them).
_DEVICE_RNG_CONTROL = ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
                       "get_rng_state_all", "set_rng_state", "set_rng_state_all")
_DEVICE_MODULES = ("cuda", "mps", "xpu")
_NUMPY_RANDOM = ("rand", "randn", "random", "random_sample", "randint", "uniform", "normal", "choice",
                 "permutation", "shuffle", "binomial", "beta", "poisson", "exponential")


def _refusal(what: str, why: str, fix: str) -> SpecializationError:
    location = user_location()
    return SpecializationError(refused_inside_code(what, why, fix, location),
                               operation=what, location=str(location) if location else None)


def _refuse_call(tracer: TraceSession, owner: Any, name: str, what: str, why: str, fix: str,
                 model_code_only: bool = False) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        if not tracer.records_factories() or (model_code_only and not is_user_file(_caller_file())):
            return _patches.previous(owner, name)(*args, **kwargs)
        tracer.refuse(_refusal(what, why, fix))

    refused.__name__ = name
    return refused


def _caller_file() -> str:
    """The file of the code that called the patched function (past specfx's own dispatch frames)."""
    frame = caller_outside_specfx(sys._getframe(1))  # (this frame and the patch are specfx's)
    return frame.f_code.co_filename if frame is not None else "<unknown>"


def _ambient_getters() -> Tuple[str, ...]:
    """torch's functions that read process-wide settings: those of torch's own list of functions
    that take no tensors (``torch.overrides.get_ignored_functions()``) named as getters, less
    those answered elsewhere (grad mode, autocast on/off, the RNG state) or fixed per process."""
    elsewhere = {"is_grad_enabled", "is_autocast_enabled", "get_rng_state", "is_tensor", "is_storage",
                 "get_device_module", "is_vulkan_available"}
    names = {getattr(f, "__name__", "") for f in torch.overrides.get_ignored_functions()
             if getattr(f, "__module__", None) == "torch"}
    return tuple(sorted(n for n in names if n.startswith(("get_", "is_", "are_")) and n not in elsewhere
                        and callable(getattr(torch, n, None))))


# torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled(), torch.is_inference_mode_enabled(),
# torch.get_float32_matmul_precision(), torch.get_autocast_dtype(...), ...
AMBIENT_GETTERS = _ambient_getters()


def _guarded_read(tracer: TraceSession, name: str) -> Callable[..., Any]:
    def read(*args: Any, **kwargs: Any) -> Any:
        original = _patches.previous(torch, name)
        if (tracer.records_factories() and not kwargs and all(type(a) in (str, int, bool) for a in args)
                and is_user_file(_caller_file())):
            return tracer.read_ambient(original, name, args)  # model code reading it: a guarded answer
        return original(*args, **kwargs)

    read.__name__ = name
    return read


def install(tracer: TraceSession) -> None:
    """Patch what the traced code may read of ambient state (see the module docstring)."""
    def is_grad_enabled() -> Any:
        original = _patches.previous(torch, "is_grad_enabled")
        if not tracer.records_factories():
            return bool(original())
        caller = _caller_file()
        if caller == _GRAD_MODE_FILE:
            # no_grad() & co. remember the mode to restore it on exit: the graph restores the
            # mode of its own call, so the remembered mode is a node, not the trace's answer
            return tracer.create_proxy("call_function", original, (), {})
        if is_user_file(caller):
            return tracer.read_grad_mode(original)
        return bool(original())

    def set_grad_enabled(mode: Any) -> None:
        original = _patches.previous(torch._C, "_set_grad_enabled")
        original(bool(value_of(mode)) if isinstance(mode, torch.fx.Proxy) else mode)
        if tracer.records_factories():
            tracer.create_proxy("call_function", original, (mode,), {})

    def is_autocast_enabled(*args: Any, **kwargs: Any) -> Any:
        original = _patches.previous(torch, "is_autocast_enabled")
        if (tracer.records_factories() and len(args) <= 1 and not kwargs and all(isinstance(a, str) for a in args)
                and is_user_file(_caller_file())):
            # model code branching on autocast: the trace's answer, guarded like grad mode
            # (no argument is torch's legacy spelling of "cuda")
            return tracer.read_autocast(args[0] if args else "cuda")
        return original(*args, **kwargs)

    def answer_callable(obj: Any) -> bool:
        # `callable(x)` on a traced value answers as the value does (a tensor is not callable;
        # transformers' torch_compilable_check asks it of every input); a proxy's class has
        # __call__ for torch.fx's sake, so the builtin would answer True for every traced value
        if isinstance(obj, torch.fx.Proxy) and "_specfx" in obj.__dict__:
            value = value_of(obj)
            if value is not MISSING:
                return callable(value)
        return bool(_patches.previous(builtins, "callable")(obj))

    _patches.patch(builtins, "callable", answer_callable)
    for name in AMBIENT_GETTERS:
        _patches.patch(torch, name, _guarded_read(tracer, name))
    _patches.patch(torch, "is_grad_enabled", is_grad_enabled)
    _patches.patch(torch, "is_autocast_enabled", is_autocast_enabled)
    _patches.patch(torch._C, "_set_grad_enabled", set_grad_enabled)
    def enter_autocast(region: Any) -> Any:
        enter = _patches.previous(torch.autocast, "__enter__")
        if tracer.records_factories():
            if getattr(region, "_enabled", True):
                tracer.refuse(_refusal(
                    "torch.autocast()", "specfx does not record autocast regions, so the graph would "
                    "compute in the input dtypes",
                    "call the traced graph under torch.autocast(...) instead, or cast explicitly in forward"))
            # a region that turns autocast off (rotary embeddings in fp32) changes nothing unless the
            # graph is called under autocast: guard that it is not
            tracer.read_autocast(region.device, assumed=False)
        return enter(region)

    _patches.patch(torch.autocast, "__enter__", enter_autocast)
    refusals: List[Tuple[Any, str, str, str, str]] = [
        (torch.inference_mode, "__enter__", "torch.inference_mode()",
         "a graph cannot record entering inference mode",
         "call the traced graph under torch.inference_mode() instead, or use torch.no_grad() in forward"),
    ]
    refusals += [(random, name, f"random.{name}()", "Python's random draws would be frozen into the graph",
                  "draw with torch (torch.rand, torch.randint...), which the graph draws anew on every call")
                 for name in _PYTHON_RANDOM]
    numpy_random: Optional[types.ModuleType]
    try:
        import numpy.random as numpy_random
    except ImportError:  # pragma: no cover - numpy is a dependency
        numpy_random = None
    if numpy_random is not None:
        refusals += [(numpy_random, name, f"numpy.random.{name}()", "numpy's random draws would be frozen into "
                      "the graph", "draw with torch (torch.rand, torch.randint...), which the graph draws anew "
                      "on every call") for name in _NUMPY_RANDOM]
    for owner, name, what, why, fix in refusals:
        _patches.patch(owner, name, _refuse_call(tracer, owner, name, what, why, fix))
    # RNG control in model code; torch's own code (checkpoint stashing the RNG state) is left alone
    controls = [(owner, name) for owner in (torch, torch.random) for name in RNG_CONTROL]
    devices = [getattr(torch, device, None) for device in _DEVICE_MODULES]
    controls += [(owner, name) for owner in devices if owner is not None for name in _DEVICE_RNG_CONTROL]
    for owner, name in controls:
        if callable(getattr(owner, name, None)):
            _patches.patch(owner, name, _refuse_call(tracer, owner, name, f"{owner.__name__}.{name}()",
                                                     *RNG_CONTROL_REFUSAL, model_code_only=True))
