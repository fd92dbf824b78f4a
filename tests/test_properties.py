"""Property-based differential tests: a specialized graph agrees with eager PyTorch.

Each property traces a small model on one random example under a policy, then
calls the graph on fresh random inputs. The graph must either return exactly
what eager returns or raise ``specfx.GuardError``, never another exception and
never a different result; and it must raise ``GuardError`` exactly when the
decision baked in at trace time (a length, a truth value, a shape) would come
out differently in eager, which each test computes on its own.

Tensors come from hypothesis-drawn seeds through ``torch.Generator`` so that a
failing example reproduces from hypothesis' report alone.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import specfx
from specfx import GuardError, Policy, SpecializationError, SpecializationWarning, Specialize

with warnings.catch_warnings():
    # Hypothesis' pytest plugin imports this module (libcst -> mypy_extensions, which emits a
    # DeprecationWarning) only while reporting a failure; under filterwarnings=error that warning
    # would replace the falsifying example with an INTERNALERROR, so import it up front.
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:  # pragma: no cover - optional dependency of hypothesis
        pass

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
FEW = settings(max_examples=25, deadline=None)
FEWER = settings(max_examples=15, deadline=None)


# -- helpers -------------------------------------------------------------------------------


def randn(seed: int, *shape: int, offset: float = 0.0) -> torch.Tensor:
    """A reproducible standard-normal tensor (plus ``offset``) from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator) + offset


@contextlib.contextmanager
def expect_degenerate(degenerate: Optional[bool]) -> Iterator[None]:
    """Require a SpecializationWarning (True), forbid one (False, via filterwarnings=error)
    or tolerate either (None: specfx does not yet warn there, see TestKnownBugs)."""
    if degenerate is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpecializationWarning)
            yield
    elif degenerate:
        with pytest.warns(SpecializationWarning):
            yield
    else:
        yield


def trace(
    fn: Any, example: Any, policy: Policy, *, degenerate: Optional[bool] = False
) -> torch.fx.GraphModule:
    """``specfx.trace`` with the degenerate-example warning asserted as ``degenerate`` says."""
    with expect_degenerate(degenerate):
        return specfx.trace(fn, example, policy=policy)


def guard_kinds(gm: torch.fx.GraphModule) -> list:
    """The kinds of the recorded specializations, in order."""
    return [s.kind for s in gm.specializations]


def guard_nodes(gm: torch.fx.GraphModule) -> list:
    """The guard nodes of the graph."""
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.name.startswith("guard_")]


def check_against_eager(
    gm: torch.fx.GraphModule,
    eager: Callable[..., Any],
    args: Tuple[Any, ...],
    *,
    should_guard: bool,
    exact: bool = True,
) -> None:
    """The graph returns eager's result, or raises GuardError exactly when ``should_guard``."""
    if should_guard:
        with pytest.raises(GuardError):
            gm(*args)
        return
    expected = eager(*args)
    actual = gm(*args)  # any exception here, GuardError included, fails the property
    if exact:
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual, expected)


# -- models ------------------------------------------------------------------------------------


class SplitCat(nn.Module):
    """The seed model: split along channels, re-concatenate through a ``*args`` method."""

    def __init__(self, split_size: int) -> None:
        super().__init__()
        self.split_size = split_size

    def call_cat(self, *args: torch.Tensor) -> torch.Tensor:
        return torch.cat(args, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.split(x, self.split_size, dim=1)
        return self.call_cat(*x)


class ChunkFlip(nn.Module):
    """Chunks along channels, each flipped, so the output depends on the chunk boundaries."""

    def __init__(self, chunks: int) -> None:
        super().__init__()
        self.chunks = chunks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chunks = torch.chunk(x, self.chunks, dim=1)
        return torch.cat([c.flip(1) * (i + 1) for i, c in enumerate(chunks)], dim=1)


def unbind_sum(x: torch.Tensor) -> torch.Tensor:
    acc = x.sum(dim=1) * 0
    for t in torch.unbind(x, dim=1):
        acc = acc + t * t
    return acc


class LenArithmetic(nn.Module):
    """Uses ``len()`` of a split as a number in the computation."""

    def __init__(self, split_size: int) -> None:
        super().__init__()
        self.split_size = split_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, self.split_size, dim=1)
        return x.sum(dim=1) * len(parts) + len(parts) ** 2


