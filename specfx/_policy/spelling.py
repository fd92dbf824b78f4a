"""How a fix is spelled: as arguments of the Python API, or as options of the command line.

A refusal names what would fix it: ``pass policy=Policy(iter=True) to specfx.trace``. Under
``specfx trace`` the same fix is an option, ``--policy iter``. The messages ask the spelling
in force, which the command line sets (a ``ContextVar``) while it traces.

>>> spelling().grant("iter")
'pass policy=Policy(iter=True) to specfx.trace'
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Optional

__all__ = ["Spelling", "spelled", "spelling"]


class Spelling:
    """The fixes in the words of the Python API (the default)."""

    def grant(self, keyword: str) -> str:
        """Grant a flag for the whole trace."""
        return f"pass policy=Policy({keyword}=True) to specfx.trace"

    def grant_in(self, module_path: str, keyword: str) -> str:
        """Grant a flag in one submodule (and the modules inside it)."""
        return f"Policy(scopes={{{module_path!r}: Policy({keyword}=True)}})"

    def concrete(self, name: str, value: Any) -> str:
        """Bake a Python input into the graph."""
        return f"concrete_args={{{name!r}: {value!r}}}"

    def example_kwarg(self, name: str, value: Any) -> str:
        """Give a keyword argument among the example inputs (where forward takes it through
        ``**kwargs``, which ``concrete_args`` cannot name)."""
        return f"example_kwargs={{{name!r}: {value!r}}} (beside the other keyword inputs)"

    def leaf(self) -> str:
        """Keep a submodule out of the trace, called as a whole."""
        return "trace(..., leaf_modules=[...])"

    def eval_mode(self) -> str:
        """Trace the model in eval mode."""
        return "call model.eval() before specfx.trace"

    def examples(self) -> str:
        """Where example inputs go."""
        return "Pass example_inputs as a tuple of positional arguments and example_kwargs as a dict"

    def example_call(self, keyword: str) -> str:
        """A trace with example inputs and a flag granted."""
        return f"specfx.trace(model, (example_input,), policy=Policy({keyword}=True))"

    def check_input(self, index: int) -> str:
        """One of the inputs a trace is checked on, by its position."""
        return f"check_inputs[{index}]"

    def other_assumptions(self) -> str:
        """How to get a graph for inputs that need other decisions."""
        return ("trace with such an example, or let specfx.Specializer(model, policy) keep one graph per set of "
                "assumptions")


_API = Spelling()
_SPELLING: contextvars.ContextVar[Optional[Spelling]] = contextvars.ContextVar("specfx_spelling", default=None)


def spelling() -> Spelling:
    """The spelling in force: the command line's while ``specfx trace`` runs, else the API's."""
    return _SPELLING.get() or _API


@contextlib.contextmanager
def spelled(words: Spelling) -> Iterator[None]:
    """Spell fixes with ``words`` inside the block."""
    token = _SPELLING.set(words)
    try:
        yield
    finally:
        _SPELLING.reset(token)
