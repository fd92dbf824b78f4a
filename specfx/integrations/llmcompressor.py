"""llm-compressor's sequential pipeline on specfx graphs.

llm-compressor (``oneshot(..., pipeline="sequential")``: GPTQ, AWQ, SmoothQuant, W8A8,
W4A16 ...) cuts a model into one subgraph per decoder layer and calibrates them in turn; the
cut needs an FX graph of the model. Its own tracer answers ``len()``, ``bool()`` and ``in``
from meta tensors and wraps data-dependent code into opaque calls, with no guard. With
:func:`use`, the pipeline traces with specfx instead: every answer taken from the first
calibration batch is recorded and guarded, the traced graph is checked against eager on
that batch before calibration starts, and a batch that would take another path raises
``GuardError`` during calibration instead of calibrating a wrong graph::

    import specfx.integrations.llmcompressor as specfx_llmc
    from llmcompressor import oneshot

    with specfx_llmc.use():
        oneshot(model=model, dataset=ds, recipe=GPTQModifier(scheme="W8A8", targets="Linear"),
                pipeline="sequential")

:func:`trace_subgraphs` has llm-compressor's signature and leaf rule (only the ancestors of
the sequential targets are traced into). Importing this module does not import
llm-compressor; using it without llm-compressor raises ``ImportError`` with the install
command. Tested with llmcompressor 0.14.0.1 (its pipeline's private helpers
``topological_partition``, ``partition_graph``, ``trace_consumed_names`` and
``get_sequential_ancestors`` are used as they are; other versions are refused).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import torch

from .._policy.policy import Policy
from .._trace.trace import trace

__all__ = ["SUPPORTED_VERSIONS", "trace_subgraphs", "traced_model", "use"]

# the llmcompressor releases whose pipeline helpers this module was tested against
SUPPORTED_VERSIONS = ("0.14.0.1",)
_DEFAULT_POLICY = Policy(iter=True, bool=True, scalars=True)
_policy: contextvars.ContextVar[Policy] = contextvars.ContextVar("specfx_llmcompressor_policy", default=_DEFAULT_POLICY)


def _llmcompressor() -> Any:
    try:
        import llmcompressor
    except ImportError as error:
        raise ImportError(
            "specfx.integrations.llmcompressor needs llm-compressor: pip install llmcompressor==0.14.0.1 "
            "(install torch first so that pip keeps your torch build)"
        ) from error
    version = getattr(llmcompressor, "__version__", "unknown")
    if version not in SUPPORTED_VERSIONS:
        raise ImportError(
            f"specfx.integrations.llmcompressor is tested with llmcompressor {', '.join(SUPPORTED_VERSIONS)}, "
            f"found {version}: its sequential pipeline's helpers may differ. Install a tested version "
            f"(pip install llmcompressor=={SUPPORTED_VERSIONS[-1]}) or trace with llm-compressor's own tracer."
        )
    return llmcompressor


class _Owner:
    """What a subgraph's code reads as ``self``: the model's modules and tensors first (the
    pipeline passes the model, whose modules it may have wrapped since the trace), then what
    the traced graph holds of its own (constants specfx made), never written to the model."""

    def __init__(self, model: torch.nn.Module, graph: torch.fx.GraphModule) -> None:
        self._model, self._graph = model, graph

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._model, name)
        except AttributeError:
            return getattr(self._graph, name)


def _subgraph_class(helpers: Any) -> Any:
    class SpecfxSubgraph(helpers.Subgraph):  # type: ignore[misc]
        """A partition of a specfx graph: run with the model as ``self`` (as llm-compressor
        runs its own), reading specfx's constants from the traced graph."""

        owner_graph: Optional[torch.fx.GraphModule] = None

        def forward(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
            if args and self.owner_graph is not None:
                args = (_Owner(args[0], self.owner_graph), *args[1:])
            return super().forward(*args, **kwargs)

    return SpecfxSubgraph


def trace_subgraphs(
    model: torch.nn.Module,
    sample_input: Dict[str, Any],
    sequential_targets: List[str],
    ignore: List[str],
    targets_per_subgraph: int = 1,
) -> List[Any]:
    """llm-compressor's ``trace_subgraphs``, tracing with specfx: the model is traced on the
    first calibration batch (its keys are the graph's inputs; parameters no batch provides keep
    their defaults), into the ancestors of the sequential targets only; the graph is checked
    against eager on that batch; then it is cut into subgraphs as llm-compressor cuts its own.

    ``ignore`` (function names llm-compressor's tracer wraps) is not needed: specfx traces
    through such code, recording and guarding what it decides.

    >>> import specfx.integrations.llmcompressor as m
    >>> m.SUPPORTED_VERSIONS
    ('0.14.0.1',)
    """
    _llmcompressor()
    from llmcompressor.pipelines.sequential import helpers

    graph, targets = traced_model(model, sample_input, sequential_targets)
    batch = dict(sample_input)
    partitions = helpers.topological_partition(graph, targets, targets_per_subgraph)
    subgraphs = helpers.partition_graph(model, partitions)
    helpers.trace_consumed_names(subgraphs)
    # Parameters no batch provides keep their defaults in the subgraphs' code (the pipeline's
    # cache never holds them, so it must not be asked to drop them either)
    unfed = {node.name for node in graph.graph.nodes if node.op == "placeholder"} - set(batch)
    specfx_class = _subgraph_class(helpers)
    for subgraph in subgraphs:
        subgraph.__class__ = specfx_class
        subgraph.owner_graph = graph
        subgraph.consumed_names -= unfed
    return subgraphs


def traced_model(model: torch.nn.Module, sample_input: Dict[str, Any],
                 sequential_targets: List[str]) -> Tuple[torch.fx.GraphModule, Set[torch.nn.Module]]:
    """The specfx graph :func:`trace_subgraphs` cuts, and the sequential target modules: the
    model traced on ``sample_input`` (a calibration batch) in llm-compressor's calibration
    context (no cache, eager attention, the head disabled), into the ancestors of the
    targets only, and checked against eager on that batch. The graph runs other batches in
    the same context; a batch that breaks an assumption raises ``GuardError``.

    >>> import specfx.integrations.llmcompressor as m
    >>> callable(m.traced_model)
    True
    """
    _llmcompressor()
    from compressed_tensors.offload import disable_onloading
    from compressed_tensors.utils.match import match_named_modules
    from llmcompressor.modifiers.utils.hooks import HooksMixin
    from llmcompressor.pipelines.sequential import helpers
    from llmcompressor.utils.helpers import calibration_forward_context

    targets = {module for _, module in match_named_modules(model, sequential_targets)}
    ancestors = helpers.get_sequential_ancestors(model, targets)
    leaves = [name for name, module in model.named_modules() if name and module not in ancestors]
    batch = dict(sample_input)
    # llm-compressor's calibration context puts every module back in the root's train/eval
    # mode on exit, not each in its own (modules it added, as offset norms, may differ)
    modes = [(module, module.training) for module in model.modules()]
    with contextlib.ExitStack() as stack:
        stack.callback(_restore_modes, modes)
        stack.enter_context(calibration_forward_context(model))
        stack.enter_context(HooksMixin.disable_hooks())
        stack.enter_context(disable_onloading())
        graph = trace(model, example_kwargs=batch, policy=_policy.get(), leaf_modules=leaves)
        _check_skeleton(model, graph, batch)
    return graph, targets


def _restore_modes(modes: List[Tuple[torch.nn.Module, bool]]) -> None:
    for module, mode in modes:
        if module.training is not mode:
            module.training = mode


def _check_skeleton(model: torch.nn.Module, graph: torch.fx.GraphModule, batch: Dict[str, Any]) -> None:
    """The traced graph returns what the model returns on the batch (the calibration context's
    outputs: the disabled head's logits are meta tensors, compared by shape and dtype)."""
    from .._trace.check import compare_outputs

    expected, actual = model(**batch), graph(**batch)
    problem = compare_outputs(_comparable(expected), _comparable(actual), None)
    if problem:
        raise RuntimeError(
            f"specfx.integrations.llmcompressor: the traced graph of {type(model).__name__} differs from "
            f"the model on the first calibration batch ({problem}); calibrating it would calibrate a "
            f"different model. Please report this with the model's config."
        )


def _comparable(output: Any) -> Any:
    if isinstance(output, torch.Tensor) and output.device.type == "meta":
        return (tuple(output.shape), output.dtype)
    if isinstance(output, dict):
        return {key: _comparable(value) for key, value in output.items()}
    if isinstance(output, (list, tuple)):
        return type(output)(_comparable(value) for value in output) if type(output) in (list, tuple) else \
            tuple(_comparable(value) for value in output)
    return output


@contextlib.contextmanager
def use(policy: Optional[Policy] = None) -> Iterator[None]:
    """Within the ``with`` block, llm-compressor's sequential pipeline traces with specfx
    (:func:`trace_subgraphs`), under ``policy`` (default: ``Policy(Specialize.ALL)``: every
    answer the trace takes from the first batch is allowed, recorded and guarded).

    >>> import specfx.integrations.llmcompressor as m
    >>> callable(m.use)
    True
    """
    _llmcompressor()
    from llmcompressor.pipelines.sequential import pipeline

    # the pipeline module imported the function by name: its global is what the pipeline calls
    previous = pipeline.trace_subgraphs
    token = _policy.set(policy or _DEFAULT_POLICY)
    pipeline.trace_subgraphs = trace_subgraphs
    try:
        yield
    finally:
        pipeline.trace_subgraphs = previous
        _policy.reset(token)
