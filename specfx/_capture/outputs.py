"""Saying which output ``forward`` returned that no FX graph can return.

torch.fx can return tensors, containers of them (tuples, lists, dicts, named
tuples, dataclasses such as transformers' ``ModelOutput``) and plain constants.
For anything else it fails deep inside with ``NotImplementedError: argument of
type: <class ...>``. specfx names the output by its key path and says how to
avoid it.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import Any, Iterator, List, Optional, Tuple

import torch

from .._graph.objects import Path

from ..errors import SpecializationError
from .._policy.messages import cache_output_advice, unrepresentable_output
from .._policy.spelling import spelling

__all__ = ["unrepresentable_output_error"]


def _leaves(value: Any, path: str) -> Iterator[Tuple[str, Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key!r}]")
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _leaves(getattr(value, field.name, None), f"{path}.{field.name}")


def _path_of(output: Any, target: Any) -> Optional[str]:
    return next((path for path, value in _leaves(output, "output") if value is target), None)


def is_transformers_cache(value: Any) -> bool:
    """Whether ``value`` is one of transformers' caches (``DynamicCache``, ``EncoderDecoderCache``...)."""
    kind = type(value)
    return kind.__module__.startswith("transformers.") and any(c.__name__ == "Cache" for c in kind.__mro__)


def traced_tensors_in(obj: Any, is_traced: Any, depth: int = 6) -> List[Tuple[Path, Any]]:
    """``(path, value)`` of every traced value inside ``obj``'s attributes, lists, tuples and
    dicts (``layers[0].keys`` of a cache), ``depth`` levels down."""
    found: List[Tuple[Path, Any]] = []

    def walk(value: Any, path: Path, level: int) -> None:
        if is_traced(value):
            found.append((path, value))
            return
        if level == depth or isinstance(value, (torch.Tensor, torch.nn.Module, type)):
            return
        if type(value) in (list, tuple):
            for index, item in enumerate(value):
                walk(item, path + (("item", index),), level + 1)
        elif type(value) is dict:
            for key, item in value.items():
                walk(item, path + (("item", key),), level + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, (int, float, str, bool)):
            for name, item in vars(value).items():
                walk(item, path + (("attribute", name),), level + 1)

    walk(obj, (), 0)
    return found


def template_of(obj: Any, traced: List[Tuple[Path, Any]]) -> Any:
    """A copy of ``obj`` with its traced values left out (``None``)."""
    memo = {id(value): None for _, value in traced}
    return copy.deepcopy(obj, memo)


def _advice(value: Any, root_fn: Any, root: Any) -> str:
    kind = type(value)
    if kind.__module__.startswith("transformers.") and "Cache" in kind.__name__:
        return cache_output_advice(*_use_cache_off(root_fn, root))
    return "return tensors (or tuples, lists, dicts and dataclasses of them) from forward"


def _use_cache_off(root_fn: Any, root: Any) -> Tuple[str, bool]:
    """How ``use_cache=False`` reaches this model, and whether as an argument: a parameter of
    forward (``concrete_args``), ``**kwargs`` (``example_kwargs``: concrete_args cannot name
    it), else its config."""
    try:
        parameters = inspect.signature(root_fn).parameters if root_fn is not None else {}
    except (TypeError, ValueError):
        parameters = {}
    has_config = hasattr(getattr(root, "config", None), "use_cache")
    by_config = "set model.config.use_cache = False before tracing"
    if "use_cache" in parameters:
        return f"trace with {spelling().concrete('use_cache', False)}", True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        fix = f"trace with {spelling().example_kwarg('use_cache', False)}"
        return (f"{fix}, or {by_config}" if has_config else fix), True
    if has_config:
        return by_config, False
    return f"trace with {spelling().concrete('use_cache', False)}", True


def unrepresentable_output_error(output: Any, value: Any, cause: BaseException, root_fn: Any = None,
                                 root: Any = None) -> Optional[SpecializationError]:
    """The error to raise when torch.fx cannot turn ``value``, part of ``output``, into
    a graph argument; ``None`` when ``value`` is not part of the output. ``root_fn`` (the
    traced forward) and ``root`` say how a fix reaches the model."""
    # (without the output at hand, torch.fx's failure is still about a value it cannot hold)
    path = _path_of(output, value) if output is not None else "a value"
    if path is None:
        return None
    return SpecializationError(
        unrepresentable_output(path, type(value), cause, _advice(value, root_fn, root)),
        operation=f"returning {path}",
    )
