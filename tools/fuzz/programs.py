"""Random small PyTorch programs for differential fuzzing of ``specfx.trace``.

A program is a tree of ``nn.Module`` classes generated from a grammar of ops
(split/chunk/unbind with unpacking, ``*args`` and loops; ``len()``;
data-dependent ``if``/``while``; shape-dependent ``if`` and arithmetic;
``view(x.size(0), -1)``; ``.item()``/``int()``/``float()``; submodules,
``@specfx.specialize`` annotations and ``with specfx.specialize(...)``).
It is rendered as Python source twice:

* the *clean* source is what gets traced: real model code, registered in
  ``linecache`` under a ``<specfx-fuzz-...>`` name, so specfx's source
  locations and messages work as they do for a file;
* the *instrumented* twin computes the same thing eagerly but routes every
  value-demanding operation through a :class:`Probe`, which knows the
  policy in force at that point (trace policy, ``scopes``, annotations) and
  records what the program *needs* (``Need``: the flags any one of which lets
  the operation trace) and what a specializing tracer *bakes in*
  (``Facet``: the length, truth value, shape or number and the clean source
  line it comes from).

The probe is an independent model of the public API contract (the project's API.md):
each flag is decided by the innermost policy layer that names it (trace
policy, then per submodule entered its best-matching ``scopes`` pattern --
fewest wildcards, then longest -- and its ``@specialize``, then ``with``
blocks); ``a, b = t`` needs no flag; ``.item()`` feeding tensor arithmetic
needs none (it stays a node), ``int()``/``float()`` of data need ``SCALARS``,
``int()``/``range()`` of a shape-derived number need ``SHAPES``, a shape
predicate needs ``BOOL`` or ``SHAPES``. Under ``SHAPES`` every shape read is
baked in (``.shape`` as the whole shape, ``.size(d)`` as one dimension).

So each program comes with the flags it needs: ``Program.static_needs`` lists
every set of alternative flags some operation of the program may need, and
``Program.probe(plan, model, x).needs`` the needs along the path ``x`` takes,
each marked met or not under ``plan`` (``first_unmet`` is where a trace must
refuse). ``generate_inputs`` varies data, signs, batch, channels, length,
rank, dtype and contiguity around the example, so many inputs break guards.

Randomness comes from a *chooser* (``integer``/``choice``/``chance``):
:class:`RandomChooser` for ``tools/fuzz/run.py``, a hypothesis-backed one in
``tests/test_fuzz.py`` (so failures shrink). Import it as ``tools.fuzz.programs``
(see ``tools/__init__.py``); it needs only torch and specfx.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import io
import itertools
import linecache
import random
import re
import warnings
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import nn

import specfx
from specfx import Policy, Specialize

__all__ = [
    "Case", "Facet", "Need", "PolicyPlan", "Probe", "Program", "RandomChooser", "canonical",
    "first_difference", "generate_case", "generate_example", "generate_inputs", "generate_policy",
    "generate_program", "guard_functions", "make_tensor", "run", "same_output", "trace_quietly", "widen",
]

ITER, BOOL, SHAPES, SCALARS = Specialize.ITER_LEN, Specialize.BOOL, Specialize.SHAPES, Specialize.SCALARS
FLAGS = (ITER, BOOL, SHAPES, SCALARS)
KEYWORD = {ITER: "iter", BOOL: "bool", SHAPES: "shapes", SCALARS: "scalars"}
FLAG_OF = {keyword: flag for flag, keyword in KEYWORD.items()}
_counter = itertools.count()


# -- choosers ---------------------------------------------------------------------------------


class RandomChooser:
    """Choices drawn from a seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        """A uniform integer in ``[lo, hi]``."""
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[Any]) -> Any:
        """One of ``options``."""
        return options[self.rng.randrange(len(options))]

    def chance(self, p: float) -> bool:
        """True with probability ``p``."""
        return self.rng.random() < p


# -- policies ---------------------------------------------------------------------------------

Grant = Tuple[FrozenSet[Specialize], FrozenSet[Specialize]]  # (granted, denied)


def _keywords(grant: Grant) -> Dict[str, bool]:
    granted, denied = grant
    words = {KEYWORD[f]: True for f in FLAGS if f in granted}
    words.update({KEYWORD[f]: False for f in FLAGS if f in denied})
    return words


def _render_keywords(grant: Grant) -> str:
    return ", ".join(f"{k}={v}" for k, v in _keywords(grant).items())


def _render_annotation(ch: Any, grant: Grant) -> str:
    """``@specfx.specialize(...)`` with keywords, or (grants only) flags or a string."""
    granted, denied = grant
    form = "keywords" if denied or not granted else ch.choice(["keywords", "flags", "string"])
    if form == "flags":
        arguments = " | ".join(f"specfx.Specialize.{f.name}" for f in FLAGS if f in granted)
    elif form == "string":
        arguments = repr(",".join(KEYWORD[f] for f in FLAGS if f in granted))
    else:
        arguments = _render_keywords(grant)
    return f"@specfx.specialize({arguments})"


@dataclasses.dataclass(frozen=True)
class PolicyPlan:
    """A trace policy as plain data: base flags, ``scopes`` and ``annotations``."""

    base: FrozenSet[Specialize]
    scopes: Tuple[Tuple[str, Grant], ...] = ()
    annotations: bool = True
    param_shapes_constant: bool = False

    def policy(self) -> Policy:
        """The ``specfx.Policy`` this plan describes."""
        flags = Specialize.NONE
        for flag in self.base:
            flags |= flag
        scopes = {pattern: Policy(**_keywords(grant)) for pattern, grant in self.scopes}
        return Policy(flags, scopes=scopes, annotations=self.annotations,
                      param_shapes_constant=self.param_shapes_constant)

    def with_flag(self, flag: Specialize) -> "PolicyPlan":
        """This plan with ``flag`` added to the base flags."""
        return dataclasses.replace(self, base=self.base | {flag})

    def scope_for(self, qualname: str) -> Optional[Grant]:
        """The grant of the best pattern matching ``qualname`` (fewest wildcards, then longest)."""
        matches = [(p, g) for p, g in self.scopes if fnmatch.fnmatchcase(qualname, p)]
        if not matches:
            return None
        return max(matches, key=lambda m: _specificity(m[0]))[1]


def _apply(flags: FrozenSet[Specialize], grant: Grant) -> FrozenSet[Specialize]:
    granted, denied = grant
    return (flags - denied) | granted


# -- what the probe records -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Need:
    """An operation at clean source ``line`` that traces only if one of ``alternatives`` is granted."""

    line: int
    alternatives: FrozenSet[Specialize]
    met: bool


