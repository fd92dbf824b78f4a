"""Which batches of a calibration set a traced graph serves, guard by guard.

A :class:`GuardChecker` answers, for one input, whether each of a graph's guards
holds, without running more of the graph than the guards need:

- the guards on input metadata (shapes, lengths, keys, ``is None``: the
  Specializer's prologue) run up front, each on its own, so every one of them is
  answered on every batch;
- when they all hold, the graph runs up to its last guard on data (nothing after
  it), and stops at the first of those that fails: the guards after it are *not
  reached* on that batch, since the graph would already compute another path
  than eager there;
- what that run may write (inputs, buffers, RNG states: the Specializer's
  ``Writes``) is saved before and put back after, so checking leaves the model,
  the batches and the RNG as they were.

:func:`coverage` streams a set of batches through one checker and returns the
exact counts as a :class:`Coverage`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
import torch.fx

from .._graph.report import specializations
from .._graph.specialization import Specialization
from .._graph.structure import entry_only
from .._policy.messages import describe_identity, short_repr, short_text
from ..errors import GuardError
from ..guards import GUARD_FUNCTIONS, GuardKind
from .guard_runs import LIVE_MODEL, Checkpoint, Writes, build_prologue, saved_paths, writes_before
from .progress import check_progress, progress_bar

__all__ = ["Coverage", "GuardChecker", "GuardCoverage", "as_call", "coverage"]

# Checks a graph makes that are not guard nodes: the kind their GuardError carries -> the row.
_OTHER_CHECKS = {
    "structure": "the inputs' structure and types (checked at entry)",
    "caught": "ops inside the model's try blocks do not raise",
    "error": "the graph runs up to its guards without an error",
}


def as_call(batch: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """``(args, kwargs)`` of one batch as a DataLoader yields it: a tensor is one
    positional argument, a tuple or list the positional arguments, a mapping (a dict,
    a transformers ``BatchEncoding``) the keyword arguments, and a pair
    ``(args, kwargs)`` (a tuple or list, then a mapping) both.

    >>> as_call({"input_ids": 1})
    ((), {'input_ids': 1})
    >>> as_call(((1, 2), {"mask": 3}))
    ((1, 2), {'mask': 3})
    """
    if isinstance(batch, Mapping):
        return (), dict(batch)
    if isinstance(batch, (tuple, list)):
        if len(batch) == 2 and isinstance(batch[0], (tuple, list)) and isinstance(batch[1], Mapping):
            return tuple(batch[0]), dict(batch[1])
        return tuple(batch), {}
    return (batch,), {}


@dataclasses.dataclass(frozen=True)
class GuardCoverage:
    """One guard's answers over a calibration set (a row of :class:`Coverage`).

    ``specialization`` is the decision the guard checks (``None`` for the check of
    the inputs' structure at the graph's entry), ``assumption`` the assumption in the
    user's terms, ``held``/``failed``/``not_reached`` count batches (``not_reached``:
    an earlier guard on data failed, so the graph never got here),
    ``first_failure`` is the index of the first batch on which it failed (or
    ``None``) and ``value_seen`` the value it saw there.

    >>> import torch, specfx
    >>> gm = specfx.trace(lambda x: x.view(x.size(0), -1), torch.ones(2, 3), policy="shapes")
    >>> (row,) = specfx.coverage(gm, [torch.ones(2, 3), torch.ones(4, 3)]).guards
    >>> row.assumption, row.held, row.failed, row.first_failure, row.seen
    ('x.size(0) == 2', 1, 1, 1, 'x.size(0) == 4')
    """

    specialization: Optional[Specialization]
    assumption: str
    held: int
    failed: int
    not_reached: int
    first_failure: Optional[int]
    value_seen: Any

    @property
    def seen(self) -> str:
        """What the first failing batch showed, in the user's terms (``x.size(0) == 5``)."""
        if self.first_failure is None:
            return ""
        record = self.specialization
        if record is None:
            return str(self.value_seen)
        if record.kind in (GuardKind.IS_NONE, GuardKind.IS_TENSOR):
            return describe_identity(record.kind, record.expression, bool(self.value_seen))
        if record.kind is GuardKind.TYPE:
            return f"type({record.expression}) is {self.value_seen}"
        return f"{record.expression} == {short_repr(self.value_seen)}"


