"""Where in the *user's* code something happened: cheap frame walking.

Tracing happens inside specfx and torch.fx frames; errors and records must
point at the model's own line instead. Frames are classified by file name
once (a dict lookup afterwards) and the source text is read lazily through
``linecache`` only when a message or report needs it.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import types
from typing import NamedTuple, Optional

import torch

__all__ = ["SourceLocation", "caller_outside_specfx", "is_internal_file", "is_user_file", "user_frame", "user_location"]

# the specfx package (this file is in specfx/_frames/)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# torch files that only relay a call to the user's code (dispatch, patching, module __call__).
_TORCH_RELAYS = tuple(
    os.path.join(_TORCH_DIR, *parts)
    for parts in (
        ("fx", ""),
        ("_tensor.py",),
        ("overrides.py",),
        ("nn", "modules", "module.py"),
        ("nn", "modules", "container.py"),  # self.experts[i]: the indexing is the user's line
        ("utils", "_pytree.py"),
        ("_jit_internal.py",),
    )
)
_STDLIB_RELAYS = ("functools.py", "contextlib.py")
# Files inside the package that hold model code of their own (the demo's models).
_USER_FILES_IN_PACKAGE = frozenset({os.path.join(_PACKAGE_DIR, "cli", "demo.py")})

_internal_by_filename: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    internal = _internal_by_filename.get(filename)
    if internal is None:
        path = os.path.abspath(filename) if not filename.startswith("<") else filename
        internal = (
            (path.startswith(_PACKAGE_DIR) and path not in _USER_FILES_IN_PACKAGE)
            or path.startswith(_TORCH_RELAYS)
            or (os.path.basename(path) in _STDLIB_RELAYS and "site-packages" not in path)
        )
        _internal_by_filename[filename] = internal
    return internal


def is_internal_file(filename: str) -> bool:
    """Whether ``filename`` is specfx or a torch file that only relays calls (cached)."""
    return _is_internal(filename)


def is_user_file(filename: str) -> bool:
    """Whether ``filename`` is model code: neither specfx nor part of torch."""
    if _is_internal(filename):
        return False
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return not path.startswith(_TORCH_DIR)


class SourceLocation(NamedTuple):
    """A line of user code: file, line number and the function it is in, and
    (when known) the bytecode offset of the instruction, which tells two
    decisions on one line apart (explain() groups by it).

    >>> loc = SourceLocation("model.py", 12, "Net.forward")
    >>> str(loc)
    'model.py:12'
    """

    filename: str
    lineno: int
    function: str
    offset: int = -1  # frame.f_lasti; -1 when unknown (0.1 pickles have no offset)

    @property
    def text(self) -> str:
        """The stripped source line ('' when the file cannot be read)."""
        return linecache.getline(self.filename, self.lineno).strip()

    @property
    def short_filename(self) -> str:
        """The file name relative to the working directory when it is inside it,
        or from the package down for installed packages."""
        return _shorten(self.filename, os.getcwd())

    def __str__(self) -> str:
        return f"{self.short_filename}:{self.lineno}"

    def describe(self) -> str:
        """``file:line: source text`` for messages."""
        text = self.text
        return f"{self}: {text}" if text else str(self)


@functools.lru_cache(maxsize=1024)
def _shorten(filename: str, cwd: str) -> str:
    if filename.startswith("<"):
        return filename
    marker = os.sep + "site-packages" + os.sep
    if marker in filename:
        return filename.rsplit(marker, 1)[1]
    try:
        relative = os.path.relpath(filename, cwd)
    except ValueError:  # another drive on Windows
        return filename
    return filename if relative.startswith("..") else relative


def _qualname(frame: types.FrameType) -> str:
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None)  # Python >= 3.11
    if qualname:
        return qualname
    owner = frame.f_locals.get("self")
    if owner is not None:
        return f"{type(owner).__name__}.{code.co_name}"
    return code.co_name


def caller_outside_specfx(frame: Optional[types.FrameType]) -> Optional[types.FrameType]:
    """``frame`` or the first frame above it whose code is not specfx's own: the caller of a
    function specfx patched in, however many of specfx's frames (a dispatcher) lie between."""
    while frame is not None and _is_specfx_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _is_specfx_file(filename: str) -> bool:
    return filename.startswith(_PACKAGE_DIR) and filename not in _USER_FILES_IN_PACKAGE


def user_frame(depth: int = 1) -> Optional[types.FrameType]:
    """The innermost frame, starting ``depth`` frames above the caller, that is
    not specfx, torch.fx or a torch file that only relays calls."""
    frame: Optional[types.FrameType] = sys._getframe(depth + 1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_location(depth: int = 1) -> Optional[SourceLocation]:
    """The :class:`SourceLocation` of :func:`user_frame`, or None."""
    frame = user_frame(depth + 1)
    if frame is None:
        return None
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno, _qualname(frame), frame.f_lasti)

SourceLocation.__module__ = "specfx"  # pickles of records name it by the public package's path