@dataclasses.dataclass(frozen=True)
class Facet:
    """A value a specializing tracer bakes in at ``line`` under ``flag`` (``NONE``: the code fixes it)."""

    line: int
    flag: Specialize
    kind: str
    value: Any


class Probe:
    """The ``R`` object of instrumented programs: tracks the policy layers in
    force and records needs and facets while the twin runs eagerly."""

    def __init__(self, plan: PolicyPlan, names: Dict[int, str]) -> None:
        self.plan = plan
        self.names = names
        self.stack: List[FrozenSet[Specialize]] = [frozenset(plan.base)]
        self.needs: List[Need] = []
        self.facets: List[Facet] = []
        self._concrete_items: Dict[int, bool] = {}
        self._seen: set = set()
        self.root_input: Optional[torch.Tensor] = None
        self._alive: List[Any] = []  # keeps subjects alive so their ids stay unique

    # layers
    @property
    def flags(self) -> FrozenSet[Specialize]:
        """The flags in force now."""
        return self.stack[-1]

    @contextlib.contextmanager
    def _pushed(self, grants: Sequence[Grant]) -> Iterator[None]:
        depth = len(self.stack)
        for grant in grants:
            self.stack.append(_apply(self.stack[-1], grant))
        try:
            yield
        finally:
            del self.stack[depth:]

    def module(self, module: nn.Module, annotation: Optional[Dict[str, bool]]) -> Any:
        """Enter ``module``'s forward: its ``scopes`` grant, then its annotation."""
        grants = []
        scope = self.plan.scope_for(self.names[id(module)]) if self.names[id(module)] else None
        if scope is not None:
            grants.append(scope)
        if annotation is not None and self.plan.annotations:
            grants.append(_grant_of(annotation))
        return self._pushed(grants)

    def layer(self, annotation: Dict[str, bool]) -> Any:
        """Enter an annotated helper or a ``with specfx.specialize(...)`` block."""
        return self._pushed([_grant_of(annotation)] if self.plan.annotations else [])

    # records
    def _need(self, line: int, *alternatives: Specialize, met: bool = False) -> None:
        met = met or any(a in self.flags for a in alternatives)
        self.needs.append(Need(line, frozenset(alternatives), met))

    def _facet(self, line: int, flag: Specialize, kind: str, value: Any, subject: Any = None) -> None:
        # A tracer decides each property of a graph node once: the same eager object read
        # twice (``len(parts)`` after ``for p in parts``) is one decision. The empty tuple is
        # an exception: CPython shares one ``()`` object, so ``parts[1:]`` of two different
        # one-element tuples is the same object though each is its own graph node and decision.
        if subject is not None and not (type(subject) is tuple and not subject):
            key = (id(subject), kind)
            if key in self._seen:
                return
            self._seen.add(key)
            self._alive.append(subject)
        self.facets.append(Facet(line, flag, kind, canonical(value)))

    @property
    def first_unmet(self) -> Optional[Need]:
        """The first operation the policy does not allow, or None."""
        return next((n for n in self.needs if not n.met), None)

    # value-demanding operations
    def truth(self, line: int, value: Any, shape: Any = False) -> bool:
        """``if``/``while``/``and``/``assert`` on ``value`` (``shape``: computed from shapes;
        ``"param"``: from a parameter's shape)."""
        truth = bool(value)
        if shape:
            psc = shape == "param" and self.plan.param_shapes_constant
            self._need(line, BOOL, SHAPES, met=psc)
            if SHAPES in self.flags or psc:
                return truth  # the shape read was baked in; the predicate is plain Python
        else:
            self._need(line, BOOL)
        # a predicate tensor (or tuple) tested twice is one graph node, decided once
        subject = value if isinstance(value, (torch.Tensor, tuple)) else None
        self._facet(line, BOOL, "bool", truth, subject)
        return truth

    def shape(self, line: int, tensor: torch.Tensor) -> torch.Size:
        """``tensor.shape``."""
        if SHAPES in self.flags:
            self._facet(line, SHAPES, "shape", tuple(tensor.shape), tensor)
        return tensor.shape

    def param_size(self, line: int, param: torch.Tensor, dim: int) -> int:
        """``param.shape[dim]`` of a module parameter: only that dimension is decided."""
        if SHAPES in self.flags or self.plan.param_shapes_constant:
            flag = SHAPES if SHAPES in self.flags else Specialize.NONE
            self._facet(line, flag, f"size({dim})", param.size(dim), param)
        return param.size(dim)

    def is_tensor(self, line: int, value: Any) -> bool:
        """``isinstance(value, torch.Tensor)``: decided (and guarded) when ``value`` is the input."""
        if value is self.root_input:
            self._facet(line, Specialize.NONE, "type", "torch.Tensor", value)  # its exact class is guarded
        return isinstance(value, torch.Tensor)

    def size(self, line: int, tensor: torch.Tensor, dim: int) -> int:
        """``tensor.size(dim)``."""
        if SHAPES in self.flags:
            self._facet(line, SHAPES, f"size({dim})", tensor.size(dim), tensor)
        return tensor.size(dim)

    def ndim(self, line: int, tensor: torch.Tensor) -> int:
        """``tensor.dim()``."""
        if SHAPES in self.flags:
            self._facet(line, SHAPES, "ndim", tensor.dim(), tensor)
        return tensor.dim()

    def numel(self, line: int, tensor: torch.Tensor) -> int:
        """``tensor.numel()``."""
        if SHAPES in self.flags:
            self._facet(line, SHAPES, "numel", tensor.numel(), tensor)
        return tensor.numel()

    def shape_number(self, line: int, value: int) -> int:
        """``int()`` / ``range()`` of a number computed from shapes."""
        self._need(line, SHAPES)
        return value

    def iter(self, line: int, seq: Any, shape: bool = False,
             alternative: Optional[Specialize] = None) -> Any:
        """Iterating over ``seq`` (loop, ``*seq``, ``list(seq)``, starred unpacking);
        ``shape``: ``seq`` is a shape (a plain tuple under SHAPES); ``alternative``: another
        flag that made ``seq`` a plain Python value (checked by the caller)."""
        if shape:
            self._need(line, ITER, SHAPES)
            if SHAPES in self.flags:
                return seq
        else:
            self._need(line, ITER, *([alternative] if alternative else []))
        self._facet(line, ITER, "len", len(seq), seq)
        return seq

    def len(self, line: int, seq: Any) -> int:
        """``len(seq)``."""
        self._need(line, ITER)
        self._facet(line, ITER, "len", len(seq), seq)
        return len(seq)

    def unpack(self, line: int, seq: Any, shape: bool = False) -> Any:
        """``a, b = seq``: the code fixes the count (eager raises on another)."""
        if not (shape and SHAPES in self.flags):
            self._facet(line, Specialize.NONE, "len", len(seq), seq)
        return seq

    def number(self, line: int, value: torch.Tensor, kind: str) -> Any:
        """``int(t)`` / ``float(t)`` of tensor data."""
        result = {"int": int, "float": float}[kind](value)
        self._need(line, SCALARS)
        self._facet(line, SCALARS, kind, result)
        return result

    def item(self, line: int, value: torch.Tensor) -> Any:
        """``t.item()``: a Python number under SCALARS, else a graph node."""
        result = value.item()
        self._concrete_items[line] = SCALARS in self.flags
        if SCALARS in self.flags:
            self._facet(line, SCALARS, "item", result)
        return result

    def tolist(self, line: int, value: torch.Tensor) -> Any:
        """``t.tolist()``: a Python list under SCALARS, else a graph node."""
        result = value.tolist()
        self._concrete_items[line] = SCALARS in self.flags
        if SCALARS in self.flags:
            self._facet(line, SCALARS, "tolist", result)
        return result

    def iter_list(self, line: int, list_line: int, value: Any) -> Any:
        """Iterating over ``v`` where ``v = t.tolist()`` at ``list_line``."""
        if self._concrete_items[list_line]:
            self._need(line, ITER, SCALARS)
            return value
        return self.iter(line, value, alternative=SCALARS)

    def item_truth(self, line: int, item_line: int, value: Any) -> bool:
        """``if v:`` where ``v = t.item()`` at ``item_line``."""
        self._need(line, BOOL, SCALARS)
        if not self._concrete_items[item_line]:
            self._facet(line, BOOL, "bool", bool(value))
        return bool(value)


