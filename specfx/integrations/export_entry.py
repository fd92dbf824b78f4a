"""The entry of an exported program's module: specfx's checks before torch.export's.

``ep.module()`` checks its inputs in torch.export's words (``Guard failed: x.size()[0] == 2``,
a tree-spec mismatch, ``forward() got an unexpected keyword argument``), and some of what a
specfx graph checks at entry it does not check at all (an input traced as ``None`` given a
tensor, a tensor given a float). So the module of a program :func:`specfx.export` made
checks first, with specfx's :class:`~specfx.GuardError` (the assumption, the value, the
user's line):

- the inputs' structure and leaf kinds, as the specfx graph's entry does
  (``_graph/structure.py``'s ``flatten_inputs``);
- the decisions on the inputs themselves that export fixes for the whole program: a
  Python input's value, ``is None``, a non-tensor's type, a tensor input's sizes, rank,
  layout, dtype, type and attributes.

What export fixed from other decisions (a size derived from a split count, a view) still
fails in torch.export's check; its error is translated (:func:`translate_guards`).

The checks are in the module's generated code, so they survive PT2E's ``prepare_pt2e`` and
``convert_pt2e`` (which rebuild the module from its graph) and ``copy.deepcopy``; a forward
pre-hook registered first runs them on the module ``ep.module()`` returns, before torch's
own pre-hook. ``program.module`` (and ``run_decompositions``, whose program gets the same)
of the returned program are this program's own functions; ``torch.export.save``/``load``
make a program without them.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import torch
import torch.fx
from torch.fx.graph import _PyTreeCodeGen

from .. import guards
from .._graph.report import list_decisions
from .._graph.structure import StructuredCodeGen, flatten_inputs
from .._policy.messages import export_input_check_failure
from ..errors import GuardError

__all__ = ["EntryChecks", "ExportInputError", "entry_checks", "install"]

# guards on an input itself that export fixes for the whole program: checked at entry
_ON_PYTHON_INPUTS = frozenset({guards.guard_value, guards.guard_is_none, guards.guard_is_tensor,
                               guards.guard_type, guards.guard_len, guards.guard_keys})
_ON_TENSOR_INPUTS = frozenset({guards.guard_shape, guards.guard_size, guards.guard_ndim, guards.guard_numel,
                               guards.guard_is_none, guards.guard_layout, guards.guard_dtype,
                               guards.guard_device, guards.guard_type, guards.guard_has_attr})


class ExportInputError(GuardError, AssertionError):
    """torch.export's input check of an exported specfx program failed: a GuardError in
    specfx's words, and still the AssertionError torch.export raises."""


class EntryChecks:
    """What an exported module checks at entry: the traced parameters, input structure and
    leaf kinds, and guards on input leaves (guard, leaf position, the guard's other arguments)."""

    def __init__(self, parameters: Tuple[str, ...], spec: Any, kinds: Optional[str],
                 checks: Tuple[Tuple[Callable[..., None], int, tuple], ...]) -> None:
        self.parameters = parameters
        self.spec = spec
        self.kinds = kinds
        self.checks = checks

    def __call__(self, values: Tuple[Any, ...]) -> None:
        leaves = flatten_inputs(values, self.spec, self.kinds)
        for guard, position, rest in self.checks:
            guard(leaves[position], *rest)


def entry_checks(gm: torch.fx.GraphModule) -> Optional[EntryChecks]:
    """The entry checks of ``gm``'s exported module (None for a graph without a structured entry)."""
    codegen = gm.graph._codegen
    if not isinstance(codegen, StructuredCodeGen):
        return None
    positions = {node: i for i, node in enumerate(gm.graph.find_nodes(op="placeholder"))}
    checks = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.args or node.args[0] not in positions:
            continue
        tensor = "tensor_meta" in node.args[0].meta
        if node.target in (_ON_TENSOR_INPUTS if tensor else _ON_PYTHON_INPUTS):
            checks.append((node.target, positions[node.args[0]], tuple(node.args[1:])))
    in_spec = codegen.pytree_info.in_spec
    return EntryChecks(tuple(in_spec.context), in_spec, codegen.kinds, tuple(checks))


