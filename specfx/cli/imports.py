"""Imports a command makes on the user's behalf: from the current directory first, as
``python -m`` does (the ``specfx`` console script runs from its own folder), and without the
log lines third-party packages print while they are imported.

>>> import os, sys
>>> with current_directory_importable():
...     sys.path[0] in ("", os.getcwd()) or os.getcwd() in sys.path
True
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Iterator, Tuple

__all__ = ["current_directory_importable", "quiet_import_noise"]


# Log lines third-party packages print while they are imported, which say nothing about the
# user's model: torchao (imported by transformers when it is installed) cannot load its CUDA
# kernels on a CPU build of torch, and registers enums the way torch now deprecates.
_IMPORT_NOISE = (
    ("torchao", ("Failed to load ", "Skipping import of cpp extensions")),
    ("torch.utils._pytree", ("is an Enum subclass and is now natively supported",)),
)


class _DropNoise(logging.Filter):
    def __init__(self, starts: Tuple[str, ...]) -> None:
        super().__init__()
        self._starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(start in message for start in self._starts)


@contextlib.contextmanager
def quiet_import_noise() -> Iterator[None]:
    """Drop the known harmless log lines of third-party imports for this command only."""
    installed = []
    for name, starts in _IMPORT_NOISE:
        drop = _DropNoise(starts)
        logging.getLogger(name).addFilter(drop)
        installed.append((name, drop))
    try:
        yield
    finally:
        for name, drop in installed:
            logging.getLogger(name).removeFilter(drop)


@contextlib.contextmanager
def current_directory_importable() -> Iterator[None]:
    """``python -m specfx`` imports from the current directory (Python puts it first on
    ``sys.path``); the ``specfx`` console script runs from its own folder: put it there too."""
    here = os.getcwd()
    if "" in sys.path or here in sys.path:
        yield
        return
    sys.path.insert(0, here)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(here)
