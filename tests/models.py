"""Tiny models shared by the tests. Line numbers of decisions are looked up
with ``line_of`` so that tests pin messages without hard-coding numbers."""

from __future__ import annotations

import inspect
import os

import torch
from torch import nn


def line_of(obj: object, text: str) -> int:
    """The line number of the first source line of ``obj`` containing ``text``."""
    lines, start = inspect.getsourcelines(obj)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in the source of {obj!r}")


# How specfx prints this file's name in messages (relative to the working directory).
MODELS_FILE = os.path.relpath(__file__)


class SplitCat(nn.Module):
    """The seed example."""

    def call_cat(self, *args):
        return torch.cat(args, dim=1)

    def forward(self, x):
        x = torch.split(x, 2, dim=1)
        return self.call_cat(*x)


class Branchy(nn.Module):
    """A shape predicate and a data predicate."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 1:
            x = x - x.mean(dim=0, keepdim=True)
        y = self.lin(x)
        if y.sum() > 0:
            return y.relu()
        return -y


class Flatten(nn.Module):
    """Reads shapes: x.view(x.size(0), -1) * x.shape[1]."""

    def forward(self, x):
        return x.view(x.size(0), -1) * x.shape[1]


class Scalars(nn.Module):
    """Reads numbers from data."""

    def forward(self, x):
        n = int(x.sum())
        return x * n, x.max().item()


class Loop(nn.Module):
    """Iterates over the rows of its input."""

    def forward(self, x):
        total = 0
        for row in torch.unbind(x):
            total = total + row
        return total


class Optional(nn.Module):
    """Takes an optional mask."""

    def forward(self, x, mask=None):
        if mask is not None:
            x = x * mask
        return x + 1