def canonical(value: Any) -> Any:
    """A baked-in value in a form that compares and hashes by value and type (NaN equals NaN,
    lists are tuples, and a number keeps its type: ``.item()`` of an int64 tensor is ``2``
    where a float tensor's is ``2.0``, which eager computes with differently)."""
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if type(value) in (bool, int, float, complex):
        return (type(value).__name__, "nan" if value != value else value)
    return value


def _grant_of(annotation: Dict[str, bool]) -> Grant:
    granted = frozenset(FLAG_OF[k] for k, v in annotation.items() if v)
    denied = frozenset(FLAG_OF[k] for k, v in annotation.items() if not v)
    return granted, denied


# -- rendering --------------------------------------------------------------------------------

Row = Tuple[Optional[str], Optional[str]]  # (clean line, instrumented line); None = absent
_TOKEN = re.compile(r"@L(\d+)@")


class Writer:
    """Appends rows of both renderings at an indentation (the instrumented one may be deeper)."""

    def __init__(self, rows: List[Row], clean: int, instr: int) -> None:
        self.rows, self.clean, self.instr = rows, clean, instr

    def both(self, clean: str, instr: Optional[str] = None) -> None:
        """One line in both renderings (``instr`` defaults to ``clean``)."""
        instr = clean if instr is None else instr
        self.rows.append(("    " * self.clean + clean, "    " * self.instr + instr))

    def clean_only(self, clean: str) -> None:
        """A line only the traced program has (a decorator)."""
        self.rows.append(("    " * self.clean + clean, None))

    def instr_only(self, instr: str) -> "Writer":
        """A block header only the twin has; returns the writer for its body."""
        self.rows.append((None, "    " * self.instr + instr))
        return Writer(self.rows, self.clean, self.instr + 1)

    def nested(self) -> "Writer":
        """The writer for a block body in both renderings."""
        return Writer(self.rows, self.clean + 1, self.instr + 1)


@dataclasses.dataclass
class ModuleDraft:
    """What a generated module class needs besides its forward body."""

    name: str
    annotation: Optional[Dict[str, bool]]
    on_class: bool
    # attribute -> (class name, ModuleList length; 0 for a single submodule)
    children: Dict[str, Tuple[str, int]] = dataclasses.field(default_factory=dict)
    params: Dict[str, float] = dataclasses.field(default_factory=dict)
    leaf: bool = False
    vec: bool = False
    cat_all: bool = False
    helpers: List[Tuple[str, Dict[str, bool], List[Row]]] = dataclasses.field(default_factory=list)


class Context:
    """Generation state: the chooser, fresh names, line tokens, classes, static needs."""

    def __init__(self, chooser: Any) -> None:
        self.ch = chooser
        self.names = itertools.count()
        self.tokens = itertools.count()
        self.classes: List[List[Row]] = []
        self.class_count = itertools.count(1)
        self.static_needs: set = set()

    def fresh(self, prefix: str) -> str:
        """A variable name not used before in this program."""
        return f"{prefix}{next(self.names)}"

    def token(self) -> str:
        """A placeholder for the clean line number of the next decision line."""
        return f"@L{next(self.tokens)}@"

    def needs(self, *alternatives: Specialize) -> None:
        """Note statically that the program may need one of ``alternatives``."""
        self.static_needs.add(frozenset(alternatives))


def _emit_decision(w: Writer, ctx: Context, clean: str, instr_of: Callable[[str], str]) -> None:
    token = ctx.token()
    w.both(clean + f"  #{token}", instr_of(token))  # the comment tags the clean line; stripped later


ELEMENTWISE = [
    "h = h * 2", "h = -h", "h = h.relu()", "h = torch.tanh(h)", "h = h + 1", "h = h.flip(1)",
    "h = h - h.mean(dim=1, keepdim=True)", "h = h.cumsum(1) * 0.5",
]
DATA_PREDICATES = ["h.sum() > 0", "h.max() > 1.0", "h.mean() < 0", "(h > 0).any()", "h.abs().max() > 2"]


def _shape_read(ctx: Context) -> Tuple[str, Callable[[str], str]]:
    """A shape-derived predicate: (clean, instrumented given a token)."""
    kind = ctx.ch.choice(["shape0", "size1", "dim", "sizelast", "numel"])
    if kind == "shape0":
        return "h.shape[0] > 1", lambda t: f"R.size({t}, h, 0) > 1"  # specfx guards only dim 0
    if kind == "size1":
        return "h.size(1) % 2 == 0", lambda t: f"R.size({t}, h, 1) % 2 == 0"
    if kind == "dim":
        return "h.dim() == 3", lambda t: f"R.ndim({t}, h) == 3"
    if kind == "sizelast":
        return "h.size(-1) >= 3", lambda t: f"R.size({t}, h, -1) >= 3"
    return "h.numel() > 8", lambda t: f"R.numel({t}, h) > 8"