class ExportEntryCodeGen(_PyTreeCodeGen):
    """torch.export's module code generation with the traced signature, and specfx's entry
    checks before torch's own flattening of the inputs."""

    def __init__(self, torch_codegen: _PyTreeCodeGen, signature: str, entry: EntryChecks) -> None:
        super().__init__(torch_codegen.pytree_info)
        self.signature = signature
        self.entry = entry

    def additional_globals(self) -> List[Tuple[str, Any]]:
        return [("specfx_export_entry", self.entry), *super().additional_globals()]

    def gen_fn_def(self, free_vars: List[str], maybe_return_annotation: str, *, expanded_def: bool = False) -> str:
        head = f"def {self._func_name}(self{', ' if self.signature else ''}{self.signature}){maybe_return_annotation}:"
        values = ", ".join(self.entry.parameters)
        check = f"\n    specfx_export_entry(({values}{',' if values else ''}))"
        if not free_vars:
            return head + check
        return head + check + self.gen_var_bindings(list(self.pytree_info.orig_args), free_vars, expanded_def)


def translate_guards(guards_fn: torch.nn.Module, records: Sequence[Any], parameters: Sequence[str]) -> None:
    """torch.export's input guards (``Guard failed: x.size()[0] == 2``) raise an
    :class:`ExportInputError` naming the decisions on those inputs (on this module only)."""
    check = guards_fn.forward

    @functools.wraps(check)
    def forward(*args: Any) -> Any:
        try:
            return check(*args)
        except AssertionError as error:
            raise _translated(str(error), records, parameters) from error

    guards_fn.forward = forward


def _translated(message: str, records: Sequence[Any], parameters: Sequence[str]) -> GuardError:
    condition = message.removeprefix("Guard failed: ").strip()
    names = [name for name in parameters if re.search(rf"\b{re.escape(name)}\b", condition)]
    related = [r for r in records if set(names) & {*getattr(r, "depends_on", ()), r.node}]
    return ExportInputError(
        export_input_check_failure(condition, ", ".join(names) or "?", list_decisions(related, 8) if related else ""),
        expression=condition, expected=condition, actual="<broken>",
        location=related[0].where if related else "torch.export's input check",
    )


def _bound(signature: inspect.Signature, parameters: Sequence[str], args: tuple, kwargs: dict) -> Optional[tuple]:
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None  # (a call the traced signature refuses: left to the module's own call)
    bound.apply_defaults()
    return tuple(bound.arguments[name] for name in parameters)


def install(program: torch.export.ExportedProgram, gm: torch.fx.GraphModule) -> None:
    """Make ``program.module()`` check its inputs as the specfx graph ``gm`` does (module docstring)."""
    entry = entry_checks(gm)
    if entry is None:
        return
    records = list(getattr(gm, "specializations", []))
    signature = inspect.signature(gm.forward)
    rendered = cast(StructuredCodeGen, gm.graph._codegen).signature  # (entry_checks found one)
    module_of = type(program).module

    def module(check_guards: bool = True) -> torch.fx.GraphModule:
        made = module_of(program, check_guards)
        codegen = made.graph._codegen
        if isinstance(codegen, _PyTreeCodeGen) and codegen.pytree_info is not None:
            made.graph._codegen = ExportEntryCodeGen(codegen, rendered, entry)
            made.recompile()

        def check_entry(_: Any, args: tuple, kwargs: dict) -> None:
            values = _bound(signature, entry.parameters, args, kwargs)
            if values is not None:
                entry(values)

        made.register_forward_pre_hook(check_entry, with_kwargs=True, prepend=True)
        guards_fn = getattr(made, "_guards_fn", None)
        if isinstance(guards_fn, torch.nn.Module):
            translate_guards(guards_fn, records, entry.parameters)
        return made

    decompose = type(program).run_decompositions

    def run_decompositions(*args: Any, **kwargs: Any) -> torch.export.ExportedProgram:
        decomposed = decompose(program, *args, **kwargs)
        install(decomposed, gm)  # (a new program: its module() checks the same entry)
        return decomposed

    module.__doc__ = module_of.__doc__
    run_decompositions.__doc__ = decompose.__doc__
    program.module = module  # type: ignore[method-assign]
    program.run_decompositions = run_decompositions  # (a decorated method: mypy sees an attribute)
