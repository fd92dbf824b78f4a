"""The usual first-hour mistakes in what ``trace()`` is given, caught before they surface
as someone else's error far from their cause: torch.fx's ``AssertionError`` for a model
class, transformers' ``unhashable type: 'slice'`` for a tokenizer batch passed
positionally, the model's own ``AttributeError`` for a list or a numpy array.

A model class, a keyword batch and numpy arrays are refused before the trace; a list
taken as one argument is explained when the trace fails on it; a model in training mode
with dropout or batch norm is traced as asked, with a warning. The wording is in
``_policy/messages.py``.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
import warnings
from typing import Any, Iterator, List, Mapping, Optional, Tuple

import torch

from .._capture.roots import definition_line
from .._policy import messages
from ..errors import SpecializationError

__all__ = ["explain_list_failure", "refuse_model_class", "refuse_numpy", "refuse_positional_batch",
           "warn_training_mode"]


def refuse_model_class(root: Any, caller: str) -> None:
    """``specfx.trace(Tiny, x)``: the class, not an instance.

    >>> refuse_model_class(torch.nn.Identity, "trace")
    Traceback (most recent call last):
    TypeError: trace() takes a model instance, but got the class Identity itself. Pass an instance, e.g. Identity()
    """
    if isinstance(root, type) and issubclass(root, torch.nn.Module):
        needs = [p for p in list(inspect.signature(root.__init__).parameters.values())[1:]
                 if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        example = f"{root.__name__}({'...' if needs else ''})"
        raise TypeError(messages.model_class_given(caller, root.__qualname__, example))


def refuse_positional_batch(example_inputs: Any, parameters: List[inspect.Parameter], owner: str) -> None:
    """``specfx.trace(model, batch)`` with ``batch`` a dict (a tokenizer's ``BatchEncoding``)
    whose keys all name parameters of forward: forward would receive the whole dict as its
    first argument. A dict with other keys may well be one argument, and is left alone."""
    value = example_inputs
    if isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    if not isinstance(value, Mapping) or not value:
        return
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    keys = list(value)
    if not all(isinstance(k, str) and k in names for k in keys):
        return
    first = next((p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)),
                 "the first parameter")
    raise TypeError(messages.keyword_batch_positional(type(value).__name__, keys, owner, first))


def _leaves(value: Any, path: str) -> Iterator[Tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def refuse_numpy(examples: Mapping[str, Any], root: Any) -> None:
    """A numpy array among the example inputs (keyed by parameter, as ``trace()`` bound
    them) is refused, naming the parameter and forward's line: the graph takes tensors. (Held
    as a constant, the array would be the example's for every call; traced as a tensor, what
    forward does with it, numpy's operators or ``torch.from_numpy``, would not be eager's.)"""
    numpy = sys.modules.get("numpy")
    if numpy is None:  # (no array can exist)
        return
    for name, value in examples.items():
        for path, leaf in _leaves(value, name.lstrip("*")):
            if isinstance(leaf, numpy.ndarray):
                location = definition_line(root.forward if isinstance(root, torch.nn.Module) else root)
                raise SpecializationError(messages.numpy_example(path, tuple(leaf.shape), leaf.dtype, location),
                                          operation=f"a numpy example for {path}",
                                          location=str(location) if location else None)


def _failing_line(error: BaseException) -> str:
    """``at file:line: source`` of the innermost frame outside specfx and torch."""
    skip = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(torch.__file__))
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return ""
    filename = frames[-1].filename
    if filename.startswith(os.getcwd() + os.sep):  # as specfx names the user's files elsewhere
        filename = os.path.relpath(filename)
    return f"\n  at {filename}:{frames[-1].lineno}: {(frames[-1].line or '').strip()}"


def explain_list_failure(error: BaseException, example_inputs: Any, first: Optional[str]) -> Optional[TypeError]:
    """The error to raise instead of ``error`` when the trace failed on an example given
    as a list (one argument, as ``model(example)``), or None."""
    if not isinstance(example_inputs, list) or not isinstance(error, (TypeError, AttributeError)):
        return None
    kinds = sorted({type(v).__name__ for v in example_inputs})
    return TypeError(messages.list_example_failed(error, _failing_line(error), len(example_inputs), kinds,
                                                  first or "the first parameter"))


def _mode_dependent(module: torch.nn.Module) -> bool:
    """Does ``module`` compute differently in training mode (dropout, batch statistics)?"""
    nn = torch.nn
    if isinstance(module, nn.modules.dropout._DropoutNd):
        return module.p > 0
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return True
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        return bool(module.track_running_stats)
    if isinstance(module, (nn.RNNBase, nn.MultiheadAttention)):
        return float(module.dropout) > 0
    return False


def warn_training_mode(root: Any) -> None:
    """Warn when ``root`` is traced in training mode and holds modules for which the mode
    matters: the graph then computes as training does."""
    if not isinstance(root, torch.nn.Module) or not root.training:
        return
    found = [(name, type(module).__name__) for name, module in root.named_modules()
             if module.training and _mode_dependent(module)]
    if found:
        warnings.warn(messages.training_mode(type(root).__name__, [(n or "the model", k) for n, k in found]),
                      UserWarning, stacklevel=3)