def _statement(w: Writer, ctx: Context, draft: ModuleDraft, depth: int) -> None:
    """Emit one random statement that maps ``h`` to a new ``h``."""
    ch = ctx.ch
    kinds = ["elementwise", "data_if", "shape_if", "split_iter", "unpack", "shape_math", "scalar"]
    if depth < 2:
        kinds += ["data_if", "while", "and_if", "len_if", "with", "helper"]
    if depth < 2 and len(ctx.classes) < 4:
        kinds += ["submodule"]
    kinds += ["param", "leaf", "setitem", "extra"]
    kind = ch.choice(kinds)
    if kind == "elementwise":
        w.both(ch.choice(ELEMENTWISE))
    elif kind == "param":
        attr = f"scale{len(draft.params)}"
        draft.params[attr] = ch.choice([0.5, 1.25, -1.5])
        w.both(f"h = h * self.{attr}")
    elif kind == "leaf":
        draft.leaf = True
        w.both("h = self.act(h)")
    elif kind == "extra":
        _extra(w, ctx, draft, depth)
    elif kind == "setitem":
        w.both("h = h.clone()")
        w.both("h[:, :1] = h[:, :1] * 3")
    elif kind in ("data_if", "shape_if", "and_if"):
        if kind == "data_if":
            pred = ch.choice(DATA_PREDICATES)
            clean, instr = pred, (lambda t, p=pred: f"R.truth({t}, {p})")
            ctx.needs(BOOL)
        elif kind == "shape_if":
            clean, read = _shape_read(ctx)
            instr = lambda t: f"R.truth({t}, {read(t)}, shape=True)"  # noqa: E731
            ctx.needs(BOOL, SHAPES)
        else:
            read_clean, read = _shape_read(ctx)
            pred = ch.choice(DATA_PREDICATES)
            clean = f"{read_clean} and {pred}"
            instr = lambda t: f"R.truth({t}, {read(t)}, shape=True) and R.truth({t}, {pred})"  # noqa: E731
            ctx.needs(BOOL, SHAPES)
            ctx.needs(BOOL)
        if ch.chance(0.25):
            op_a, op_b = ch.choice(["h * 2", "h.relu()", "h + 1"]), ch.choice(["h - 1", "-h", "h.flip(1)"])
            _emit_decision(w, ctx, f"h = {op_a} if {clean} else {op_b}",
                           lambda t: f"h = {op_a} if {instr(t)} else {op_b}")
            return
        _emit_decision(w, ctx, f"if {clean}:", lambda t: f"if {instr(t)}:")
        _body(w.nested(), ctx, draft, depth + 1, ch.integer(1, 2))
        if ch.chance(0.6):
            w.both("else:")
            _body(w.nested(), ctx, draft, depth + 1, ch.integer(1, 2))
    elif kind == "while":
        i = ctx.fresh("i")
        w.both(f"{i} = 0")
        pred = ch.choice(["h.abs().max() > 2", "h.sum() > 1", "h.mean() > 0.2"])
        ctx.needs(BOOL)
        _emit_decision(w, ctx, f"while {i} < 3 and {pred}:",
                       lambda t: f"while {i} < 3 and R.truth({t}, {pred}):")
        inner = w.nested()
        inner.both(ch.choice(["h = h * 0.5", "h = h - 1"]))
        inner.both(f"{i} += 1")
    elif kind == "len_if":
        parts = ctx.fresh("parts")
        w.both(f"{parts} = torch.split(h, {ch.integer(1, 3)}, dim=1)")
        ctx.needs(ITER)
        _emit_decision(w, ctx, f"if len({parts}) > 2:", lambda t: f"if R.len({t}, {parts}) > 2:")
        _body(w.nested(), ctx, draft, depth + 1, 1)
        w.both("else:")
        w.nested().both(f"h = torch.cat({parts}[::-1], dim=1)")
    elif kind == "split_iter":
        _split_iter(w, ctx, draft)
    elif kind == "unpack":
        form = ch.choice(["chunk2", "split_sizes"])
        a, b = ctx.fresh("a"), ctx.fresh("b")
        call = "torch.chunk(h, 2, dim=1)" if form == "chunk2" else "torch.split(h, [1, h.size(1) - 1], dim=1)"
        instr_call = call.replace("h.size(1)", "R.size(@T@, h, 1)")
        _emit_decision(w, ctx, f"{a}, {b} = {call}",
                       lambda t: f"{a}, {b} = R.unpack({t}, {instr_call.replace('@T@', t)})")
        w.both(f"h = torch.cat([{b}, {a} * 2], dim=1)")
    elif kind == "shape_math":
        _shape_math(w, ctx)
    elif kind == "scalar":
        _scalar(w, ctx)
    elif kind == "with":
        grant = _random_annotation(ch)
        words = ", ".join(f"{k}={v}" for k, v in grant.items())
        w.clean_only(f"with specfx.specialize({words}):")
        body = w.instr_only(f"with R.layer({grant!r}):")
        body.clean += 1
        _body(body, ctx, draft, depth + 1, ch.integer(1, 2))
    elif kind == "helper":
        name = ctx.fresh("gate")  # reserved before the body, which may define helpers of its own
        grant = _random_annotation(ch)
        rows: List[Row] = []
        hw = Writer(rows, 2, 2)
        _body(hw.instr_only(f"with R.layer({grant!r}):"), ctx, draft, depth + 1, ch.integer(1, 2))
        draft.helpers.append((name, grant, rows))
        w.both(f"h = self.{name}(h)")
    elif kind == "submodule":
        if ch.chance(0.35):
            cls = _module_class(ctx, depth + 1)
            attr = f"blocks{len(draft.children)}"
            draft.children[attr] = (cls, ch.integer(2, 3))
            w.both(f"for blk in self.{attr}:")
            w.nested().both("h = blk(h)")
        else:
            cls = _module_class(ctx, depth + 1)
            attr = f"sub{len(draft.children)}"
            draft.children[attr] = (cls, 0)
            w.both(f"h = self.{attr}(self.{attr}(h))" if ch.chance(0.2) else f"h = self.{attr}(h)")