def zip_chunks(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = x.sum() * 0
    for i, (a, b) in enumerate(zip(torch.chunk(x, 3, dim=0), torch.unbind(y, dim=0))):
        out = out + a.sum() * b.sum() * (i + 1)
    return out


def data_branch(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x * 2 + 1
    return x.abs() - 1


def halve_until_small(x: torch.Tensor) -> torch.Tensor:
    while x.abs().max() > 1:
        x = x / 2
    return x


def halvings(x: torch.Tensor) -> int:
    """How many times ``halve_until_small`` runs its loop body in eager mode."""
    count = 0
    while x.abs().max() > 1:
        x, count = x / 2, count + 1
    return count


def noisy_branch(x: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    if y.sum() > 0:
        return y * 2
    return y - 1


def shape_branch(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 1:
        return x - x.mean(dim=0, keepdim=True)
    return x * 3


def flatten_view(x: torch.Tensor) -> torch.Tensor:
    return x.view(x.size(0), -1)


def half_slice(x: torch.Tensor) -> torch.Tensor:
    h = int(x.size(1) // 2)
    return x[:, :h] * 2


def half_slice_via_shape(x: torch.Tensor) -> torch.Tensor:
    h = int(x.shape[1] // 2)
    return x[:, :h]


def float_of_max(x: torch.Tensor) -> torch.Tensor:
    return x + float(x.max())


# -- the seed family -----------------------------------------------------------------------


class TestSplitCat:
    """Properties of the seed model traced with ``Policy(Specialize.ITER_LEN)``."""

    @FEW
    @given(
        split_size=st.integers(1, 5),
        traced=st.tuples(st.integers(1, 3), st.integers(1, 12), st.integers(1, 4), st.integers(1, 4)),
        seed=SEEDS,
        data=st.data(),
    )
    def test_matches_eager_or_guards(self, split_size, traced, seed, data):
        """The graph equals eager when ceil(C'/s) is the traced chunk count, else raises GuardError."""
        model = SplitCat(split_size)
        B, C, H, W = traced
        traced_chunks = math.ceil(C / split_size)
        gm = trace(model, randn(seed, B, C, H, W), Policy(Specialize.ITER_LEN), degenerate=traced_chunks <= 1)
        assert guard_kinds(gm) == ["iter"] and gm.specializations[0].value == traced_chunks
        channels = st.one_of(st.just(C), st.integers(1, 14))
        for _ in range(4):
            c = data.draw(channels, label="C'")
            sizes = st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 4))
            b, h, w = data.draw(sizes, label="B,H,W")
            x = randn(data.draw(SEEDS, label="input seed"), b, c, h, w)
            chunks = math.ceil(c / split_size)
            assert chunks == len(torch.split(x, split_size, dim=1))
            check_against_eager(gm, model, (x,), should_guard=chunks != traced_chunks)

    @FEWER
    @given(split_size=st.integers(1, 4), seed=SEEDS)
    def test_zero_channels_follows_torch_split_length(self, split_size, seed):
        """With C'=0 torch.split yields one empty chunk: a one-chunk graph accepts it, a longer one guards."""
        model = SplitCat(split_size)
        one = trace(model, randn(seed, 2, split_size, 3, 3), Policy(iter=True), degenerate=True)
        two = trace(model, randn(seed, 2, split_size + 1, 3, 3), Policy(iter=True))
        empty = randn(seed, 2, 0, 3, 3)
        check_against_eager(one, model, (empty,), should_guard=False)
        check_against_eager(two, model, (empty,), should_guard=True)


# -- variants with other ops ------------------------------------------------------------------


class TestIterLenVariants:
    """Properties of ``torch.chunk``, ``torch.unbind``, ``len()`` and ``zip``/``enumerate`` under ITER_LEN."""

    @FEW
    @given(chunks=st.integers(1, 5), C=st.integers(1, 12), seed=SEEDS, data=st.data())
    def test_chunk(self, chunks, C, seed, data):
        """torch.chunk: equal to eager when eager makes the traced number of chunks, else GuardError."""
        model = ChunkFlip(chunks)
        traced = len(torch.chunk(torch.empty(1, C), chunks, dim=1))
        gm = trace(model, randn(seed, 2, C, 3), Policy(iter=True), degenerate=traced <= 1)
        for _ in range(4):
            c = data.draw(st.one_of(st.just(C), st.integers(1, 14)), label="C'")
            x = randn(data.draw(SEEDS), data.draw(st.integers(1, 3)), c, data.draw(st.integers(1, 4)))
            actual_chunks = len(torch.chunk(x, chunks, dim=1))
            check_against_eager(gm, model, (x,), should_guard=actual_chunks != traced)

    @FEW
    @given(C=st.integers(0, 8), seed=SEEDS, data=st.data())
    def test_unbind_loop_sum(self, C, seed, data):
        """A for-loop over torch.unbind sums like eager for the traced channel count, else GuardError."""
        gm = trace(unbind_sum, randn(seed, 2, C, 3), Policy(iter=True), degenerate=C <= 1)
        assert guard_kinds(gm) == ["iter"] and gm.specializations[0].value == C
        for _ in range(4):
            c = data.draw(st.one_of(st.just(C), st.integers(0, 9)), label="C'")
            x = randn(data.draw(SEEDS), data.draw(st.integers(1, 3)), c, data.draw(st.integers(1, 4)))
            check_against_eager(gm, unbind_sum, (x,), should_guard=c != C, exact=False)

    @FEW
    @given(split_size=st.integers(1, 4), C=st.integers(1, 12), seed=SEEDS, data=st.data())
    def test_len_used_as_a_number(self, split_size, C, seed, data):
        """Baked-in len() arithmetic is right when the guard passes, which fails exactly when len differs."""
        model = LenArithmetic(split_size)
        traced = math.ceil(C / split_size)
        gm = trace(model, randn(seed, 3, C), Policy(iter=True), degenerate=traced <= 1)
        assert guard_kinds(gm) == ["len"]
        for _ in range(4):
            c = data.draw(st.one_of(st.just(C), st.integers(1, 14)), label="C'")
            x = randn(data.draw(SEEDS), data.draw(st.integers(1, 4)), c)
            differs = math.ceil(c / split_size) != traced
            check_against_eager(gm, model, (x,), should_guard=differs, exact=False)

    @FEW
    @given(n=st.integers(2, 8), m=st.integers(2, 6), seed=SEEDS, data=st.data())
    def test_zip_enumerate(self, n, m, seed, data):
        """zip/enumerate over two traced sequences guards both lengths and otherwise matches eager."""
        traced_chunks = len(torch.chunk(torch.empty(n), 3))
        gm = trace(zip_chunks, (randn(seed, n, 2), randn(seed + 1, m)), Policy(iter=True))
        assert sorted(guard_kinds(gm)) == ["iter", "iter"]
        for _ in range(4):
            n2 = data.draw(st.one_of(st.just(n), st.integers(1, 9)), label="n'")
            m2 = data.draw(st.one_of(st.just(m), st.integers(1, 7)), label="m'")
            x, y = randn(data.draw(SEEDS), n2, 2), randn(data.draw(SEEDS), m2)
            differs = len(torch.chunk(x, 3)) != traced_chunks or m2 != m
            check_against_eager(gm, zip_chunks, (x, y), should_guard=differs, exact=False)


class TestBoolVariants:
    """Properties of branches decided under ``Policy(bool=True)``."""

    @FEW
    @given(
        shape=st.tuples(st.integers(1, 4), st.integers(1, 5)),
        offset=st.floats(-1.5, 1.5),
        seed=SEEDS,
        data=st.data(),
    )
    def test_data_dependent_branch(self, shape, offset, seed, data):
        """`if x.sum() > 0` guards its truth value: GuardError exactly when eager takes the other branch."""
        example = randn(seed, *shape, offset=offset)
        traced = bool(example.sum() > 0)
        gm = trace(data_branch, example, Policy(bool=True))
        assert guard_kinds(gm) == ["bool"] and gm.specializations[0].value is traced
        for _ in range(5):
            x = randn(
                data.draw(SEEDS),
                data.draw(st.integers(1, 4)),
                data.draw(st.integers(1, 5)),
                offset=data.draw(st.floats(-1.5, 1.5)),
            )
            check_against_eager(gm, data_branch, (x,), should_guard=bool(x.sum() > 0) is not traced)

    @FEW
    @given(size=st.integers(1, 5), scale=st.floats(0.1, 40.0), seed=SEEDS, data=st.data())
    def test_while_loop_count(self, size, scale, seed, data):
        """A `while` loop unrolls with a guard per test: GuardError exactly when eager loops otherwise."""
        example = randn(seed, size) * scale
        traced = halvings(example)
        gm = trace(halve_until_small, example, Policy(bool=True))
        assert [s.value for s in gm.specializations] == [True] * traced + [False]
        for _ in range(5):
            x = randn(data.draw(SEEDS), data.draw(st.integers(1, 5))) * data.draw(st.floats(0.1, 40.0))
            check_against_eager(gm, halve_until_small, (x,), should_guard=halvings(x) != traced)

    @FEW
    @given(size=st.integers(2, 6), seed=SEEDS, data=st.data())
    def test_random_op_branch(self, size, seed, data):
        """Branching on dropout's output (same RNG seed): eager's result, or GuardError if eager differs."""
        rng_before = torch.get_rng_state()
        gm = trace(noisy_branch, randn(seed, size), Policy(bool=True))
        assert torch.equal(torch.get_rng_state(), rng_before), "tracing changed the global RNG state"
        traced = gm.specializations[0].value
        for _ in range(4):
            x, rng_seed = randn(data.draw(SEEDS), size), data.draw(SEEDS, label="rng seed")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(rng_seed)
                takes_true_branch = bool(torch.nn.functional.dropout(x, 0.5, training=True).sum() > 0)
                torch.manual_seed(rng_seed)
                expected = noisy_branch(x)
                torch.manual_seed(rng_seed)
                if takes_true_branch is not traced:
                    with pytest.raises(GuardError):
                        gm(x)
                else:
                    assert torch.equal(gm(x), expected)

    @FEW
    @given(B=st.integers(0, 6), C=st.integers(1, 4), seed=SEEDS, data=st.data())
    def test_shape_predicate_branch_keeps_shapes_symbolic(self, B, C, seed, data):
        """`if x.shape[0] > 1` under BOOL guards only the predicate: every batch size satisfying it works."""
        traced = B > 1
        gm = trace(shape_branch, randn(seed, B, C), Policy(bool=True), degenerate=B <= 1)
        assert guard_kinds(gm) == ["bool"]
        assert [n.target.__name__ for n in guard_nodes(gm)] == ["guard_truth"]
        for _ in range(5):
            b = data.draw(st.integers(0, 9), label="B'")
            x = randn(data.draw(SEEDS), b, data.draw(st.integers(1, 5)))
            check_against_eager(gm, shape_branch, (x,), should_guard=(b > 1) is not traced, exact=False)


class TestShapes:
    """Properties of shape reads with and without SHAPES."""

    @FEW
    @given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=4), seed=SEEDS, data=st.data())
    def test_symbolic_view_needs_no_guard(self, shape, seed, data):
        """`x.view(x.size(0), -1)` without SHAPES specializes nothing and matches eager for every shape."""
        gm = trace(flatten_view, randn(seed, *shape), Policy(Specialize.ALL & ~Specialize.SHAPES))
        assert gm.specializations == [] and guard_nodes(gm) == []
        for _ in range(5):
            new_shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4), label="shape'")
            check_against_eager(gm, flatten_view, (randn(data.draw(SEEDS), *new_shape),), should_guard=False)

    @FEW
    @given(B=st.integers(1, 3), C=st.integers(1, 10), seed=SEEDS, data=st.data())
    def test_int_of_size_under_shapes(self, B, C, seed, data):
        """`int(x.size(1) // 2)` under SHAPES guards x.size(1) only: other dims vary, another C guards."""
        degenerate = C <= 1  # a size-1 dim read under SHAPES warns (TestRegressions keeps it so)
        gm = trace(half_slice, randn(seed, B, C, 2), Policy(shapes=True), degenerate=degenerate)
        assert [(s.kind, s.value) for s in gm.specializations] == [("size", C)]
        for _ in range(5):
            c = data.draw(st.one_of(st.just(C), st.integers(1, 11)), label="C'")
            x = randn(data.draw(SEEDS), data.draw(st.integers(0, 4)), c, data.draw(st.integers(1, 3)))
            # The guard checks the baked-in value x.size(1) itself (API: "shape == traced shape"),
            # even where c // 2 == C // 2 would make eager agree.
            check_against_eager(gm, half_slice, (x,), should_guard=c != C)