@dataclasses.dataclass(frozen=True)
class Coverage:
    """How a traced graph fares on a calibration set (see :func:`specfx.coverage`).

    ``total`` batches were checked; ``passed`` ran with every guard holding;
    ``covered`` is ``passed == total``; ``failed_batches`` are the indices of the
    others, ascending; ``guards`` has one :class:`GuardCoverage` row per guard of
    the graph, in the graph's order (and one first row for the check of the inputs'
    structure when a batch failed it). ``str(coverage)`` is the table to read.

    >>> import torch, specfx
    >>> gm = specfx.trace(lambda x: x.view(x.size(0), -1), torch.ones(2, 3), policy="shapes")
    >>> report = specfx.coverage(gm, [torch.ones(2, 3), torch.ones(4, 3), torch.ones(2, 5)])
    >>> report.total, report.passed, report.covered, report.failed_batches
    (3, 2, False, (1,))
    >>> print(str(report).splitlines()[0])
    specfx coverage: 2 of 3 batches pass every guard; failing: batch 1
    """

    total: int
    passed: int
    failed_batches: Tuple[int, ...]
    guards: Tuple[GuardCoverage, ...]

    @property
    def covered(self) -> bool:
        """Whether every batch ran with every guard holding."""
        return self.passed == self.total

    def __str__(self) -> str:
        failing = ", ".join(str(i) for i in self.failed_batches[:10]) + (
            ", ..." if len(self.failed_batches) > 10 else "")
        lines = [f"specfx coverage: {self.passed} of {self.total} batches pass every guard"
                 + (f"; failing: {'batches' if len(self.failed_batches) > 1 else 'batch'} {failing}"
                    if failing else "")]
        if not self.guards:
            lines.append("the graph has no guards: it serves every batch of this structure")
            return "\n".join(lines)
        unreached = any(row.not_reached for row in self.guards)
        header = ("#", "assumption", "held", "failed") + (("not reached",) if unreached else ()) + (
            "first failure", "location", "source")
        rows = []
        for number, row in enumerate(self.guards, 1):
            record = row.specialization
            first = "" if row.first_failure is None else f"batch {row.first_failure}: {row.seen}"
            rows.append((str(number), row.assumption, str(row.held), str(row.failed))
                        + ((str(row.not_reached),) if unreached else ())
                        + (first, record.where if record else "", record.source if record else ""))
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in (header, *rows)]
        return "\n".join(lines)


class _Tally:
    """Counts of one guard (or other check) while batches stream by."""

    __slots__ = ("held", "failed", "first", "value")

    def __init__(self) -> None:
        self.held = 0
        self.failed = 0
        self.first: Optional[int] = None
        self.value: Any = None

    def fail(self, index: int, value: Any) -> None:
        self.failed += 1
        if self.first is None:
            self.first, self.value = index, value


class _Batch:
    """The batch being checked, shared by the recorders."""

    __slots__ = ("index", "failure")

    def __init__(self) -> None:
        self.index = 0
        self.failure: Optional[str] = None  # the first failed assumption, in the user's terms


class _Stop(BaseException):
    """Ends a batch's run at its first failed guard on data (a BaseException, so that
    the generated code's handler for the model's ``try`` blocks lets it through)."""


class _Recorder:
    """Stands in for a guard node of the checking graphs: runs the guard, counts the
    answer, and for a guard on data stops the run when it fails."""

    def __init__(self, guard: Any, tally: _Tally, batch: _Batch, stop: bool, assumption: str) -> None:
        self.guard, self.tally, self.batch, self.stop, self.assumption = guard, tally, batch, stop, assumption
        self.__name__ = self.__qualname__ = guard.__name__  # read by the code generation
        self.__module__ = "specfx"

    def __call__(self, *args: Any) -> None:
        try:
            self.guard(*args)
        except GuardError as error:
            self.tally.fail(self.batch.index, error.actual)
            if self.batch.failure is None:
                self.batch.failure = f"{self.assumption} (seen {short_repr(error.actual)})"
            if self.stop:
                raise _Stop() from None
            return
        self.tally.held += 1