def _extra(w: Writer, ctx: Context, draft: ModuleDraft, depth: int) -> None:
    """Rarer forms: isinstance of the input, parameter shapes, not/or, a reused predicate,
    truth of a tuple, ``*`` in a list display, ``range(len(...))``, ``.item()`` in a loop condition."""
    ch = ctx.ch
    form = ch.choice(["isinstance", "param_shape", "not_or", "tuple_truth", "star_list", "range_len",
                      "item_while", "reused_predicate"])
    if form == "isinstance":
        _emit_decision(w, ctx, "if isinstance(h, torch.Tensor):", lambda t: f"if R.is_tensor({t}, h):")
        w.nested().both(ch.choice(ELEMENTWISE))
    elif form == "reused_predicate":
        c = ctx.fresh("c")
        w.both(f"{c} = {ch.choice(DATA_PREDICATES)}")
        ctx.needs(BOOL)
        _emit_decision(w, ctx, f"if {c}:", lambda t: f"if R.truth({t}, {c}):")
        w.nested().both(ch.choice(ELEMENTWISE))
        _emit_decision(w, ctx, f"h = h * 2 if {c} else h - 1",
                       lambda t: f"h = h * 2 if R.truth({t}, {c}) else h - 1")
    elif form == "param_shape":
        draft.vec = True
        ctx.needs(BOOL, SHAPES)
        _emit_decision(w, ctx, "if self.vec.shape[0] > 2:",
                       lambda t: f"if R.truth({t}, R.param_size({t}, self.vec, 0) > 2, shape='param'):")
        w.nested().both("h = h * self.vec.sum() + self.vec[0]")
    elif form == "not_or":
        first, second = ch.choice(DATA_PREDICATES), ch.choice(DATA_PREDICATES)
        ctx.needs(BOOL)
        _emit_decision(w, ctx, f"if not ({first}) or {second}:",
                       lambda t: f"if not R.truth({t}, {first}) or R.truth({t}, {second}):")
        w.nested().both(ch.choice(ELEMENTWISE))
    elif form == "tuple_truth":
        parts = ctx.fresh("parts")
        w.both(f"{parts} = torch.split(h, {ch.integer(1, 3)}, dim=1)")
        ctx.needs(BOOL)
        _emit_decision(w, ctx, f"if {parts}:", lambda t: f"if R.truth({t}, {parts}):")
        w.nested().both(f"h = torch.cat({parts}[::-1], dim=1)")
    elif form == "star_list":
        parts = ctx.fresh("parts")
        w.both(f"{parts} = torch.chunk(h, {ch.integer(2, 3)}, dim=1)")
        ctx.needs(ITER)
        _emit_decision(w, ctx, f"h = torch.cat([*{parts}, h], dim=1)",
                       lambda t: f"h = torch.cat([*R.iter({t}, {parts}), h], dim=1)")
    elif form == "range_len":
        parts, acc = ctx.fresh("parts"), ctx.fresh("acc")
        w.both(f"{parts} = torch.split(h, {ch.integer(1, 3)}, dim=1)")
        w.both(f"{acc} = h.sum() * 0")
        ctx.needs(ITER)
        _emit_decision(w, ctx, f"for i in range(len({parts})):",
                       lambda t: f"for i in range(R.len({t}, {parts})):")
        w.nested().both(f"{acc} = {acc} + {parts}[i].sum() * (i + 1)")
        w.both(f"h = h + {acc}")
    else:
        i = ctx.fresh("i")
        w.both(f"{i} = 0")
        ctx.needs(BOOL, SCALARS)
        _emit_decision(
            w, ctx, f"while {i} < 3 and h.abs().max().item() > 1.5:",
            lambda t: f"while {i} < 3 and R.item_truth({t}, {t}, R.item({t}, h.abs().max()) > 1.5):",
        )
        inner = w.nested()
        inner.both("h = h * 0.5")
        inner.both(f"{i} += 1")


def _split_iter(w: Writer, ctx: Context, draft: ModuleDraft) -> None:
    ch = ctx.ch
    parts = ctx.fresh("parts")
    splitter = ch.choice([f"torch.split(h, {ch.integer(1, 3)}, dim=1)",
                          f"torch.chunk(h, {ch.integer(2, 3)}, dim=1)"])
    w.both(f"{parts} = {splitter}")
    form = ch.choice(["enumerate", "star", "len", "unbind", "starred_unpack", "zip", "list", "direct"])
    if form == "direct":  # no iteration at all: stays symbolic
        w.both(f"h = torch.cat({parts}[::-1], dim=1)")
        return
    ctx.needs(ITER)
    if form == "enumerate":
        _emit_decision(
            w, ctx, f"h = torch.cat([p * (i + 1) for i, p in enumerate({parts})], dim=1)",
            lambda t: f"h = torch.cat([p * (i + 1) for i, p in enumerate(R.iter({t}, {parts}))], dim=1)",
        )
    elif form == "star":
        draft.cat_all = True
        _emit_decision(w, ctx, f"h = self.cat_all(*{parts}[::-1])",
                       lambda t: f"h = self.cat_all(*R.iter({t}, {parts}[::-1]))")
    elif form == "len":
        _emit_decision(w, ctx, f"h = h * len({parts})", lambda t: f"h = h * R.len({t}, {parts})")
    elif form == "unbind":
        acc = ctx.fresh("acc")
        w.both(f"{acc} = h.sum(dim=1) * 0")
        _emit_decision(w, ctx, "for i, r in enumerate(torch.unbind(h, dim=1)):",
                       lambda t: f"for i, r in enumerate(R.iter({t}, torch.unbind(h, dim=1))):")
        w.nested().both(f"{acc} = {acc} + r * (i % 2 * 2 - 1)")
        w.both(f"h = h + {acc}.unsqueeze(1)")
    elif form == "starred_unpack":
        first, rest = ctx.fresh("first"), ctx.fresh("rest")
        _emit_decision(w, ctx, f"{first}, *{rest} = {parts}",
                       lambda t: f"{first}, *{rest} = R.iter({t}, {parts})")
        w.both(f"h = torch.cat([*{rest}, {first} * 3], dim=1)")
    elif form == "zip":
        acc = ctx.fresh("acc")
        w.both(f"{acc} = h.sum() * 0")
        _emit_decision(w, ctx, f"for p, q in zip({parts}, {parts}[1:]):",
                       lambda t: f"for p, q in zip(R.iter({t}, {parts}), R.iter({t}, {parts}[1:])):")
        w.nested().both(f"{acc} = {acc} + p.sum() - 2 * q.sum()")
        w.both(f"h = h + {acc}")
    else:  # list
        _emit_decision(w, ctx, "h = torch.stack(list(torch.unbind(h, dim=1))[::-1], dim=1)",
                       lambda t: f"h = torch.stack(list(R.iter({t}, torch.unbind(h, dim=1)))[::-1], dim=1)")