# -- SpecializationError only when a flag is really missing --------------------------------------

# name -> (function, example, flags any one of which lets the trace succeed)
NEEDS = {
    "split-iteration": (SplitCat(4), (3, 6, 2, 2), [Specialize.ITER_LEN]),
    "len-arithmetic": (LenArithmetic(4), (3, 6), [Specialize.ITER_LEN]),
    "unbind-loop": (unbind_sum, (3, 6, 2), [Specialize.ITER_LEN]),
    "data-branch": (data_branch, (3, 6), [Specialize.BOOL]),
    "while-loop": (halve_until_small, (3, 6), [Specialize.BOOL]),
    "shape-branch": (shape_branch, (3, 6), [Specialize.BOOL, Specialize.SHAPES]),
    "int-of-size": (half_slice, (3, 6, 2), [Specialize.SHAPES]),
    "float-of-data": (float_of_max, (3, 6), [Specialize.SCALARS]),
    "symbolic-view": (flatten_view, (3, 6, 2), []),
}
SINGLE_FLAGS = [Specialize.ITER_LEN, Specialize.BOOL, Specialize.SHAPES, Specialize.SCALARS]


def combine(flags: Sequence[Specialize]) -> Specialize:
    result = Specialize.NONE
    for flag in flags:
        result |= flag
    return result


