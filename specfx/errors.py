"""The exceptions and warnings specfx raises.

Every class subclasses the nearest builtin (and ``torch.fx``'s own
``TraceError`` where a plain FX tracer would raise that), so existing
``except`` clauses keep working. Each class docstring says when it is raised.
"""

from __future__ import annotations

from typing import Any

from torch.fx.proxy import TraceError

__all__ = [
    "GuardError",
    "SpecfxError",
    "SpecializationError",
    "SpecializationWarning",
    "TraceCheckError",
]


class SpecfxError(Exception):
    """Base class of every error specfx raises on its own account.

    >>> import specfx
    >>> issubclass(specfx.GuardError, specfx.SpecfxError)
    True
    """


class SpecializationError(SpecfxError, TraceError):
    """Raised while tracing when the traced code needs a concrete value that
    the active policy does not allow to be baked in.

    The message names the operation and the value it would have had, which
    flag was off and which policy or decorator was in force, the fix, and the
    user's source line. The pieces are also attributes: ``operation``,
    ``flag`` (a :class:`~specfx.Specialize` or ``None``), ``value`` (or
    ``None`` when unknown) and ``location`` (``"file:line"`` or ``None``).

    It is a ``torch.fx.proxy.TraceError`` (hence a ``ValueError``), which is
    what ``torch.fx.symbolic_trace`` raises for the same code.

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else x
    >>> try:
    ...     specfx.trace(f, torch.ones(3))
    ... except specfx.SpecializationError as e:
    ...     print(e.operation, e.flag)
    bool() of `gt` Specialize.BOOL
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        flag: Any = None,
        value: Any = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.flag = flag
        self.value = value
        self.location = location


_COMPATIBLE_CLASSES: dict = {}


def compatible_error_class(builtin: type) -> type:
    """A ``SpecializationError`` that is also a ``builtin`` exception: what
    torch.fx raises for the same operation (``RuntimeError`` for ``len()``,
    ``TypeError`` for ``int()``), so existing ``except`` clauses still catch it.

    >>> error = compatible_error_class(RuntimeError)("len() of `x` ...")
    >>> isinstance(error, SpecializationError) and isinstance(error, RuntimeError)
    True
    """
    cls = _COMPATIBLE_CLASSES.get(builtin)
    if cls is None:
        # Named like the base so tracebacks read "specfx.errors.SpecializationError".
        cls = type("SpecializationError", (SpecializationError, builtin), {"__module__": __name__})
        cls.__qualname__ = "SpecializationError"
        cls.__doc__ = f"A SpecializationError that is also a {builtin.__name__}, as torch.fx's error is."
        _COMPATIBLE_CLASSES[builtin] = cls
    return cls


class GuardError(SpecfxError, RuntimeError):
    """Raised by a guard in a traced graph when an input breaks an assumption
    that was baked in while tracing.

    The message says which assumption, the traced and the actual value, the
    source line where the assumption was made and how to retrace. The graph
    never returns a result computed under a broken assumption.

    >>> import torch, specfx
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return a + b
    >>> gm = specfx.trace(f, torch.ones(4))
    >>> try:
    ...     gm(torch.ones(1))
    ... except specfx.GuardError as e:
    ...     print(e.expected, e.actual)
    2 1
    """

    def __init__(
        self, message: str, *, expected: Any = None, actual: Any = None, where: str = ""
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
        self.where = where

    def __reduce__(self) -> Any:
        # Keep the structured fields across pickling (multiprocessing, torch.compile workers).
        return (_rebuild_guard_error, (self.args[0], self.expected, self.actual, self.where))


def _rebuild_guard_error(message: str, expected: Any, actual: Any, where: str) -> GuardError:
    return GuardError(message, expected=expected, actual=actual, where=where)


class TraceCheckError(SpecfxError, AssertionError):
    """Raised by ``trace(..., check_inputs=...)`` when the traced graph fails a
    guard on, or disagrees with the eager model on, one of the check inputs.

    ``index`` is the position of the failing input in ``check_inputs``.

    >>> import torch, specfx
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return a + b
    >>> try:
    ...     specfx.trace(f, torch.ones(4), check_inputs=[torch.ones(6), torch.ones(1)])
    ... except specfx.TraceCheckError as e:
    ...     print(e.index)
    1
    """

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class SpecializationWarning(UserWarning):
    """Warned once per trace when specializations were decided on a degenerate
    example: an empty container, a length of 0 or 1, or a size-0/size-1
    dimension. Such an example often takes a path that most real inputs do
    not; the guards will reject those inputs, so retrace with a more
    representative example.

    >>> import warnings, torch, specfx
    >>> def f(x):
    ...     return sum(torch.split(x, 4))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = specfx.trace(f, torch.ones(4), policy=specfx.Policy(iter=True))
    >>> caught[0].category.__name__
    'SpecializationWarning'
    """