def _shape_math(w: Writer, ctx: Context) -> None:
    ch = ctx.ch
    form = ch.choice(["half", "view", "reshape", "mul", "catcol", "int_size", "range", "unpack_shape",
                      "size_star"])
    if form == "half":
        _emit_decision(w, ctx, "h = h[:, : h.size(1) // 2 + 1]",
                       lambda t: f"h = h[:, : R.size({t}, h, 1) // 2 + 1]")
    elif form == "view":
        _emit_decision(w, ctx, "h = h.view(h.size(0), -1)", lambda t: f"h = h.view(R.size({t}, h, 0), -1)")
    elif form == "reshape":
        _emit_decision(w, ctx, "h = h.reshape(h.shape[0], h.shape[1], -1)",
                       lambda t: f"h = h.reshape(R.size({t}, h, 0), R.size({t}, h, 1), -1)")
    elif form == "mul":
        # the size is computed into a value stored in `h`: read when the graph runs, under SHAPES too
        w.both("h = h * (h.size(1) % 3 + 1)")
    elif form == "catcol":
        w.both("h = torch.cat([h, h[:, :1]], dim=1)")
    elif form == "int_size":
        n = ctx.fresh("n")
        ctx.needs(SHAPES)
        read = ch.choice(["h.shape[1]", "h.size(1)"])
        instr_read = "R.size(@T@, h, 1)"  # `h.shape[1]` is read (and guarded) like `h.size(1)`
        _emit_decision(w, ctx, f"{n} = int({read} // 2)",
                       lambda t: f"{n} = R.shape_number({t}, {instr_read.replace('@T@', t)} // 2)")
        w.both(f"h = h[:, :{n} + 1] * ({n} + 1)")
    elif form == "unpack_shape":
        b, c = ctx.fresh("b"), ctx.fresh("c")
        _emit_decision(w, ctx, f"{b}, {c} = h.shape[:2]",
                       lambda t: f"{b}, {c} = R.unpack({t}, R.shape({t}, h)[:2], shape=True)")
        w.both(f"h = h.reshape({b}, -1).flip(1).reshape({b}, {c}, -1)")
    elif form == "size_star":
        n, rest = ctx.fresh("n"), ctx.fresh("rest")
        ctx.needs(ITER, SHAPES)
        _emit_decision(w, ctx, f"{n}, *{rest} = h.size()",
                       lambda t: f"{n}, *{rest} = R.iter({t}, R.shape({t}, h), shape=True)")
        w.both(f"h = h.view({n}, -1) * len({rest})")
    else:
        ctx.needs(SHAPES)
        _emit_decision(w, ctx, "for i in range(h.size(0) % 3):",
                       lambda t: f"for i in range(R.shape_number({t}, R.size({t}, h, 0) % 3)):")
        w.nested().both("h = h + h.roll(i + 1, 1) * 0.5")


def _scalar(w: Writer, ctx: Context) -> None:
    ch = ctx.ch
    form = ch.choice(["item_div", "item_mod", "int_flag", "int_count", "float_clamp", "item_if", "tolist"])
    if form == "item_div":
        s = ctx.fresh("s")
        _emit_decision(w, ctx, f"{s} = h.abs().max().item()", lambda t: f"{s} = R.item({t}, h.abs().max())")
        w.both(f"h = h / ({s} + 1.0)")
    elif form == "item_mod":  # the number's type reaches the output: an int keeps an int64 h int64
        s = ctx.fresh("s")
        _emit_decision(w, ctx, f"{s} = h.sum().item()", lambda t: f"{s} = R.item({t}, h.sum())")
        w.both(f"h = h + {s} % 3")
    elif form == "int_flag":
        k = ctx.fresh("k")
        ctx.needs(SCALARS)
        _emit_decision(w, ctx, f"{k} = int(h.mean() > 0) + 1",
                       lambda t: f"{k} = R.number({t}, h.mean() > 0, 'int') + 1")
        w.both(f"h = torch.cat(torch.split(h, {k}, dim=1)[::-1], dim=1) * {k}")
    elif form == "int_count":
        k = ctx.fresh("k")
        ctx.needs(SCALARS)
        _emit_decision(w, ctx, f"{k} = int((h > 0).sum()) % 3 + 1",
                       lambda t: f"{k} = R.number({t}, (h > 0).sum(), 'int') % 3 + 1")
        w.both(f"h = torch.cat(torch.split(h, {k}, dim=1)[::-1], dim=1)")
    elif form == "float_clamp":
        v = ctx.fresh("v")
        ctx.needs(SCALARS)
        _emit_decision(w, ctx, f"{v} = float(h.abs().mean())",
                       lambda t: f"{v} = R.number({t}, h.abs().mean(), 'float')")
        w.both(f"h = h.clamp(-{v}, {v} + 0.5)")
    elif form == "tolist":
        vals, list_token = ctx.fresh("vals"), ctx.token()
        w.both(f"{vals} = h.flatten()[:2].tolist()  #{list_token}",
               f"{vals} = R.tolist({list_token}, h.flatten()[:2])")
        ctx.needs(ITER, SCALARS)
        _emit_decision(w, ctx, f"h = h * (1 + sum({vals}))",
                       lambda t: f"h = h * (1 + sum(R.iter_list({t}, {list_token}, {vals})))")
    else:
        flag = ctx.fresh("flag")
        item_token = ctx.token()
        w.both(f"{flag} = (h.sum() > 0).item()  #{item_token}",
               f"{flag} = R.item({item_token}, (h.sum() > 0))")
        ctx.needs(BOOL, SCALARS)
        _emit_decision(w, ctx, f"if {flag}:", lambda t: f"if R.item_truth({t}, {item_token}, {flag}):")
        w.nested().both(ch.choice(ELEMENTWISE))


def _body(w: Writer, ctx: Context, draft: ModuleDraft, depth: int, count: int) -> None:
    for _ in range(count):
        _statement(w, ctx, draft, depth)


def _random_annotation(ch: Any) -> Dict[str, bool]:
    words = {}
    for keyword in ("iter", "bool", "shapes", "scalars"):
        if ch.chance(0.35):
            words[keyword] = ch.chance(0.75)
    return words or {ch.choice(["iter", "bool", "scalars"]): True}