class TestSpecializationError:
    """``SpecializationError`` is raised exactly when the policy lacks a flag the code needs."""

    @settings(max_examples=40, deadline=None)
    @given(case=st.sampled_from(sorted(NEEDS)), flags=st.sets(st.sampled_from(SINGLE_FLAGS)), seed=SEEDS)
    def test_error_iff_flag_missing(self, case, flags, seed):
        """Tracing fails only when no needed flag is granted, and adding the reported flag makes it pass."""
        fn, shape, needed = NEEDS[case]
        granted = combine(sorted(flags, key=lambda f: f.value))
        example = randn(seed, *shape)
        try:
            gm = specfx.trace(fn, example, policy=Policy(granted))
        except SpecializationError as error:
            assert needed, f"{case} needs no flag, yet tracing raised {error}"
            assert not any(flag in granted for flag in needed), f"{case} raised although {granted} granted"
            assert error.flag in needed
            assert error.flag.name in str(error) and "Policy(" in str(error)
            retraced = specfx.trace(fn, example, policy=Policy(granted | error.flag))
            torch.testing.assert_close(retraced(example), fn(example))
        else:
            assert not needed or any(flag in granted for flag in needed), f"{case} traced without {needed}"
            torch.testing.assert_close(gm(example), fn(example))


class TestShapeAttribute:
    """Values read through ``x.shape`` count as shape reads, like those read through ``x.size()``."""

    def test_int_of_shape_attribute_needs_shapes(self):
        """int() of a value computed from x.shape needs SHAPES (not SCALARS), as one from x.size() does."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(half_slice_via_shape, torch.randn(3, 6), policy=Policy())
        assert caught.value.flag is Specialize.SHAPES
        with pytest.raises(SpecializationError):
            specfx.trace(half_slice_via_shape, torch.randn(3, 6), policy=Policy(scalars=True))
        gm = specfx.trace(half_slice_via_shape, torch.randn(3, 6), policy=Policy(shapes=True))
        x = torch.randn(3, 6)
        assert torch.equal(gm(x), half_slice_via_shape(x))
        with pytest.raises(GuardError):
            gm(torch.randn(3, 8))

    def test_shape_attribute_predicate_on_size_one_warns(self):
        """Deciding `x.shape[0] > 1` on a batch of one warns like deciding `x.size(0) > 1` does."""
        with pytest.warns(SpecializationWarning):
            specfx.trace(shape_branch, torch.randn(1, 4), policy=Policy(bool=True))


# -- regressions: bugs these properties found, fixed in specfx -------------------------------------


class TestRegressions:
    """Reproducers of specfx bugs found by the properties above, kept so they stay fixed."""

    def test_signed_zero_scalar_guard(self):
        """A graph that baked float(x.max()) == 0.0 does not silently accept -0.0 where eager differs."""

        def f(x):
            return x + math.copysign(1.0, float(x.max()))

        gm = specfx.trace(f, torch.zeros(3), policy=Policy(scalars=True))
        x = torch.full((3,), -0.0)
        try:
            actual = gm(x)
        except GuardError:
            return
        assert torch.equal(actual, f(x)), f"silent mismatch: graph {actual} vs eager {f(x)}"

    def test_shapes_size_one_dimension_warns(self):
        """Baking x.size(0) == 1 in under SHAPES warns, as SpecializationWarning promises for size-1 dims."""
        with pytest.warns(SpecializationWarning):
            specfx.trace(flatten_view, torch.randn(1, 4, 2), policy=Policy(shapes=True))
