"""Reading back what a graph has baked in: ``specializations`` (the records,
typed) and ``explain`` (the table a user reads to review them)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Dict, Hashable, Iterable, List, Sequence, Tuple, Union

from .specialization import Specialization
from .._policy.messages import short_repr
from .._policy.policy import Specialize
from ..guards import GUARDS

__all__ = ["explain", "specializations"]

_KIND_OF_GUARD = {guard: kind for kind, guard in GUARDS.items()}  # guard_len: "len"


@dataclasses.dataclass(frozen=True)
class _Decision:
    """A record and the text of where it was made. A record rebuilt from a guard
    node has no structured location; the guard's own ``where`` text (``file:line:
    source``) is shown whole instead of being split apart again."""

    record: Specialization
    where: str
    source: str

    @property
    def identity(self) -> Tuple[Hashable, ...]:
        """What makes two records the same decision: the same instruction of the
        same code (so the same check in every layer is one), reading the same kind
        of value and getting the same answer. Without an instruction offset (graphs
        that lost their records, locations made by hand), the expression read
        stands in for it, so two checks on one line never merge."""
        record = self.record
        location = record.location
        offset = getattr(location, "offset", -1)
        site: Tuple[Hashable, ...]
        if location is not None and offset >= 0:
            site = (location.filename, location.lineno, offset)
        else:
            site = (self.where, record.expression)
        return (str(record.kind), record.flag, short_repr(record.value), *site)


def _graph_nodes(gm: Any) -> Iterable[Any]:
    """The nodes of ``gm``'s graph: torch.fx's, or any FX-like graph (Brevitas'
    vendored FX copy is not a ``torch.fx.Graph`` subclass)."""
    return getattr(getattr(gm, "graph", None), "nodes", None) or ()


def _rebuilt_from_guards(gm: Any) -> List[_Decision]:
    """Records rebuilt from the guard nodes, for graphs that kept their guards but
    lost the ``specializations`` attribute (FX quantization's prepare_fx and
    convert_fx copy only the graph). Every guard takes ``(subject, *expected,
    expression, where)``."""
    decisions = []
    for node in _graph_nodes(gm):
        kind = _KIND_OF_GUARD.get(node.target) if node.op == "call_function" else None
        if kind is None:
            continue
        subject, *_, expected, expression, where = node.args
        record = Specialization(
            kind=kind, flag=Specialize.NONE, value=expected, expression=expression,
            node=getattr(subject, "name", str(subject)), location=None, guard=node.name)
        decisions.append(_Decision(record, where=where, source=""))
    return decisions


def _decisions_of(gm: Any, caller: str = "explain") -> List[_Decision]:
    records = gm if isinstance(gm, (list, tuple)) else getattr(gm, "specializations", None)
    if records is not None:
        return [_Decision(record, record.where, record.source) for record in records]
    rebuilt = _rebuilt_from_guards(gm)
    if not rebuilt:
        raise TypeError(
            f"{caller}() takes a GraphModule made by specfx.trace (or its .specializations); "
            f"{type(gm).__name__} has neither specializations nor specfx guard nodes"
        )
    return rebuilt


def specializations(gm: Any) -> Tuple[Specialization, ...]:
    """The decisions baked into ``gm``, in the order they were made: its
    ``gm.specializations`` records, typed for type checkers.

    ``gm`` is a GraphModule made by :func:`specfx.trace` (or a copy, a reloaded
    pickle, a graph that went through FX quantization). A graph that lost its
    records but kept its guards is read back from the guard nodes: kind, value
    and expression are exact, ``flag`` is ``Specialize.NONE`` and ``location``
    is ``None``. Any FX-like graph module works, including Brevitas' own.
    Anything else (a module neither traced by specfx nor holding its guards) is
    a ``TypeError``.

    >>> import torch, specfx
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return a * b
    >>> [(str(s.kind), s.value) for s in specfx.specializations(specfx.trace(f, torch.ones(4)))]
    [('unpack', 2)]
    """
    return tuple(decision.record for decision in _decisions_of(gm, "specializations"))


def _row(number: int, members: List[_Decision]) -> Tuple[str, ...]:
    first = members[0].record
    flag = first.flag.name if first.flag.value else "always"
    guard = first.guard_description if first.guard else "NOT GUARDED"
    return (str(number), str(first.kind), short_repr(first.value), flag or "", str(len(members)),
            members[0].where, guard, members[0].source)


def explain(gm: Union[Any, Sequence[Specialization]]) -> str:
    """A table of every specialization in ``gm`` (kind, value, flag, location,
    guard) and a summary line. The same decision made again, by the same code
    (the same check in every layer), is one row with a count; two checks on
    one line are two rows. A graph that lost its records but kept its guards
    (after FX quantization) is explained from the guard nodes (flags then show
    as ``always`` and the location column holds the guard's ``file:line:
    source`` text).

    >>> import torch, specfx
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return a * b if x.sum() > 0 else a - b
    >>> gm = specfx.trace(f, torch.ones(4), policy=specfx.Policy(bool=True))
    >>> print(explain(gm).splitlines()[0])
    specfx: 2 specializations from 2 source lines (bool: 1, unpack: 1), all guarded
    """
    decisions = _decisions_of(gm)
    if not decisions:
        return "specfx: no specializations - the graph is as general as torch.fx.symbolic_trace's"
    groups: Dict[Tuple[Hashable, ...], List[_Decision]] = {}
    for decision in decisions:
        groups.setdefault(decision.identity, []).append(decision)
    header = ("#", "kind", "value", "flag", "count", "location", "guard", "source")
    rows = [_row(number, members) for number, members in enumerate(groups.values(), start=1)]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)]
    return "\n".join([_summary(decisions), *lines])


def _summary(decisions: List[_Decision]) -> str:
    records = [decision.record for decision in decisions]
    kinds = Counter(str(record.kind) for record in records)
    guarded = sum(1 for record in records if record.guard)
    state = "all guarded" if guarded == len(records) else (
        "NONE guarded (traced with guards=False)" if guarded == 0 else f"{guarded} guarded"
    )
    noun = "specialization" if len(records) == 1 else "specializations"
    lines = len({decision.where for decision in decisions})
    lines_noun = "source line" if lines == 1 else "source lines"
    summary = (
        f"specfx: {len(records)} {noun} from {lines} {lines_noun} "
        f"({', '.join(f'{kind}: {count}' for kind, count in sorted(kinds.items()))}), {state}"
    )
    degenerate = sum(1 for record in records if record.degenerate)
    if degenerate:
        summary += f"; {degenerate} decided on a degenerate example (size 0/1 or empty)"
    return summary


def list_decisions(records: Sequence[Specialization], limit: int) -> str:
    """Indented lines ``<assumption> at <file:line>`` for the first ``limit`` records, and a
    count of the rest: the body of warnings that name decisions."""
    lines = "\n".join(f"  {r.guard_description} at {r.where}" for r in records[:limit])
    more = f"\n  ... and {len(records) - limit} more" if len(records) > limit else ""
    return lines + more
