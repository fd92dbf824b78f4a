"""``Specializer``: a module that traces on first use and re-specializes when
its guards fail, keeping every variant inspectable.

Selecting a variant is cheap: for each variant, the guards whose inputs are
input metadata only (shapes, lengths, dict keys, ``is None``, predicates on
those) are extracted into a small *prologue* graph that runs before the
variant. Guards on data (``if x.sum() > 0``) can only be checked by running
the variant itself; when such a late guard fails the next variant is tried,
so a miss costs at most the part of one forward before that guard.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Hashable, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.fx

from .._trace.examples import refuse_model_class
from .._trace.options import check_trace_options, split_concrete
from .._capture.demands import deferred_shapes
from .._policy.messages import fit_variant_limit
from .._trace.coverage import GuardChecker, as_call
from .._trace.guard_runs import Checkpoint
from .._trace.progress import check_progress, progress_bar
from .variants import Variant
from ..guards import GUARD_FUNCTIONS
from .._policy.messages import short_repr
from .._graph.report import explain as explain_graph
from .._graph.report import specializations
from ..errors import GuardError, VariantLimitError  # VariantLimitError: defined with the other errors

__all__ = ["Specializer", "SpecializerStats", "VariantLimitError"]

_GUARD_FUNCTIONS = GUARD_FUNCTIONS
_MISS: Any = object()


class SpecializerStats(NamedTuple):
    """What a :class:`Specializer` did so far (``spec.stats``): ``calls``; ``hits``
    (calls answered by an existing variant); ``misses`` (variants tried and rejected,
    by their prologue or by a guard on data); ``retraces`` (variants traced);
    ``restores`` (rejections after which inputs, buffers and RNG were put back)."""

    calls: int
    hits: int
    misses: int
    retraces: int
    restores: int


def _describe_inputs(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    parts = [short_repr(a) for a in args] + [f"{k}={short_repr(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _first_line(error: BaseException) -> str:
    lines = str(error).splitlines()
    return (lines[0] + (f" ({lines[1].strip()})" if len(lines) > 1 else "")) if lines else repr(error)


def _ranges(indices: Sequence[int]) -> str:
    """``0-3, 7, 9-10`` for (0, 1, 2, 3, 7, 9, 10)."""
    runs: List[List[int]] = []
    for index in indices:
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class Specializer(torch.nn.Module):
    """Wrap ``model`` so that it is traced with the actual inputs on its first
    call and re-traced into a new variant when an input breaks the guards of
    every variant so far (at most ``max_variants`` per cache key).

    Calls run the first variant whose guards hold: guards on input metadata
    are checked up front by a small prologue graph, guards on data by running
    the variant. ``on_guard_failure="raise"`` never retraces after the first
    variant: a broken guard raises its ``GuardError``. ``cache_key(*args,
    **kwargs)`` partitions variants (the training flag always does: a mode
    change selects other variants). Further keyword arguments go to
    :func:`specfx.trace`. The wrapper shares the model's parameters, buffers
    and submodules, so ``state_dict()`` is the model's; moving it
    (``.to()``, ``.half()``) drops the variants, which retrace on next use.

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else x - 1
    >>> spec = specfx.Specializer(f, specfx.Policy(bool=True))
    >>> spec(torch.ones(2)), spec(-torch.ones(2))
    (tensor([2., 2.]), tensor([-2., -2.]))
    >>> len(spec.variants)
    2
    """

    _model: Any  # set with object.__setattr__; declared so type checkers do not read it via Module.__getattr__

    def __init__(
        self,
        model: Any,
        policy: Any = None,
        *,
        max_variants: int = 8,
        on_guard_failure: str = "retrace",
        cache_key: Optional[Callable[..., Hashable]] = None,
        **trace_options: Any,
    ) -> None:
        super().__init__()
        refuse_model_class(model, "Specializer")
        if not (isinstance(model, torch.nn.Module) or callable(model)):
            raise TypeError(f"Specializer wraps an nn.Module or a function; got {type(model).__name__}")
        if not isinstance(max_variants, int) or isinstance(max_variants, bool) or max_variants < 1:
            raise ValueError(f"max_variants= takes a positive int; got {max_variants!r}")
        if on_guard_failure not in ("retrace", "raise"):
            raise ValueError(f"on_guard_failure= takes 'retrace' or 'raise'; got {on_guard_failure!r}")
        if cache_key is not None and not callable(cache_key):
            raise TypeError("cache_key= takes a function of the call's arguments returning a hashable key")
        for name in ("check_inputs", "example_inputs", "example_kwargs", "calibration"):
            if name in trace_options:
                raise TypeError(f"{name}= is not a Specializer option: the actual call's inputs are the examples"
                                + (" (give a calibration set to spec.fit(batches))" if name == "calibration" else ""))
        if trace_options.get("guards", True) is False:
            raise ValueError("guards=False is not a Specializer option: a variant without guards would answer "
                             "every input, right or wrong; the guards are how the Specializer chooses a variant")
        check_trace_options(trace_options, caller="Specializer")
        object.__setattr__(self, "_model", model)  # not a submodule: the model's tables are shared below
        if isinstance(model, torch.nn.Module):
            # Share the model's state so state_dict(), parameters() and .to() are the model's.
            self._parameters = model._parameters
            self._buffers = model._buffers
            self._non_persistent_buffers_set = model._non_persistent_buffers_set
            self._modules = model._modules
            self.training = model.training
        self.policy = policy
        self.max_variants = max_variants
        self.on_guard_failure = on_guard_failure
        self.cache_key = cache_key
        self.trace_options = trace_options
        self._lock = threading.Lock()
        self._by_key: Dict[Hashable, Tuple[Variant, ...]] = {}
        self._all: List[Variant] = []
        self._counts = [0, 0, 0, 0, 0]  # calls, hits, misses, retraces, restores

    @property
    def stats(self) -> SpecializerStats:
        """Counts of calls, hits, misses, retraces and restores so far."""
        return SpecializerStats(*self._counts)

    @property
    def model(self) -> Any:
        """The wrapped model (or function)."""
        return self._model

    @property
    def variants(self) -> List[torch.fx.GraphModule]:
        """Every traced variant, oldest first; each has ``.specializations`` and
        ``.served_batches``: the indices of the batches of the last :meth:`fit`'s set
        that it serves (``()`` before any fit)."""
        return [variant.graph for variant in self._all]

    def train(self, mode: bool = True) -> "Specializer":
        """Set training mode on the model (variants are kept per mode)."""
        super().train(mode)
        if isinstance(self._model, torch.nn.Module):
            self._model.training = mode
        return self

    def _apply(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "Specializer":
        # .to()/.half()/... replace buffers: variants would hold the old ones.
        result = super()._apply(fn, *args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.reset()
        return result

    def reset(self) -> None:
        """Drop every variant; the next call traces afresh."""
        with self._lock:
            self._by_key = {}
            self._all = []

    def _key(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Hashable:
        mode = self._model.training if isinstance(self._model, torch.nn.Module) else None
        if self.cache_key is None:
            return mode
        return (mode, self.cache_key(*args, **kwargs))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the first variant whose guards hold for these inputs, tracing a new one if none does."""
        self._counts[0] += 1
        key = self._key(args, kwargs)
        failures: List[Tuple[Variant, BaseException]] = []
        variants = self._by_key.get(key, ())
        for variant in variants:
            # With one variant the graph's own guards decide; prologues only choose among several
            # (and run first when the graph writes before a guard they check).
            if variant.check is not None and (len(variants) > 1 or variant.check_first):
                try:
                    variant.check(*args, **kwargs)
                except Exception as error:  # a guard, or an input the prologue cannot read: a miss
                    self._counts[2] += 1
                    failures.append((variant, error))
                    continue
            result = self._attempt(variant, args, kwargs, failures)
            if result is not _MISS:
                self._counts[1] += 1
                return result
        return self._call_new_variant(key, args, kwargs, failures)

    def _attempt(self, variant: Variant, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 failures: List[Tuple[Variant, BaseException]]) -> Any:
        """Run ``variant``; on a guard failure put back what it wrote (when it may have
        written before the guard) and return _MISS."""
        checkpoint = Checkpoint(variant.writes, variant.saved_paths, args, kwargs, variant.graph) if (
            variant.writes and self.on_guard_failure == "retrace") else None
        try:
            return variant.run(*args, **kwargs)
        except GuardError as error:  # a guard on data, after part of the forward ran
            self._counts[2] += 1
            if checkpoint is not None:
                checkpoint.restore()
                self._counts[4] += 1
            failures.append((variant, error))
            return _MISS

    def _call_new_variant(
        self, key: Hashable, args: Tuple[Any, ...], kwargs: Dict[str, Any],
        failures: List[Tuple[Variant, BaseException]],
    ) -> Any:
        with self._lock:
            existing = self._by_key.get(key, ())
            tried = {id(variant) for variant, _ in failures}
            for variant in existing:  # another thread may have traced a fitting variant meanwhile
                if id(variant) not in tried:
                    result = self._attempt(variant, args, kwargs, failures)
                    if result is not _MISS:
                        self._counts[1] += 1
                        return result
            if failures and self.on_guard_failure == "raise":
                raise failures[0][1]
            if len(existing) >= self.max_variants:
                raise VariantLimitError(self._limit_message(failures))
            variant = self._add_variant(key, existing, self._trace(args, kwargs), _describe_inputs(args, kwargs))
        return variant.run(*args, **kwargs)

    def _trace(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> torch.fx.GraphModule:
        """A new variant's graph, traced on ``(args, kwargs)``."""
        from .._trace.trace import trace

        options = dict(self.trace_options)
        model: Any = self._model
        if options.get("concrete_args"):  # this call's values of those parameters are baked in
            example_kwargs, options["concrete_args"] = split_concrete(model, args, kwargs, options["concrete_args"])
            return trace(model, None, example_kwargs, policy=self.policy, **options)
        return trace(model, args, kwargs, policy=self.policy, **options)

    def _add_variant(self, key: Hashable, existing: Tuple[Variant, ...], graph: torch.fx.GraphModule,
                     inputs: str) -> Variant:
        """Keep ``graph`` as a new variant for ``key`` (under the lock)."""
        self._counts[3] += 1
        variant = Variant(graph, key, inputs, self._model)
        self._by_key = {**self._by_key, key: existing + (variant,)}
        self._all = self._all + [variant]
        return variant

    def fit(self, batches: Iterable[Any], *, progress: Optional[bool] = None) -> "Specializer":
        """Trace, ahead of use, the variants a calibration set needs; return the Specializer.

        Afterwards every batch of ``batches`` runs on an existing variant, with no
        retrace. Each batch is checked against the variants so far (their guards only,
        as :func:`specfx.coverage` checks them: nothing of the model is changed); a
        batch none serves is traced into a new variant, with shape reads kept symbolic
        where the code allows (a size that only flows into ops is no decision), so
        batches that differ only in such sizes share a variant. Since a variant serves
        exactly the batches that take its decisions, the set's order does not change
        the number of variants, which is the number of distinct sets of decisions.
        Each variant's graph then has ``served_batches``, the indices of the batches it
        serves. Batches come as for :func:`specfx.coverage` (a DataLoader, a list, a
        one-shot generator); ``progress`` as there. More variants than
        ``max_variants`` raise :class:`VariantLimitError` naming the batch.

        >>> import torch, specfx
        >>> def f(x):
        ...     return x * 2 if x.sum() > 0 else x - 1
        >>> spec = specfx.Specializer(f, specfx.Policy(bool=True))
        >>> batches = [torch.ones(2), -torch.ones(3), torch.ones(4), -torch.ones(1)]
        >>> [graph.served_batches for graph in spec.fit(batches).variants]
        [(0, 2), (1, 3)]
        >>> _ = [spec(b) for b in batches]
        >>> spec.stats.retraces
        2
        """
        progress = check_progress(progress)
        checkers: Dict[int, GuardChecker] = {}
        served: Dict[int, List[int]] = {id(variant): [] for variant in self._all}
        for index, batch in enumerate(progress_bar(batches, progress, "fit")):
            args, kwargs = as_call(batch)
            key = self._key(args, kwargs)
            misses: List[Tuple[int, str, str]] = []
            for variant in self._by_key.get(key, ()):
                checker = checkers.get(id(variant))
                if checker is None:
                    checker = checkers[id(variant)] = GuardChecker(variant.graph)
                failure = checker.check(index, args, kwargs)
                if failure is None:
                    served[id(variant)].append(index)
                    break
                misses.append((self._all.index(variant), variant.inputs, failure))
            else:
                variant = self._fit_variant(key, index, args, kwargs, misses)
                served[id(variant)] = [index]
        for variant in self._all:
            setattr(variant.graph, "served_batches", tuple(served.get(id(variant), ())))  # noqa: B010
        return self

    def _fit_variant(self, key: Hashable, index: int, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                     misses: List[Tuple[int, str, str]]) -> Variant:
        with self._lock:
            existing = self._by_key.get(key, ())
            if len(existing) >= self.max_variants:
                raise VariantLimitError(fit_variant_limit(index, self.max_variants, misses))
            try:
                with deferred_shapes():
                    graph = self._trace(args, kwargs)
            except Exception:  # code that needs its sizes as ints after all: read them as the call would
                try:
                    graph = self._trace(args, kwargs)
                except Exception as error:
                    if hasattr(error, "add_note"):  # Python >= 3.11: the traceback says which batch
                        error.add_note(f"(while Specializer.fit traced batch {index} of its set)")
                    raise
            return self._add_variant(key, existing, graph, f"batch {index} of fit()")

    def _limit_message(self, failures: List[Tuple[Variant, BaseException]]) -> str:
        lines = [f"no variant of the traced model fits this input and max_variants={self.max_variants} is reached:"]
        for variant, error in failures:
            index = self._all.index(variant)
            lines.append(f"  variant {index} (traced on {variant.inputs}): {_first_line(error)}")
        lines.append("Raise max_variants, narrow the policy so these values stay symbolic, or pass "
                     "cache_key= to keep variants for different inputs apart.")
        return "\n".join(lines)

    def explain(self) -> str:
        """Every variant's inputs and specializations, then the decisions on which they differ."""
        name = getattr(self._model, "__name__", type(self._model).__name__)
        lines = [f"Specializer({name}): {len(self._all)} variant(s), max {self.max_variants} per key, "
                 f"policy {self.policy!r}"]
        decisions: Dict[Tuple[str, str, str], Dict[int, str]] = {}
        for index, variant in enumerate(self._all):
            prologue = 0 if variant.prologue is None else sum(
                1 for n in variant.prologue.graph.nodes if n.target in _GUARD_FUNCTIONS)
            served = getattr(variant.graph, "served_batches", ())
            lines.append(f"\nvariant {index}: key {variant.key!r}, traced on {variant.inputs}; "
                         f"{prologue} guard(s) checked up front"
                         + (f"; serves batches {_ranges(served)} of the set given to fit()" if served else ""))
            lines.extend("  " + line for line in explain_graph(variant.graph).splitlines())
            for record in specializations(variant.graph):
                decisions.setdefault((record.kind, record.where, record.source), {})[index] = short_repr(record.value)
        differing = [(k, v) for k, v in decisions.items() if len(set(v.values())) > 1 or len(v) < len(self._all)]
        if len(self._all) > 1:
            lines.append("\ndecisions that differ between variants:" if differing else
                         "\nno decision differs between variants")
            for (kind, where, source), values in differing:
                shown = ", ".join(f"v{i}={values.get(i, '-')}" for i in range(len(self._all)))
                lines.append(f"  {kind} at {where} ({source}): {shown}")
        return "\n".join(lines)

    def __getstate__(self) -> Dict[str, Any]:
        """Pickled like a GraphModule: the model, the options and each variant's graph, key and
        inputs (the lock and the variants' compiled prologues are rebuilt on load)."""
        state = dict(self.__dict__)
        del state["_lock"]
        position = {id(variant): index for index, variant in enumerate(self._all)}
        state["_by_key"] = {key: [position[id(variant)] for variant in variants] for key, variants in self._by_key.items()}
        state["_all"] = [(variant.graph, variant.key, variant.inputs) for variant in self._all]
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        saved = state.pop("_all")
        by_key = state.pop("_by_key")
        self.__dict__.update(state)
        object.__setattr__(self, "_lock", threading.Lock())
        # each variant reads the reloaded model's live state, as when it was traced
        self._all = [Variant(graph, key, inputs, self._model) for graph, key, inputs in saved]
        self._by_key = {key: tuple(self._all[i] for i in indices) for key, indices in by_key.items()}

    def __repr__(self) -> str:
        return f"Specializer({self._model!r}, {self.policy!r}, variants={len(self._all)})"


Specializer.__module__ = "specfx"  # a pickled Specializer names its class by the public path
