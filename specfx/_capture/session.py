"""The narrow view of a running trace that the trace loop's helpers are given.

``SpecTracer`` (``tracer.py``) builds its helpers — the ``Decider``, the ambient reads,
the factories, the held-tensor mode — and hands each of them itself. They see it only
through :class:`TraceSession`, never the concrete class, so that the tracer depends on
its helpers and not the other way round (no import cycle, type-only imports included).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NoReturn, Optional, Protocol, Tuple

import torch
from torch.fx import Node

__all__ = ["TraceSession"]


class TraceSession(Protocol):
    """What the helpers of one trace may ask of it (``SpecTracer`` implements it)."""

    root: torch.nn.Module  # the module being traced (a stand-in for a function)
    examples: Optional[Dict[str, Any]]  # the example inputs by parameter name; None: symbolic
    tensor_attrs: Dict[Any, str]  # tensors already bound to a graph attribute, and their names
    attribute_holders: Optional[List[Tuple[str, torch.nn.Module]]]  # modules holding more than numbers

    def refuse(self, error: BaseException) -> NoReturn:
        """Raise ``error``, a refusal; it fails the trace even if model code catches it."""

    def create_proxy(self, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                     name: Optional[str] = None, type_expr: Optional[Any] = None) -> Any:
        """A node and its proxy (torch.fx's signature), carrying its value when there are examples."""

    def create_node(self, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                    name: Optional[str] = None, type_expr: Optional[Any] = None) -> Node:
        """A bare node (guards: no value, no proxy)."""

    def constant_proxy(self, value: Any, prefix: str) -> Any:
        """A ``get_attr`` proxy of an object the graph holds (a class it calls), named ``prefix...``."""

    def note_type_read(self, proxy: Any, frame: Any) -> None:
        """Model code (``frame``) asked the class of a traced value: guard an input's exact class."""

    def records_factories(self) -> bool:
        """Whether calls made now come from traced model code (not from specfx computing a value)."""

    def state_name(self, tensor: torch.Tensor) -> Optional[str]:
        """The qualified name of ``tensor`` among the root's parameters and buffers, if it is one."""

    def get_fresh_qualname(self, prefix: str) -> str:
        """A root attribute name not taken yet (torch.fx's)."""

    def forget_state_names(self) -> None:
        """The root gained a module: name its parameters and buffers afresh."""

    def read_grad_mode(self, is_grad_enabled: Callable[[], bool]) -> bool:
        """Grad mode read by model code: answered and guarded."""

    def read_ambient(self, getter: Callable[..., Any], name: str, args: Tuple[Any, ...]) -> Any:
        """A process-wide setting read by model code through ``torch.<name>(*args)``: answered and guarded."""

    def read_autocast(self, device_type: str, assumed: Optional[bool] = None) -> bool:
        """Autocast state read by model code: answered and guarded."""
