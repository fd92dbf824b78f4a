"""Decisions: the one place where an answer taken from an example value is checked
against the policy, recorded as a :class:`Specialization` and guarded.

The tracer describes each decision as a frozen :class:`Decision` and hands it to
:meth:`Decider.decide`, which

1. refuses it with ``SpecializationError`` unless the policy in force grants its flag,
2. skips it if the same property of the same value in the same state was decided
   already (a tensor changed in place, or a container extended, is decided again),
3. emits the guard node and appends the :class:`Specialization` record.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Hashable, List, Optional, Set, Tuple

import torch

from .._policy import messages as _messages
from .._policy.describe import Describer
from .._policy.policy import Resolved, Specialize
from .._frames.source import SourceLocation, user_location
from .values import ValueProxy, state_of, value_of
from .._graph.specialization import Specialization
from ..guards import GUARDS, GuardKind, guard_node_name
from .python_draws import PythonDraws
from .session import TraceSession
from ..errors import SpecializationError


__all__ = ["Decider", "Decision"]


@dataclasses.dataclass(frozen=True)
class Decision:
    """One answer the trace is about to take from an example value.

    ``subject`` is the proxy whose value is read, ``kind`` what is read, ``flag`` the
    policy flag that must grant it (``NONE``: the code itself fixes it), ``value``
    the answer, ``expected`` the guard's arguments after the subject (``(dim, size)``
    for a size), ``expression`` the read in the user's terms (``len(xs)``).
    ``key`` overrides what counts as "the same decision" (default: subject, kind and
    the guard arguments but the last). ``by_parameters``: allowed by
    ``param_shapes_constant`` alone; ``needs_data``: impossible on meta tensors;
    ``fix``: one more fix to offer when refused.
    """

    subject: ValueProxy
    kind: GuardKind
    flag: Specialize
    value: Any
    expected: Tuple[Any, ...]
    expression: str
    operation: str
    key: Optional[Tuple[Hashable, ...]] = None
    location: Optional[SourceLocation] = None
    by_parameters: bool = False
    needs_data: bool = False
    fix: Optional[str] = None


def _stamp(value: Any) -> Hashable:
    """What changes when a value is changed in place: a decision on a changed value is new."""
    if isinstance(value, torch.Tensor):
        return value._version
    if isinstance(value, dict):
        return tuple(value)
    if isinstance(value, list):
        return len(value)
    return None


class Decider:
    """Checks, records and guards the decisions of one trace (see the module docstring)."""

    def __init__(self, tracer: TraceSession, emit_guards: bool) -> None:
        self._tracer = tracer
        self._emit_guards = emit_guards
        self._decided: Set[Tuple[Hashable, ...]] = set()
        self.describe = Describer()
        self.specializations: List[Specialization] = []
        self.draws = PythonDraws()  # the trace's draws from Python's random (python_draws.py)

    def decided(self, key: Tuple[Hashable, ...], subject: ValueProxy) -> bool:
        """Whether a decision with this key (see :class:`Decision`) on ``subject`` in its
        current state was made already."""
        return (*key, _stamp(value_of(subject))) in self._decided

    def decide(self, decision: Decision, resolved: Resolved, module_path: str) -> None:
        """Refuse ``decision`` if the policy in force does not grant it; else record and guard it."""
        location = decision.location or user_location()
        granted = decision.flag is Specialize.NONE or decision.flag in resolved.flags
        subject = decision.subject
        draw = self.draws.draw_behind(subject.node) if self.draws.any else None
        if draw is not None:  # whatever the policy: the graph's next draw may take the other path
            self._tracer.refuse(SpecializationError(
                _messages.python_draw_decides(f"random.{draw.args[0]}()", decision.expression, location),
                operation=decision.operation, location=str(location) if location else None))
        if not granted and not decision.by_parameters:
            self._tracer.refuse(_messages.denied_error(
                decision.operation, decision.flag, decision.value, location, resolved, module_path,
                decision.fix, decision.kind, self.describe.depends_on(subject.node),
            ))
        if decision.needs_data and _is_meta(value_of(subject)):
            self._tracer.refuse(_messages.meta_error(decision.operation, decision.flag, location,
                                                     self.describe.name(subject.node), decision.kind))
        key = decision.key or (subject.node, decision.kind, decision.expected[:-1])
        key = (*key, _stamp(value_of(subject)))
        if key in self._decided:
            return
        self._decided.add(key)
        guard_name = None
        if self._emit_guards:
            where = location.describe() if location else "<unknown location>"
            guard = self._tracer.create_node(
                "call_function", GUARDS[decision.kind],
                (subject.node, *decision.expected, decision.expression, where), {},
                name=guard_node_name(subject.node, GUARDS[decision.kind]),  # (as a re-trace names it)
            )
            guard_name = guard.name
        self.specializations.append(Specialization(
            kind=decision.kind,
            flag=decision.flag if granted else Specialize.NONE,  # else allowed by param_shapes_constant alone
            value=decision.value,
            expression=decision.expression,
            node=subject.node.name,
            location=location,
            module=module_path,
            guard=guard_name,
            degenerate=_is_degenerate(subject, decision.kind, decision.value, decision.flag is Specialize.NONE),
            depends_on=self.describe.depends_on(subject.node),
        ))


def _is_meta(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "meta"


def _is_degenerate(proxy: ValueProxy, kind: GuardKind, value: Any, fixed_by_code: bool) -> bool:
    """Decided on a size-0/1 dimension (read as an int under SHAPES, or feeding a
    predicate), on the length 0/1 of a container the model computed, or on the first
    dimension 0/1 of an input tensor iterated or measured (``for row in x`` over a
    batch of 1). Not: a count the code itself fixes (``a, = x``: eager raises on
    another)."""
    if state_of(proxy).degenerate:
        return True
    if kind in (GuardKind.ITER, GuardKind.LEN, GuardKind.KEYS):
        if proxy.node.op == "placeholder" and (fixed_by_code or not isinstance(value_of(proxy), torch.Tensor)):
            return False
        return len(value) <= 1 if kind is GuardKind.KEYS else value <= 1
    if kind is GuardKind.SHAPE:
        return any(size in (0, 1) for size in value)
    if kind in (GuardKind.SIZE, GuardKind.NUMEL):
        return value in (0, 1)
    return False


