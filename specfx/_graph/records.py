"""The records a traced graph carries (``gm.specializations``, ``gm.specfx_policy``,
the ops traced inside the model's ``try`` blocks)
through ``copy.deepcopy`` and ``torch.save``/``torch.load``, in any order.

torch.fx keeps an attribute across ``deepcopy`` when it is listed in
``gm.meta["_user_preserved_attributes"]``, and across pickling when it is in the
module's ``__dict__``; but unpickling rebuilds the module with an empty ``meta``,
so a loaded graph's deep copy would lose its records. So a graph holding records
pickles through :func:`rebuild_graph_module`, which runs torch.fx's own loader and
then lists the records as preserved again; and every copy of such a graph (a
deepcopy hook, kept by deepcopy) pickles the same way.

The override is set on the graph's own class: every ``GraphModule`` instance has a
class of its own (torch.fx sets ``forward`` on it), so no other module is touched.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
from torch.fx.graph_module import _USER_PRESERVED_ATTRIBUTES_KEY, reduce_graph_module

from .._frames import caught as _caught

__all__ = ["RECORDS", "keep_records", "rebuild_graph_module"]

# the attributes specfx.trace stores on a graph
RECORDS = ("specializations", "specfx_policy", _caught.ATTRIBUTE)


def keep_records(gm: torch.nn.Module) -> None:
    """Make ``gm``'s records (the attributes in :data:`RECORDS` it has) survive
    deepcopy and pickling, and so for every copy made of it."""
    meta: Dict[str, Any] = gm.meta  # type: ignore[assignment]  # (a GraphModule's, torch.fx's or Brevitas')
    preserved = meta.setdefault(_USER_PRESERVED_ATTRIBUTES_KEY, {})
    for name in RECORDS:
        if name in gm.__dict__:
            preserved[name] = gm.__dict__[name]
    if not isinstance(gm, torch.fx.GraphModule):
        return  # (Brevitas' GraphModule: its deepcopy honours the preserved list; its pickling is its own)
    type(gm).__reduce__ = _reduce  # type: ignore[method-assign]
    if keep_records not in gm._deepcopy_hooks:
        gm._deepcopy_hooks.append(keep_records)


def _reduce(self: torch.fx.GraphModule) -> Tuple[Any, ...]:
    _, arguments = torch.fx.GraphModule.__reduce__(self)
    return rebuild_graph_module, arguments


def rebuild_graph_module(body: Dict[str, Any], import_block: str) -> torch.nn.Module:
    """Unpickle a graph saved with records: torch.fx's loader, then the records
    listed as preserved again (the loaded module's ``meta`` starts empty)."""
    gm = reduce_graph_module(body, import_block)
    keep_records(gm)
    return gm


keep_records.__module__ = rebuild_graph_module.__module__ = "specfx"  # pickles name them by the public path