def _module_class(ctx: Context, depth: int, *, root: bool = False) -> str:
    """Generate one module class (children first) and return its name."""
    ch = ctx.ch
    name = "Root" if root else f"Block{next(ctx.class_count)}"
    annotation = _random_annotation(ch) if ch.chance(0.3 if root else 0.45) else None
    draft = ModuleDraft(name, annotation, on_class=annotation is not None and ch.chance(0.3))
    body: List[Row] = []
    fw = Writer(body, 2, 3)
    _body(fw, ctx, draft, depth, ch.integer(2, 4) if root else ch.integer(1, 3))
    if root and ch.chance(0.3):
        fw.both("return h, h.abs().sum()")
    else:
        fw.both("return h")
    rows: List[Row] = []
    top = Writer(rows, 0, 0)
    if draft.annotation is not None and draft.on_class:
        top.clean_only(_render_annotation(ch, _grant_of(draft.annotation)))
    top.both(f"class {name}(nn.Module):")
    cls = top.nested()
    if draft.children or draft.params or draft.leaf or draft.vec:
        cls.both("def __init__(self):")
        init = cls.nested()
        init.both("super().__init__()")
        for attr, value in draft.params.items():
            init.both(f"self.{attr} = nn.Parameter(torch.tensor({value}))")
        for attr, (child, n) in draft.children.items():
            made = f"nn.ModuleList([{child}() for _ in range({n})])" if n else f"{child}()"
            init.both(f"self.{attr} = {made}")
        if draft.leaf:
            init.both("self.act = nn.ReLU()")
        if draft.vec:
            init.both("self.vec = nn.Parameter(torch.linspace(-1.0, 1.0, 3))")
    if draft.cat_all:
        cls.both("def cat_all(self, *ps):")
        cls.nested().both("return torch.cat(ps, dim=1)")
    for helper, grant, helper_rows in draft.helpers:
        cls.clean_only(_render_annotation(ch, _grant_of(grant)))
        cls.both(f"def {helper}(self, h):")
        rows.extend(helper_rows)
        Writer(rows, 2, 3).both("return h")
    if draft.annotation is not None and not draft.on_class:
        cls.clean_only(_render_annotation(ch, _grant_of(draft.annotation)))
    cls.both("def forward(self, x):" if root else "def forward(self, h):")
    cls.nested().instr_only(f"with R.module(self, {draft.annotation!r}):")
    if root:
        Writer(rows, 2, 3).both("h = x")
    rows.extend(body)
    ctx.classes.append(rows)
    return name


# -- programs ---------------------------------------------------------------------------------

HEADER = "import torch\nimport specfx\nfrom torch import nn\n\n"


@dataclasses.dataclass
class Program:
    """A generated model: its clean and instrumented source and what it may need."""

    source: str
    instrumented: str
    filename: str
    static_needs: FrozenSet[FrozenSet[Specialize]]

    def build(self) -> nn.Module:
        """A fresh instance of the clean model (its source is in ``linecache``)."""
        namespace: Dict[str, Any] = {"__name__": self.filename}
        exec(compile(self.source, self.filename, "exec"), namespace)
        return namespace["Root"]()

    def probe(self, plan: PolicyPlan, model: nn.Module, x: torch.Tensor) -> Tuple[Probe, Any]:
        """Run the instrumented twin (with ``model``'s parameters) on ``x``: (probe, output)."""
        namespace: Dict[str, Any] = {"__name__": self.filename + "-instrumented"}
        exec(compile(self.instrumented, self.filename + "-instrumented", "exec"), namespace)
        twin = namespace["Root"]()
        twin.load_state_dict(model.state_dict())
        probe = Probe(plan, {id(m): name for name, m in twin.named_modules()})
        probe.root_input = x.clone()
        namespace["R"] = probe
        with torch.no_grad():
            output = twin(probe.root_input)
        return probe, output

    def module_names(self, model: nn.Module) -> List[str]:
        """Qualified names of the generated (non-leaf) submodules of ``model``."""
        return [n for n, m in model.named_modules() if n and type(m).__module__ == self.filename]


def generate_program(ch: Any, *, tag: str = "") -> Program:
    """A random program (``tag`` goes into its file name)."""
    ctx = Context(ch)
    _module_class(ctx, 0, root=True)
    rows = [row for cls in ctx.classes for row in cls + [("", "")]]
    clean_lines, instr_lines, token_line = HEADER.splitlines(), HEADER.splitlines(), {}
    for clean, instr in rows:
        if clean is not None:
            match = _TOKEN.search(clean)
            if match:
                token_line[match.group(0)] = len(clean_lines) + 1
                clean = clean[: clean.index("  #@L")]
            clean_lines.append(clean)
        if instr is not None:
            instr_lines.append(instr)
    instrumented = _TOKEN.sub(lambda m: str(token_line[m.group(0)]), "\n".join(instr_lines) + "\n")
    source = "\n".join(clean_lines) + "\n"
    filename = f"<specfx-fuzz{tag}>" if tag else f"<specfx-fuzz-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return Program(source, instrumented, filename, frozenset(ctx.static_needs))


def generate_policy(ch: Any, program: Program, model: nn.Module) -> PolicyPlan:
    """A random policy whose ``scopes`` patterns all match submodules of ``model``."""
    base = frozenset(f for f in FLAGS if ch.chance(0.5))
    names = program.module_names(model)
    candidates = set(names) | {n.rsplit(".", 1)[0] + ".*" for n in names if "." in n}
    candidates |= {n[:-1] + "?" for n in names} | {"*." + n.rsplit(".", 1)[1] for n in names if "." in n}
    candidates = sorted(candidates | ({"*"} if names else set()))
    scopes: List[Tuple[str, Grant]] = []
    if candidates and ch.chance(0.5):
        for pattern in sorted({ch.choice(candidates) for _ in range(ch.integer(1, 3))}):
            scopes.append((pattern, _grant_of(_random_annotation(ch))))
    return PolicyPlan(base, _without_ties(scopes, names), annotations=not ch.chance(0.15),
                      param_shapes_constant=ch.chance(0.2))


def _specificity(pattern: str) -> Tuple[int, int]:
    return (-sum(pattern.count(c) for c in "*?["), len(pattern))


def _without_ties(scopes: List[Tuple[str, Grant]], names: Sequence[str]) -> Tuple[Tuple[str, Grant], ...]:
    """Drop patterns until no submodule is matched best by two equally specific patterns
    (the API leaves that case open)."""
    kept = list(scopes)
    for name in names:
        matching = [p for p in kept if fnmatch.fnmatchcase(name, p[0])]
        matching.sort(key=lambda p: _specificity(p[0]))
        while len(matching) > 1 and _specificity(matching[-1][0]) == _specificity(matching[-2][0]):
            kept.remove(matching[-2])
            matching.pop(-2)
    return tuple(kept)


