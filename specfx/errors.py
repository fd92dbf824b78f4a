"""The exceptions and warnings specfx raises.

Each class docstring is the documentation of its error: when it is raised,
a failing example and the fixed one. docs/errors.md has one section per class
and every message ends with a pointer to it.

Every class subclasses the nearest builtin (and ``torch.fx``'s own
``TraceError`` where a plain FX tracer would raise that), so existing
``except`` clauses keep working. All are defined here, at module level, and
carry their pieces as keyword-argument attributes: they pickle and unpickle
to the same type, message and attributes (multiprocessing, distributed
calibration, torch.compile workers).
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from torch.fx.proxy import TraceError

__all__ = [
    "DOCS",
    "GuardError",
    "SpecfxError",
    "SpecializationError",
    "SpecializationRuntimeError",
    "SpecializationTypeError",
    "SpecializationWarning",
    "TraceCheckError",
    "VariantLimitError",
    "compatible_error_class",
    "docs_pointer",
]

DOCS = "docs/errors.md"


def docs_pointer(section: str) -> str:
    """The last line of a message: where its error is documented.

    >>> docs_pointer("guarderror")
    '(specfx docs: docs/errors.md#guarderror)'
    """
    return f"(specfx docs: {DOCS}#{section})"


class SpecfxError(Exception):
    """Base class of every error specfx raises on its own account.

    ``str(error)`` is the message followed by a pointer to the error's section
    of docs/errors.md; ``error.args[0]`` is the message alone.

    >>> import specfx
    >>> issubclass(specfx.GuardError, specfx.SpecfxError)
    True
    """

    #: the anchor of this error's section in docs/errors.md
    docs_section: ClassVar[str] = "specfxerror"

    # Pickling: BaseException.__reduce__ gives (type, args, __dict__); the message is the
    # only positional argument and every attribute has a keyword default, so
    # type(message) followed by __dict__.update() rebuilds the same error.

    def __str__(self) -> str:
        message = super().__str__()
        pointer = docs_pointer(self.docs_section)
        return message if message.endswith(pointer) else f"{message}\n{pointer}"


class SpecializationError(SpecfxError, TraceError):
    """Raised while tracing when the traced code needs a concrete value that
    the active policy does not allow to be baked in.

    The message names the operation and the value it would have had, which
    flag was off and which policy or decorator was in force, the fix, and the
    user's source line. The pieces are also attributes: ``operation``,
    ``flag`` (a :class:`~specfx.Specialize` or ``None``), ``value`` (or
    ``None`` when unknown) and ``location`` (``"file:line"`` or ``None``);
    ``batch`` is the index of the calibration batch that ``trace(...,
    calibration=)`` refused (else ``None``).

    It is a ``torch.fx.proxy.TraceError`` (hence a ``ValueError``), which is
    what ``torch.fx.symbolic_trace`` raises for the same code; for ``len()``
    it is also a ``RuntimeError`` and for ``int()``/``float()``/``__index__``
    also a ``TypeError`` (:class:`SpecializationRuntimeError`,
    :class:`SpecializationTypeError`), as torch.fx's errors are.

    Failing: a branch on data, with the default policy (nothing may be baked in).

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else x
    >>> try:
    ...     specfx.trace(f, torch.ones(3))
    ... except specfx.SpecializationError as e:
    ...     print(e.flag, e.value)
    Specialize.BOOL True

    Fixed: grant the flag the message names (or ``@specialize(bool=True)`` on
    the function); the decision is recorded and guarded.

    >>> gm = specfx.trace(f, torch.ones(3), policy=specfx.Policy(bool=True))
    >>> [(str(s.kind), s.value) for s in gm.specializations]
    [('bool', True)]
    """

    docs_section = "specializationerror"

    def __init__(
        self,
        message: str,
        *,
        operation: Optional[str] = None,
        flag: Any = None,
        value: Any = None,
        location: Optional[str] = None,
        batch: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.flag = flag
        self.value = value
        self.location = location
        self.batch = batch


class SpecializationTypeError(SpecializationError, TypeError):
    """A :class:`SpecializationError` that is also a ``TypeError``: raised for
    ``int()``, ``float()`` and ``__index__`` of a traced value, where
    ``torch.fx.symbolic_trace`` raises ``TypeError``.

    >>> import torch, specfx
    >>> try:
    ...     specfx.trace(lambda x: x.new_zeros(int(x.sum())), torch.ones(3))
    ... except TypeError as e:
    ...     print(type(e).__name__, e.flag)
    SpecializationTypeError Specialize.SCALARS
    """


class SpecializationRuntimeError(SpecializationError, RuntimeError):
    """A :class:`SpecializationError` that is also a ``RuntimeError``: raised
    for ``len()`` of a traced value, where ``torch.fx.symbolic_trace`` raises
    ``RuntimeError``.

    >>> import torch, specfx
    >>> try:
    ...     specfx.trace(lambda x: x * len(x), torch.ones(3))
    ... except RuntimeError as e:
    ...     print(type(e).__name__, e.flag)
    SpecializationRuntimeError Specialize.ITER_LEN
    """


_COMPATIBLE_CLASSES = {TypeError: SpecializationTypeError, RuntimeError: SpecializationRuntimeError}


def compatible_error_class(builtin: type[Exception]) -> type[SpecializationError]:
    """The ``SpecializationError`` that is also a ``builtin`` exception: what
    torch.fx raises for the same operation (``RuntimeError`` for ``len()``,
    ``TypeError`` for ``int()``), so existing ``except`` clauses still catch it.

    >>> compatible_error_class(RuntimeError).__name__
    'SpecializationRuntimeError'
    """
    return _COMPATIBLE_CLASSES[builtin]


class GuardError(SpecfxError, RuntimeError):
    """Raised by a guard in a traced graph when an input breaks an assumption
    that was baked in while tracing.

    The message says which assumption, the traced and the actual value, the
    source line where the assumption was made and how to retrace (or to let a
    :class:`specfx.Specializer` keep one graph per set of assumptions). The
    graph never returns a result computed under a broken assumption.

    The pieces are attributes: ``expression`` (what was read, in the user's
    terms, e.g. ``len(parts)``), ``kind`` (the :class:`~specfx.guards.GuardKind`
    of the check that failed; every length check reads ``len``), ``expected`` (the traced value), ``actual``
    (this input's value) and ``location`` (``"file:line: source"`` of the
    decision; ``where`` is the same string).

    Failing: the graph was traced for two pieces and gets an input with three.

    >>> import torch, specfx
    >>> def f(x):
    ...     return torch.cat([p * 2 for p in torch.split(x, 2)])
    >>> gm = specfx.trace(f, torch.ones(4), policy="iter")
    >>> try:
    ...     gm(torch.ones(6))
    ... except specfx.GuardError as e:
    ...     print(e.expected, e.actual)
    2 3

    Fixed: a :class:`specfx.Specializer` traces again for inputs the first
    graph does not cover.

    >>> spec = specfx.Specializer(f, "iter")
    >>> spec(torch.ones(4)).shape, spec(torch.ones(6)).shape
    (torch.Size([4]), torch.Size([6]))
    """

    docs_section = "guarderror"

    def __init__(
        self,
        message: str,
        *,
        expression: Optional[str] = None,
        kind: Optional[str] = None,
        expected: Any = None,
        actual: Any = None,
        location: Optional[str] = None,
        where: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.expression = expression
        self.kind = kind
        self.expected = expected
        self.actual = actual
        self.location = location if location is not None else where

    @property
    def where(self) -> str:
        """The same as ``location`` ('' when unknown); the name specfx 0.1 used."""
        return self.location or ""


class TraceCheckError(SpecfxError, AssertionError):
    """Raised by ``trace(..., check_inputs=...)`` when the traced graph fails a
    guard on, or disagrees with the eager model on, one of the check inputs.

    ``index`` is the position of the failing input in ``check_inputs``.

    Failing: the second check input has one chunk where the example had two.

    >>> import torch, specfx
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return a + b
    >>> try:
    ...     specfx.trace(f, torch.ones(4), check_inputs=[torch.ones(6), torch.ones(1)])
    ... except specfx.TraceCheckError as e:
    ...     print(e.index)
    1

    Fixed: check with inputs the graph is meant to cover (or use a
    :class:`specfx.Specializer` for inputs that need other decisions).

    >>> gm = specfx.trace(f, torch.ones(4), check_inputs=[torch.ones(6), torch.ones(2)])
    """

    docs_section = "tracecheckerror"

    def __init__(self, message: str, *, index: Optional[int] = None) -> None:
        super().__init__(message)
        self.index = index


class VariantLimitError(SpecfxError, RuntimeError):
    """Raised by :class:`specfx.Specializer` when no variant's guards hold for
    an input and ``max_variants`` variants exist already. The message lists
    each variant and the guard that rejected the input.

    Failing: a third length with room for one variant.

    >>> import torch, specfx
    >>> spec = specfx.Specializer(lambda x: sum(torch.unbind(x)), "iter", max_variants=1)
    >>> _ = spec(torch.ones(2, 3))
    >>> try:
    ...     spec(torch.ones(3, 3))
    ... except specfx.VariantLimitError as e:
    ...     print(str(e).splitlines()[0])
    no variant of the traced model fits this input and max_variants=1 is reached:

    Fixed: allow as many variants as the inputs need.

    >>> spec = specfx.Specializer(lambda x: sum(torch.unbind(x)), "iter", max_variants=2)
    >>> _ = spec(torch.ones(2, 3)), spec(torch.ones(3, 3))
    """

    docs_section = "variantlimiterror"


class SpecializationWarning(UserWarning):
    """Warned once per trace when specializations were decided on a degenerate
    example: an empty container, a length of 0 or 1, or a size-0/size-1
    dimension. Such an example often takes a path that most real inputs do
    not; the guards will reject those inputs, so retrace with a more
    representative example.

    Warned: one chunk of four elements, read as a length.

    >>> import warnings, torch, specfx
    >>> def f(x):
    ...     return sum(torch.split(x, 4))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = specfx.trace(f, torch.ones(4), policy=specfx.Policy(iter=True))
    >>> caught[0].category.__name__
    'SpecializationWarning'

    Fixed: an example with several chunks, as real inputs have.

    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error")
    ...     _ = specfx.trace(f, torch.ones(12), policy=specfx.Policy(iter=True))
    """

    docs_section: ClassVar[str] = "specializationwarning"
