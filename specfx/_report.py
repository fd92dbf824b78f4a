"""``explain``: the table a user reads to review what a graph has baked in."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import torch.fx

from ._guards import GUARDS, Specialization
from ._messages import short_repr
from ._policy import Specialize
from ._source import SourceLocation

__all__ = ["explain"]

_NUMBERED = re.compile(r"_\d+\b")


_KIND_OF_GUARD = {guard: kind for kind, guard in GUARDS.items()}  # guard_len: "len"


def _records_from_guards(gm: Any) -> List[Specialization]:
    """Rebuild the records from the guard nodes, for graphs that kept their guards
    but lost the ``specializations`` attribute (FX quantization's prepare_fx and
    convert_fx copy only the graph)."""
    records = []
    for node in gm.graph.nodes:
        kind = _KIND_OF_GUARD.get(node.target) if node.op == "call_function" else None
        if kind is None:
            continue
        *_, expected, expression, where = node.args
        path, _, rest = where.partition(":")
        line, _, _source = rest.partition(":")
        location = SourceLocation(path, int(line), "") if line.strip().isdigit() else None
        subject = node.args[0]
        records.append(Specialization(
            kind=kind, flag=Specialize.NONE, value=expected, expression=expression,
            node=getattr(subject, "name", str(subject)), location=location, guard=node.name))
    return records


def _specializations_of(gm: Any) -> Sequence[Specialization]:
    if isinstance(gm, (list, tuple)):
        return gm
    records = getattr(gm, "specializations", None)
    if records is None and isinstance(getattr(gm, "graph", None), torch.fx.Graph):
        records = _records_from_guards(gm)
        if records:
            return records
    if records is None:
        raise TypeError(
            f"explain() takes a GraphModule made by specfx.trace (or its .specializations); "
            f"{type(gm).__name__} has no specializations"
        )
    return records


def explain(gm: Any) -> str:
    """A table of every specialization in ``gm`` (kind, value, flag, location,
    guard) and a summary line. Identical decisions made by the same source
    line (the same check in every layer) are one row with a count. A graph
    that lost its records but kept its guards (after FX quantization) is
    explained from the guard nodes (flags then show as ``always``).

    >>> import torch, specfx
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return a * b if x.sum() > 0 else a - b
    >>> gm = specfx.trace(f, torch.ones(4), policy=specfx.Policy(bool=True))
    >>> print(explain(gm).splitlines()[0])
    specfx: 2 specializations from 2 source lines (bool: 1, unpack: 1), all guarded
    """
    records = _specializations_of(gm)
    if not records:
        return "specfx: no specializations - the graph is as general as torch.fx.symbolic_trace's"
    groups: Dict[Tuple[Any, ...], List[Specialization]] = {}
    for record in records:
        # the same check in every layer differs only in node-name suffixes (gt_3, gt_7)
        key = (record.kind, record.flag, record.where, short_repr(record.value), record.source,
               _NUMBERED.sub("", record.expression))
        groups.setdefault(key, []).append(record)
    header = ("#", "kind", "value", "flag", "count", "location", "guard", "source")
    rows = []
    for number, members in enumerate(groups.values(), start=1):
        first = members[0]
        flag = first.flag.name if first.flag.value else "always"
        guard = first.guard_description if first.guard else "NOT GUARDED"
        rows.append((str(number), first.kind, short_repr(first.value), flag, str(len(members)),
                     first.where, guard, first.source))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)]
    kinds = Counter(record.kind for record in records)
    guarded = sum(1 for record in records if record.guard)
    state = "all guarded" if guarded == len(records) else (
        "NONE guarded (traced with guards=False)" if guarded == 0 else f"{guarded} guarded"
    )
    noun = "specialization" if len(records) == 1 else "specializations"
    lines_noun = "source line" if len({r.where for r in records}) == 1 else "source lines"
    summary = (
        f"specfx: {len(records)} {noun} from {len({r.where for r in records})} {lines_noun} "
        f"({', '.join(f'{kind}: {count}' for kind, count in sorted(kinds.items()))}), {state}"
    )
    degenerate = sum(1 for record in records if record.degenerate)
    if degenerate:
        summary += f"; {degenerate} decided on a degenerate example (size 0/1 or empty)"
    return "\n".join([summary, *lines])
