"""The differential oracles of the soundness tests: a graph must give eager's outputs, eager's
gradients (every leaf's ``.grad``) and eager's writes (inputs, model state) — or raise."""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch


def clone_args(value: Any) -> Any:
    """A deep copy of call arguments that keeps which tensors require grad."""
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone()
        return copied.requires_grad_(True) if value.requires_grad else copied
    if isinstance(value, (list, tuple)):
        return type(value)(clone_args(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_args(v) for k, v in value.items()}
    return copy.deepcopy(value)


def _leaves(value: Any) -> List[torch.Tensor]:
    found = [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    return [t for t in found if t.requires_grad and t.is_leaf]


def _backward(output: Any) -> bool:
    """Backward from a weighted sum of the outputs (so each output's gradient differs)."""
    outputs = [t for t in torch.utils._pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outputs:
        return False
    sum(t.float().sum() * (i + 1) for i, t in enumerate(outputs)).backward()
    return True


def gradients(fn: Callable[..., Any], args: Tuple[Any, ...], module: Any = None, seed: int = 0) -> Any:
    """``fn(*args)``'s output, whether it required grad, and the ``.grad`` of every leaf it
    reached: the tensors in ``args`` that require grad and ``module``'s parameters."""
    torch.manual_seed(seed)
    output = fn(*args)
    requires = _backward(output)
    grads = [None if t.grad is None else t.grad.clone() for t in _leaves(args)]
    if module is not None:
        grads += [None if p.grad is None else p.grad.clone() for p in module.parameters()]
        module.zero_grad(set_to_none=True)
    return output, requires, grads


def assert_same_gradients(eager: Callable[..., Any], graph: Callable[..., Any], args: Tuple[Any, ...],
                          module: Any = None) -> None:
    """The gradient oracle: outputs, requires_grad and every leaf's ``.grad`` are eager's
    (``module``: the parameters both share, the model the graph was traced from)."""
    expected = gradients(eager, clone_args(args), module)
    actual = gradients(graph, clone_args(args), module)
    torch.testing.assert_close(actual[0], expected[0], rtol=0, atol=0)
    assert actual[1] == expected[1], "the graph's output requires grad where eager's does not, or the reverse"
    assert len(actual[2]) == len(expected[2])
    for got, want in zip(actual[2], expected[2]):
        assert (got is None) == (want is None), "a leaf got a gradient from one side only"
        if want is not None:
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def assert_same_writes(eager: Callable[..., Any], graph: Callable[..., Any], args: Tuple[Any, ...]) -> None:
    """The write oracle: the arguments (containers, tensors) after the call are eager's."""
    eager_args, graph_args = clone_args(args), clone_args(args)
    torch.testing.assert_close(graph(*graph_args), eager(*eager_args), rtol=0, atol=0)
    torch.testing.assert_close(graph_args, eager_args, rtol=0, atol=0)


def model_state(module: torch.nn.Module) -> Dict[str, Any]:
    """What a call can leave on a module tree: every module's buffers, and its plain
    attributes that hold tensors or Python values (not its parameters' identities, not
    its hooks), by qualified name; values cloned."""
    state: Dict[str, Any] = {}
    for name, sub in module.named_modules(remove_duplicate=False):
        prefix = f"{name}." if name else ""
        for key, value in sub._buffers.items():
            state[prefix + key] = None if value is None else value.detach().clone()
        for key, value in vars(sub).items():
            if key.startswith("_") or key in ("training", "_modules"):
                continue
            if isinstance(value, torch.Tensor):
                state[prefix + key] = value.detach().clone()
            elif value is None or isinstance(value, (int, float, bool, str)):
                state[prefix + key] = value
    return state


def assert_same_model_state(graph_module: torch.nn.Module, eager_module: torch.nn.Module,
                            written: Sequence[str] = ()) -> None:
    """The write oracle on the model: after a call, the graph module holds at each path what
    the eager model holds (paths the graph never reads may be absent from it; ``written``,
    the paths forward binds, may not; the GraphModule's own attributes are not compared)."""
    got, want = model_state(graph_module), model_state(eager_module)
    assert set(written) <= got.keys(), f"the graph module lacks {sorted(set(written) - got.keys())}"
    for key in got.keys() & want.keys():  # (the GraphModule's own attributes are not the model's)
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, msg=lambda m, k=key: f"`{k}`: {m}")
