"""Tracing leaves the world as it found it.

Computing example values runs the model's ops for real: train-mode BatchNorm
updates its running statistics, Dropout draws random numbers, in-place ops
write to their inputs. ``preserved_state`` snapshots what may change (RNG
states, ``training`` flags, buffers) and restores it afterwards, also when
tracing fails; example inputs are cloned before they reach the model; and
parameters are copied lazily, just before an op that may write to them.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from typing import Any, Dict, Iterator, List, Tuple

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ._evaluation import INPLACE_FUNCTIONS

__all__ = ["StateKeeper", "clone_example", "preserved_state"]


def _clone_tensor(tensor: torch.Tensor) -> torch.Tensor:
    copy = tensor.detach().clone()
    if tensor.requires_grad:  # only float/complex tensors can require grad, so this is valid
        copy.requires_grad_(True)
    return copy


def clone_example(value: Any) -> Any:
    """A copy of an example input whose tensors can be written to freely."""
    return pytree.tree_map_only(torch.Tensor, _clone_tensor, value)


class StateKeeper:
    """Remembers a module's mutable state and puts it back.

    ``protect(tensor)`` is called before an op that may write to ``tensor``:
    a parameter is copied the first time (buffers are copied up front).
    """

    def __init__(self, root: Any, *, copy_parameters: bool = False, runs_ops: bool = True) -> None:
        self._module = root if isinstance(root, torch.nn.Module) else None
        self._rng = torch.get_rng_state()
        self._python_rng = random.getstate()
        self._cuda_rng = (
            torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        )
        # Each module's attributes and its parameter/buffer/submodule tables, shallowly:
        # code that assigns `self.cache = x` or `self.count = self.count + 1` while traced
        # would otherwise leave proxies (or new tensors) on the user's model.
        self._tables: List[Tuple[str, torch.nn.Module, Dict[str, Any], Dict[str, Any], Dict[str, Any], Dict[str, Any]]] = []
        # buffers grouped by (dtype, device), each group copied as one flat tensor: one copy
        # and one comparison per group instead of one per buffer (a ResNet-50 has 159)
        self._buffers: List[Tuple[List[torch.Tensor], torch.Tensor]] = []
        self._params: Dict[int, Tuple[str, torch.Tensor, int]] = {}
        self._param_copies: Dict[int, torch.Tensor] = {}
        self.assigned: List[str] = []  # "module.attr" names forward bound to traced values
        if self._module is not None:
            self._tables = [
                (name, m, dict(m.__dict__), dict(m._parameters), dict(m._buffers), dict(m._modules))
                for name, m in self._module.named_modules()
                if not isinstance(m, torch.jit.ScriptModule)  # C++-backed tables; Python code cannot rebind them
            ]
            if runs_ops:  # without example inputs no op runs, so no tensor can change
                groups: Dict[Tuple[Any, Any], List[torch.Tensor]] = {}
                for index, buffer in enumerate(self._module.buffers()):
                    if buffer.device.type == "meta":
                        continue
                    plain = buffer.layout is torch.strided and not buffer.is_quantized
                    # quantized/sparse buffers cannot be concatenated: a group of their own
                    groups.setdefault((buffer.dtype, buffer.device) if plain else index, []).append(buffer)
                self._buffers = [(group, _flat(group).clone()) for group in groups.values()]
            for name, param in self._module.named_parameters():
                self._params[id(param)] = (name, param, param._version)
                if copy_parameters:  # for eager runs, whose in-place writes specfx cannot see coming
                    self.protect(param)

    def protect(self, value: Any) -> None:
        """Copy ``value`` if it is one of the module's parameters not copied yet."""
        if not isinstance(value, torch.Tensor):
            return
        key = id(value)
        if key in self._params and key not in self._param_copies and value.device.type != "meta":
            self._param_copies[key] = value.detach().clone()

    def restore(self) -> None:
        """Put RNG states, module attributes (``training`` flags included), buffers and parameters back."""
        torch.set_rng_state(self._rng)
        random.setstate(self._python_rng)
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state_all(self._cuda_rng)
        for name, module, attributes, parameters, buffers, children in self._tables:
            for live, saved in ((module.__dict__, attributes), (module._parameters, parameters),
                                (module._buffers, buffers), (module._modules, children)):
                for key, value in _restore_table(live, saved):
                    qualified = f"{name}.{key}" if name else key
                    if not _updates_in_place(value, qualified):
                        self.assigned.append(qualified)
        with torch.no_grad():
            for group, saved in self._buffers:
                # Compare values, not version counters: BatchNorm's kernel updates its running
                # statistics in place without bumping their version.
                if len(group) == 1:
                    if not torch.equal(group[0], saved):
                        group[0].copy_(saved)
                elif not torch.equal(_flat(group), saved):
                    offset = 0
                    for buffer in group:
                        part = saved[offset: offset + buffer.numel()].view(buffer.shape)
                        if not torch.equal(buffer, part):
                            buffer.copy_(part)
                        offset += buffer.numel()
            lost = []
            for key, (name, param, version) in self._params.items():
                saved = self._param_copies.get(key)
                if saved is not None:
                    if not torch.equal(param, saved):
                        param.copy_(saved)
                elif param._version != version:
                    lost.append(name)
        if lost:
            warnings.warn(
                f"tracing changed parameter(s) {', '.join(lost)} in place and specfx could not undo it "
                f"(the write happened inside an op it cannot see into); reload the state_dict",
                RuntimeWarning,
                stacklevel=3,
            )


_ABSENT = object()


def _flat(tensors: List[torch.Tensor]) -> torch.Tensor:
    if len(tensors) == 1:
        return tensors[0].detach()
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _updates_in_place(value: Any, qualified: str) -> bool:
    """``self.steps += 1``: the proxy bound back is an in-place op on that very attribute,
    which the graph performs, so no state is lost."""
    node = value.node
    first = node.args[0] if node.args else None
    return (isinstance(first, torch.fx.Node) and first.op == "get_attr" and first.target == qualified
            and (node.target in INPLACE_FUNCTIONS or (isinstance(node.target, str) and node.target.endswith("_"))))


def _restore_table(live: Dict[str, Any], saved: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """Make ``live`` hold exactly the objects ``saved`` held (by identity); return
    the (key, proxy) pairs that had been bound to traced values."""
    if live.keys() == saved.keys() and all(live[k] is v for k, v in saved.items()):
        return []
    traced = [(k, v) for k, v in live.items() if isinstance(v, torch.fx.Proxy) and saved.get(k) is not v]
    # Key by key, never clear(): other threads may be running this module meanwhile.
    for key in [k for k in live if k not in saved]:
        del live[key]
    for key, value in saved.items():
        if live.get(key, _ABSENT) is not value:
            live[key] = value
    return traced


@contextlib.contextmanager
def preserved_state(root: Any, *, copy_parameters: bool = False, runs_ops: bool = True) -> Iterator[StateKeeper]:
    """Snapshot ``root``'s mutable state and the RNGs; restore them on exit.
    ``copy_parameters`` copies every parameter up front (for runs specfx does not trace);
    ``runs_ops=False`` (a symbolic trace) skips the tensor copies."""
    keeper = StateKeeper(root, copy_parameters=copy_parameters, runs_ops=runs_ops)
    try:
        yield keeper
    finally:
        keeper.restore()
