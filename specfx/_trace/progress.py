"""Progress of long work over a calibration set: a ``tqdm`` bar on stderr.

``progress=None`` shows the bar when stderr is a terminal and the work has run for a
second (short runs print nothing); ``True`` shows it at once, wherever stderr goes;
``False`` never. Without tqdm installed, a plain line is printed every few seconds
instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sized
from typing import Any, Iterable, Iterator, Optional

__all__ = ["check_progress", "progress_bar"]

_DELAY = 1.0  # seconds before a bar appears on its own (progress=None)
_PLAIN_EVERY = 5.0  # seconds between the plain fallback's lines


def check_progress(progress: Any) -> Optional[bool]:
    """``progress`` as given, once checked to be None, True or False."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress= takes None (a bar on a terminal), True or False; got {progress!r}")
    return progress


def progress_bar(items: Iterable[Any], progress: Optional[bool], what: str) -> Iterable[Any]:
    """``items``, counted on stderr as ``specfx <what>`` when ``progress`` asks for it."""
    if progress is False or (progress is None and not _is_terminal()):
        return items
    total = len(items) if isinstance(items, Sized) else None
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]  # tqdm ships no type stubs
    except ImportError:  # tqdm is optional: a plain line now and then
        return _plain(items, what, total)
    return tqdm(items, desc=f"specfx {what}", total=total, unit="batch", file=sys.stderr,
                delay=0.0 if progress else _DELAY, leave=bool(progress))


def _is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _plain(items: Iterable[Any], what: str, total: Optional[int]) -> Iterator[Any]:
    start = last = time.monotonic()
    count = 0
    for count, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if now - last >= _PLAIN_EVERY:
            last = now
            of = f"/{total}" if total is not None else ""
            print(f"specfx {what}: {count}{of} batches ({now - start:.0f} s)", file=sys.stderr)
    if last != start:
        print(f"specfx {what}: {count} batches done", file=sys.stderr)