def make_tensor(shape: Sequence[int], seed: int, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    """A reproducible normal tensor ``randn(shape) * scale + offset``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale + offset


def generate_example(ch: Any) -> torch.Tensor:
    """A random example: 2-D or 3-D, batch 1-4 (rarely 0), 2-6 channels (rarely 1), mixed signs,
    scales and (rarely) float64, int64 or float16."""
    batch = 0 if ch.chance(0.03) else ch.integer(1, 4)
    channels = 1 if ch.chance(0.05) else ch.integer(2, 6)
    shape = [batch, channels] + ([ch.integer(1, 4)] if ch.chance(0.5) else [])
    scale, offset = ch.choice([0.5, 1.0, 3.0]), ch.choice([0.0, 0.0, 1.0, -1.0])
    example = make_tensor(shape, ch.integer(0, 2**31 - 1), scale, offset)
    if ch.chance(0.1):
        return example.double()
    if ch.chance(0.06):
        return (example * 3).round().long()
    return example.half() if ch.chance(0.05) else example


def generate_inputs(ch: Any, example: torch.Tensor) -> List[Tuple[str, torch.Tensor]]:
    """Fresh inputs (labelled) around ``example``: itself, other data and signs, other sizes and ranks."""
    shape = list(example.shape)
    seed = lambda: ch.integer(0, 2**31 - 1)  # noqa: E731
    inputs = [("same", example.clone()), ("scaled", example * 2), ("negated", -example),
              ("fresh", make_tensor(shape, seed(), ch.choice([0.5, 1.0, 3.0]), ch.choice([0.0, 1.0, -1.0]))),
              ("positive", example.abs() + 0.1)]
    other_batch = ch.choice([b for b in (1, 2, 3, 5) if b != shape[0]])
    inputs.append(("batch", make_tensor([other_batch] + shape[1:], seed())))
    other_channels = ch.choice([c for c in (1, 2, 3, 4, 7) if c != shape[1]])
    inputs.append(("channels", make_tensor([shape[0], other_channels] + shape[2:], seed())))
    rank = shape[:2] if len(shape) == 3 else shape + [ch.integer(1, 3)]
    inputs.append(("rank", make_tensor(rank, seed())))
    if len(shape) == 3:
        length = ch.choice([n for n in (1, 2, 5) if n != shape[2]])
        inputs.append(("length", make_tensor(shape[:2] + [length], seed())))
    inputs.append(("float64", example.double() * ch.choice([1.0, -1.0])))
    # other dtypes, the same numbers where they can hold them: `.item()`/`.tolist()` answer an
    # int, float or bool as the dtype says, and eager's arithmetic follows that type
    whole = (example.double() * ch.choice([1.0, 3.0])).round()
    inputs += [("int64", whole.long()), ("int32", whole.int()), ("bool", example > 0),
               ("float16", example.half()), ("float32", example.float())]
    wide = make_tensor(shape[:-1] + [2 * shape[-1]], seed())
    inputs.append(("strided", wide[..., ::2]))  # same shape, not contiguous
    # same shape and values, column-major strides (not contiguous, no gaps)
    inputs.append(("transposed", example.transpose(0, -1).contiguous().transpose(0, -1)))
    if ch.chance(0.1):
        inputs.append(("empty", torch.zeros([0] + shape[1:])))
    return inputs


@dataclasses.dataclass
class Case:
    """One fuzz case: a program, its model, a policy, an example and fresh inputs."""

    program: Program
    model: nn.Module
    plan: PolicyPlan
    example: torch.Tensor
    inputs: List[Tuple[str, torch.Tensor]]


def generate_case(ch: Any, *, tag: str = "") -> Case:
    """A program with a policy, an example input and fresh inputs, all from ``ch``."""
    program = generate_program(ch, tag=tag)
    model = program.build()
    plan = generate_policy(ch, program, model)
    example = generate_example(ch)
    return Case(program, model, plan, example, generate_inputs(ch, example))


# -- comparing --------------------------------------------------------------------------------


def run(fn: Callable[..., Any], x: torch.Tensor) -> Tuple[bool, Any]:
    """``(True, output)`` or ``(False, exception)`` of ``fn(x.clone())`` without autograd
    (torch.fx's printout of where in the generated code an exception arose is swallowed)."""
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            return True, fn(x.clone())
    except Exception as error:
        return False, error


def same_output(expected: Any, actual: Any) -> bool:
    """Whether two outputs agree (``torch.testing.assert_close``, NaN equal to NaN)."""
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
    except (AssertionError, TypeError, ValueError, RuntimeError):
        return False
    return True


def trace_quietly(case: Case, plan: PolicyPlan, **kwargs: Any) -> torch.fx.GraphModule:
    """``specfx.trace`` of the case's model on its example under ``plan``, with the two
    warnings the fuzzer provokes on purpose silenced here (and only here)."""
    with warnings.catch_warnings():
        # examples are drawn with size-1 dims and short splits on purpose
        warnings.simplefilter("ignore", specfx.SpecializationWarning)
        # torch's own note when the model turns a parameter-derived tensor into a number, as eager does
        warnings.filterwarnings("ignore", "Converting a tensor with requires_grad=True", UserWarning)
        return specfx.trace(case.model, (case.example.clone(),), policy=plan.policy(), **kwargs)


def widen(case: Case, plan: PolicyPlan) -> Tuple[PolicyPlan, Probe]:
    """``plan`` widened until, by the probe's account, the example path needs nothing
    it lacks: add a needed flag; if an inner scope or annotation denies it, drop scopes and annotations."""
    for _ in range(len(FLAGS) + 2):
        probe, _ = case.program.probe(plan, case.model, case.example)
        need = probe.first_unmet
        if need is None:
            return plan, probe
        flag = min(need.alternatives, key=lambda f: f.value)
        if flag in plan.base:
            plan = dataclasses.replace(plan, scopes=(), annotations=False)
        else:
            plan = plan.with_flag(flag)
    raise AssertionError(f"could not widen {plan} enough")  # pragma: no cover - every need is a base flag


def first_difference(traced: Sequence[Facet], other: Sequence[Facet]) -> Optional[Facet]:
    """The decision of ``traced`` (the example's) that ``other`` makes differently first, or None."""
    for mine, theirs in zip(traced, other):
        if mine != theirs:
            return mine
    if len(traced) > len(other):
        return traced[len(other)]
    return None


def guard_functions() -> FrozenSet[Callable[..., None]]:
    """specfx's guard functions, as exported (``specfx.guard_*``)."""
    return frozenset(getattr(specfx, name) for name in dir(specfx) if name.startswith("guard_"))
