"""The persisted record of one decision: :class:`Specialization`, kept in
``gm.specializations`` and pickled with the graph (its public path is
``specfx.Specialization``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

from .._frames.source import SourceLocation
from .._policy.policy import Specialize
from ..guards import GuardKind, describe_identity

__all__ = ["Specialization"]


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One decision baked into a traced graph, and the guard that checks it.

    ``kind`` is what was read (a :class:`~specfx.guards.GuardKind`, a ``str`` enum:
    ``"iter"``, ``"unpack"``, ``"len"``, ``"bool"``, ``"shape"``, ``"size"``...),
    ``flag`` the :class:`Specialize` flag that allowed it (``Specialize.NONE`` for
    decisions the code itself fixes, such as unpacking into two names, ``x is None``
    or ``x.dtype``), ``value`` the traced value, ``expression`` what was read in the
    user's terms (``"len(xs)"``), ``node`` the name of the graph node it was read
    from, ``location`` the user's source line, ``module`` the qualified name of the
    submodule being traced, ``guard`` the name of the guard node (None with
    ``guards=False``), ``degenerate`` whether it was decided on an empty container
    or a size-0/1 dimension, and ``depends_on`` the inputs the value was computed
    from (``("x",)``, ``("kwargs['attention_mask']",)``).

    >>> import torch, specfx
    >>> def f(x):
    ...     return torch.cat([*torch.chunk(x, 2)])
    >>> (s,) = specfx.trace(f, torch.ones(4), policy=specfx.Policy(iter=True)).specializations
    >>> str(s.kind), s.value, s.flag, s.guard_description, s.depends_on
    ('iter', 2, <Specialize.ITER_LEN: 1>, 'len(torch.chunk(x, 2)) == 2', ('x',))
    """

    kind: GuardKind
    flag: Specialize
    value: Any
    expression: str
    node: str
    location: Optional[SourceLocation]
    module: str = ""
    guard: Optional[str] = None
    degenerate: bool = False
    depends_on: Tuple[str, ...] = ()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # records pickled by 0.1 lack depends_on and hold kinds as plain strings
        state = {"depends_on": (), **state}
        if not isinstance(state["kind"], GuardKind) and state["kind"] in GuardKind._value2member_map_:
            state["kind"] = GuardKind(state["kind"])
        for name, value in state.items():
            object.__setattr__(self, name, value)

    @property
    def where(self) -> str:
        """``file:line`` of the user code that made the decision ('<unknown>' if none)."""
        return str(self.location) if self.location else "<unknown>"

    @property
    def source(self) -> str:
        """The user's source line that made the decision ('' if unknown)."""
        return self.location.text if self.location else ""

    @property
    def guard_description(self) -> str:
        """The assumption the guard checks, e.g. ``len(x) == 2`` or ``mask is None``."""
        if self.kind in (GuardKind.IS_NONE, GuardKind.IS_TENSOR):
            return describe_identity(self.kind, self.expression, bool(self.value))
        if self.kind is GuardKind.TYPE:
            return f"type({self.expression}) is {self.value}"
        return f"{self.expression} == {self.value!r}"


Specialization.__module__ = "specfx"  # pickles name it by the public package's path
