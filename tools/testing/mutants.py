"""The mutants of ``python -m tools.testing.mutation``: plausible bugs in the guarantees
specfx makes, each a text patch of one file, and the tests meant to catch it."""

from __future__ import annotations

import dataclasses
from typing import Tuple


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One plausible bug: ``old`` replaced by ``new`` (each must occur exactly once) in
    ``path``; ``tests`` are the pytest node ids that should catch it."""

    name: str
    breaks: str
    path: str
    old: str
    new: str
    tests: Tuple[str, ...]

    def apply_to(self, text: str) -> str:
        """``text`` with the patch applied; ValueError unless ``old`` occurs exactly once."""
        count = text.count(self.old)
        if count != 1:
            raise ValueError(f"mutant {self.name}: the text to replace occurs {count} times in {self.path} "
                             f"(expected once): re-anchor it in tools/testing/mutants.py")
        return text.replace(self.old, self.new)


FAMILY = "tests/test_fuzz.py::test_class_grammar_family_answers_as_eager_or_raises"  # [family] below

MUTANTS = (
    # -- guards: the comparisons graphs run --------------------------------------------------
    Mutant("guard-type-blind", "guards comparing numbers ignore the Python type (2 == 2.0)",
           "specfx/_checks/kinds.py",
           "    if type(actual) is not type(expected):\n        return False\n", "",
           (f"{FAMILY}[numbers]", "tests/test_guards.py")),
    Mutant("guard-shape-larger-only", "the shape guard fires only for a larger shape",
           "specfx/guards.py",
           "lambda: tuple(value.shape))\n    if actual != expected:",
           "lambda: tuple(value.shape))\n    if actual > expected:",
           ("tests/test_guards.py",)),
    Mutant("guard-size-larger-only", "the size(d) guard fires only for a larger size",
           "specfx/guards.py",
           "lambda: value.size(dim))\n    if actual != expected:",
           "lambda: value.size(dim))\n    if actual > expected:",
           (f"{FAMILY}[policy]", "tests/test_guards.py")),
    Mutant("guard-len-larger-only", "the length guard fires only for a longer sequence",
           "specfx/guards.py",
           "lambda: len(value))\n    if actual != expected:",
           "lambda: len(value))\n    if actual > expected:",
           ("tests/test_guards.py",)),
    Mutant("guard-truth-one-way", "the bool guard fires only when the traced answer was True",
           "specfx/guards.py",
           "lambda: bool(value))\n    if actual is not expected:",
           "lambda: bool(value))\n    if actual is not expected and expected:",
           ("tests/test_guards.py",)),
    Mutant("guard-float-signed-zero", "number guards take -0.0 for 0.0",
           "specfx/_checks/kinds.py",
           "return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)",
           "return actual == expected",
           ("tests/test_guards.py", "tests/test_properties.py")),
    Mutant("guard-is-none-silent", "the is-None guard never fires",
           "specfx/guards.py",
           "    if (value is None) is not expected:\n",
           "    if False:\n",
           (f"{FAMILY}[optional]", "tests/test_guards.py")),
    Mutant("guard-type-subclass-blind", "the type guard takes any Tensor subclass for the traced class",
           "specfx/guards.py",
           "    actual = type_name(value)\n    if actual != expected:",
           "    actual = type_name(value)\n    if actual != expected and not isinstance(value, torch.Tensor):",
           (f"{FAMILY}[properties]", "tests/test_guards.py", "tests/test_soundness.py")),
    Mutant("guard-value-type-only", "the guard of a Python input's value compares only its type",
           "specfx/guards.py",
           "    actual = fingerprint(value)\n    if not same_value(actual, expected):",
           "    actual = fingerprint(value)\n    if type(actual) is not type(expected):",
           (f"{FAMILY}[python-values]", "tests/test_guards.py", "tests/test_soundness.py")),
    # -- decisions: policy, records, dedup ----------------------------------------------------
    Mutant("policy-grants-all", "a decision is granted whatever the policy says",
           "specfx/_capture/decisions.py",
           "granted = decision.flag is Specialize.NONE or decision.flag in resolved.flags",
           "granted = True",
           ("tests/test_policy.py", "tests/test_scope.py")),
    Mutant("policy-denial-ignored", "a layer's flag=False does not take back an outer grant",
           "specfx/_policy/policy.py",
           "flags = (flags & ~policy.denied) | policy.flags",
           "flags = flags | policy.flags",
           ("tests/test_policy.py", "tests/test_scope.py")),
    Mutant("dedup-ignores-inplace", "a value changed in place is not decided again (dedup key loses the version)",
           "specfx/_capture/decisions.py",
           "        key = (*key, _stamp(value_of(subject)))\n",
           "        key = (*key, None)\n",
           (f"{FAMILY}[inplace]", "tests/test_soundness.py")),
    Mutant("dedup-ignores-arguments", "size(0) and size(1) of one tensor count as one decision",
           "specfx/_capture/decisions.py",
           "key = decision.key or (subject.node, decision.kind, decision.expected[:-1])",
           "key = decision.key or (subject.node, decision.kind)",
           ("tests/test_guards.py", "tests/test_soundness.py")),
    Mutant("dtype-guard-not-emitted", "a dtype read is recorded but not guarded",
           "specfx/_capture/decisions.py",
           "        if self._emit_guards:\n",
           "        if self._emit_guards and decision.kind is not GuardKind.DTYPE:\n",
           ("tests/test_guards.py", "tests/test_soundness.py")),
    Mutant("grad-mode-not-guarded", "torch.is_grad_enabled() read by the model is not decided",
           "specfx/_capture/tracer.py",
           "        self.decide(Decision(proxy, GuardKind.GRAD_ENABLED, Specialize.NONE, mode, (mode,),\n"
           "                             \"torch.is_grad_enabled()\", \"`torch.is_grad_enabled()`\"))\n",
           "",
           (f"{FAMILY}[ambient]", "tests/test_soundness.py")),
    Mutant("try-blocks-unmarked", "ops inside the model's try blocks are not marked (except taken silently)",
           "specfx/_frames/caught.py",
           "model_code and has_exception_handlers(code),",
           "False,",
           (f"{FAMILY}[caught]", "tests/test_soundness.py")),
    Mutant("factories-random-baked", "random factories are not recorded: the example's draw is a constant",
           "specfx/_capture/factories.py",
           '"ones", "rand", "randint", "randn",\n    "randperm", ',
           '"ones",\n    ',
           (f"{FAMILY}[factories]", "tests/test_soundness.py")),
    # -- structure at the graph's entry ------------------------------------------------------
    Mutant("structure-check-skipped", "an input of another structure than traced is flattened anyway",
           "specfx/_graph/structure.py",
           "        if actual != child and not _sizes_being_retraced(flat, actual, child):\n",
           "        if False:\n",
           ("tests/test_structure.py",)),
    Mutant("leaf-kind-check-skipped", "a Python input of another type than traced is accepted",
           "specfx/_graph/structure.py",
           "        traced = _check_leaf(leaf, kind, position, spec) or traced\n",
           "        continue\n",
           ("tests/test_structure.py", "tests/test_options.py")),
    # -- tracing never changes the user's objects ----------------------------------------------
    Mutant("state-requires-grad", "requires_grad flipped by forward is not put back (the warning says it is)",
           "specfx/_capture/state.py",
           "                param.requires_grad_(requires_grad)\n",
           "",
           ("tests/test_state.py",)),
    Mutant("state-grad", "a .grad forward replaced is not put back",
           "specfx/_capture/state.py",
           "                param.grad = grad\n",
           "",
           ("tests/test_state.py",)),
    Mutant("state-python-rng", "Python's random state drawn from during the trace is not put back",
           "specfx/_capture/state.py",
           "        random.setstate(self._python_rng)\n",
           "",
           ("tests/test_state.py",)),
    Mutant("state-attributes", "module attributes forward assigned are not put back",
           "specfx/_capture/state.py",
           "            self._restore_tables()\n",
           "            pass\n",
           ("tests/test_state.py",)),
    Mutant("state-cow-off", "an in-place op writes the user's parameter (no copy-on-write)",
           "specfx/_capture/state.py",
           "        if not self._state:\n            return value\n",
           "        return value\n",
           ("tests/test_state.py",)),
    Mutant("state-inputs-not-cloned", "example inputs reach the model uncloned",
           "specfx/_capture/state.py",
           "    if isinstance(value, torch.Tensor):\n        result: Any = _clone_tensor(value)\n",
           "    if isinstance(value, torch.Tensor):\n        return value\n",
           ("tests/test_state.py",)),
    Mutant("state-rng-advanced", "random ops draw from the user's generator (advancing it)",
           "specfx/_capture/state.py",
           "        source = torch.default_generator if user is None else user\n",
           "        return torch.default_generator if user is None else user\n",
           ("tests/test_state.py",)),
    # -- check_inputs, export, Specializer ----------------------------------------------------
    Mutant("check-inputs-requires-grad", "check_inputs does not compare requires_grad",
           "specfx/_trace/check.py",
           "            if want.requires_grad != got.requires_grad:",
           "            if False:",
           ("tests/test_options.py", "tests/test_trace.py")),
    Mutant("export-number-type-blind", "the exported item/tolist checks ignore the number's type",
           "specfx/_checks/lowered.py",
           "            if not isinstance(number, list) and actual != traced:\n",
           "            if False:\n",
           ("tests/test_export.py",)),
    Mutant("export-item-lowering-empty", "the exported item guard checks nothing",
           "specfx/_checks/lowered.py",
           "    GuardKind.ITEM: _typed(_number_check(lambda tensor: tensor)),",
           "    GuardKind.ITEM: lambda *args: None,",
           ("tests/test_export.py",)),
    Mutant("export-len-lowering-empty", "the exported length guard checks nothing",
           "specfx/_checks/lowered.py",
           "    if isinstance(value, torch.Tensor):  # len() of a tensor is its first dimension\n"
           "        return _check_size(value, 0, expected, what, where)\n",
           "    if isinstance(value, torch.Tensor):  # len() of a tensor is its first dimension\n"
           "        return None\n",
           ("tests/test_export.py",)),
    Mutant("export-dtype-lowering-empty", "the exported dtype guard checks nothing at run time",
           "specfx/_checks/lowered.py",
           "        torch.ops.aten._assert_tensor_metadata.default(value, **{field: expected})\n",
           "",
           ("tests/test_export.py",)),
    Mutant("specializer-key-ignores-mode", "the Specializer's variants are shared by train and eval mode",
           "specfx/_specializer/specializer.py",
           "        mode = self._model.training if isinstance(self._model, torch.nn.Module) else None\n",
           "        mode = None\n",
           ("tests/test_specializer.py",)),
)