def _checking_module(gm: torch.fx.GraphModule, graph: torch.fx.Graph, recorders: Dict[str, _Recorder],
                     name: str) -> torch.fx.GraphModule:
    for node in graph.nodes:
        if node.op == "call_function" and node.name in recorders:
            node.target = recorders[node.name]
    module = torch.fx.GraphModule(gm, graph, name)
    if LIVE_MODEL in gm._modules:  # a Specializer's variant reads the live model
        module._modules[LIVE_MODEL] = gm._modules[LIVE_MODEL]
    return module


def _guard_nodes(graph: torch.fx.Graph) -> List[torch.fx.Node]:
    return [n for n in graph.nodes if n.op == "call_function" and n.target in GUARD_FUNCTIONS]


class GuardChecker:
    """Answers ``gm``'s guards on inputs (see the module docstring) and counts the
    answers per guard. One checker serves one stream of batches."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        if not isinstance(gm, torch.fx.GraphModule):
            raise TypeError(f"coverage() takes a GraphModule made by specfx.trace; got {type(gm).__name__}")
        records = {record.guard: record for record in _records(gm) if record.guard}
        guards = _guard_nodes(gm.graph)
        self._gm = gm
        self._batch = _Batch()
        self._rows = [(node.name, records.get(node.name)) for node in guards]
        self._tallies = {node.name: _Tally() for node in guards}
        self._other = {kind: _Tally() for kind in _OTHER_CHECKS}
        self._assumptions = {name: record.guard_description if record else _unrecorded(gm, name)
                             for name, record in self._rows}
        self._prologue, early = self._build_prologue(gm)
        late = [node for node in guards if node.name not in early]
        self._writes = writes_before(gm, set(late)) if late else Writes()
        self._late = self._build_late(gm, late, early) if late else None
        self._entry = self._build_entry(gm) if self._prologue is None and self._late is None else None
        self._paths = saved_paths(self._writes, gm) if self._writes else ()
        self._signature = inspect.signature(gm.forward)
        self.total = 0
        self.passed = 0
        self.failed_batches: List[int] = []

    def _build_prologue(self, gm: torch.fx.GraphModule) -> Tuple[Optional[torch.fx.GraphModule], set]:
        prologue = build_prologue(gm)
        if prologue is None:
            return None, set()
        early = {node.name for node in _guard_nodes(prologue.graph)}
        recorders = {name: _Recorder(self._guard_of(name), self._tallies[name], self._batch, False,
                                     self._assumptions[name]) for name in early}
        return _checking_module(gm, prologue.graph, recorders, "Prologue"), early

    def _guard_of(self, name: str) -> Any:
        return next(n.target for n in self._gm.graph.nodes if n.name == name)

    def _build_late(self, gm: torch.fx.GraphModule, late: List[torch.fx.Node], early: set) -> torch.fx.GraphModule:
        """``gm`` up to its last guard on data, without the guards the prologue answered."""
        graph = torch.fx.Graph()
        copies: Dict[torch.fx.Node, torch.fx.Node] = {}
        for node in gm.graph.nodes:
            if node.name not in early:
                copies[node] = graph.node_copy(node, lambda n: copies[n])
            if node is late[-1]:
                break
        graph.output(None)
        graph._codegen = entry_only(gm.graph._codegen)
        recorders = {node.name: _Recorder(node.target, self._tallies[node.name], self._batch, True,
                                          self._assumptions[node.name]) for node in late}
        return _checking_module(gm, graph, recorders, "GuardCheck")

    @staticmethod
    def _build_entry(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """A graph that only checks the inputs' structure (for graphs without guards)."""
        graph = torch.fx.Graph()
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                graph.node_copy(node)
        graph.output(None)
        graph._codegen = entry_only(gm.graph._codegen)
        return torch.fx.GraphModule(torch.nn.Module(), graph, "EntryCheck")

    def check(self, index: int, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Optional[str]:
        """Answer every guard on the batch ``(args, kwargs)``, numbered ``index``; return
        the first failed assumption in the user's terms, or None when all held."""
        batch = self._batch
        batch.index, batch.failure = index, None
        self.total += 1
        try:
            # the generated functions themselves: no hooks to run, and microseconds per batch saved
            if self._prologue is not None:
                self._prologue.forward(*args, **kwargs)
            elif self._entry is not None:
                self._entry.forward(*args, **kwargs)
            if batch.failure is None and self._late is not None:
                self._run_late(args, kwargs)
        except GuardError as error:  # not a guard node: the entry check, or a caught op
            first_line = str(error).splitlines()[0].replace("specfx guard failed: ", "")
            self._other.get(str(error.kind), self._other["error"]).fail(index, first_line)
            batch.failure = batch.failure or first_line
        except Exception as error:  # another number of arguments, or an op that raised on this batch
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as mismatch:
                text, kind = f"the batch does not fit forward{self._signature}: {mismatch}", "structure"
            else:
                text, kind = f"the graph raised {type(error).__name__}: {short_text(str(error))}", "error"
            self._other[kind].fail(index, text)
            batch.failure = batch.failure or text
        if batch.failure is not None:
            self.failed_batches.append(index)
            return batch.failure
        self.passed += 1
        for tally in self._other.values():
            tally.held += 1
        return None

    def _run_late(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        assert self._late is not None
        checkpoint = Checkpoint(self._writes, self._paths, args, kwargs, self._late) if self._writes else None
        try:
            self._late.forward(*args, **kwargs)
        except _Stop:
            pass
        finally:
            if checkpoint is not None:
                checkpoint.restore()

    def report(self) -> Coverage:
        """The counts so far."""
        rows = []
        for kind, tally in self._other.items():
            if tally.failed:
                # every batch that did not fail the entry check passed it
                held = self.total - tally.failed if kind == "structure" else tally.held
                rows.append(GuardCoverage(None, _OTHER_CHECKS[kind], held, tally.failed,
                                          self.total - held - tally.failed, tally.first, tally.value))
        for name, record in self._rows:
            tally = self._tallies[name]
            rows.append(GuardCoverage(record, self._assumptions[name], tally.held, tally.failed,
                                      self.total - tally.held - tally.failed, tally.first, tally.value))
        return Coverage(self.total, self.passed, tuple(self.failed_batches), tuple(rows))


def _records(gm: torch.fx.GraphModule) -> Tuple[Specialization, ...]:
    try:
        return specializations(gm)
    except TypeError:  # no records and no guards: a graph of torch.fx's, or traced without examples
        return ()


def _unrecorded(gm: torch.fx.GraphModule, name: str) -> str:
    node = next(n for n in gm.graph.nodes if n.name == name)
    return str(node.args[-2]) if len(node.args) >= 2 else name


def coverage(gm: torch.fx.GraphModule, batches: Iterable[Any], *, progress: Optional[bool] = None) -> Coverage:
    """Check a traced graph's guards on every batch of a calibration set and count,
    per guard, the batches on which it held and failed, the first failing batch and
    the value seen there.

    ``batches`` is anything a ``for`` loop takes (a DataLoader, a list, a one-shot
    generator), each item as a DataLoader yields it: a tensor, a tuple or list of
    positional arguments, a dict (or transformers ``BatchEncoding``) of keyword
    arguments, or a pair ``(args, kwargs)``. They are streamed: memory does not
    grow with their number. Guards on input metadata are answered without running
    the graph; the graph runs only up to its last guard on data, and anything that
    run writes (inputs, buffers, RNG) is put back. ``progress=None`` shows a tqdm
    bar on stderr when it is a terminal and the work takes over a second;
    ``True``/``False`` force it. Guards run in the caller's grad mode (calibrate
    under ``torch.no_grad()`` as usual).

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else x - 1
    >>> gm = specfx.trace(f, torch.ones(3), policy=specfx.Policy(bool=True))
    >>> report = specfx.coverage(gm, [torch.ones(3), -torch.ones(2), torch.ones(5)])
    >>> report.passed, report.failed_batches
    (2, (1,))
    >>> row = report.guards[0]
    >>> row.assumption, row.held, row.failed, row.first_failure, row.value_seen
    ('bool(x.sum() > 0) == True', 2, 1, 1, False)
    """
    progress = check_progress(progress)
    checker = GuardChecker(gm)
    if any(record.guard is None for record in _records(gm)):
        raise ValueError("this graph was traced with guards=False: it has no guards to check; "
                         "trace it again with guards=True (the default) to measure its coverage")
    for index, batch in enumerate(progress_bar(batches, progress, "coverage")):
        args, kwargs = as_call(batch)
        checker.check(index, args, kwargs)
    return checker.report()
