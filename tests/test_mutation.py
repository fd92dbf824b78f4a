"""The mutation check (tools/testing/mutation.py, docs/testing.md): its mutants still apply to
the code, and a mutant runs in a copy of the checkout, never in the checkout itself."""

from __future__ import annotations

import pytest

from tools.testing import mutation
from tools.testing.mutants import MUTANTS, Mutant


def test_every_mutant_applies_to_the_checkout_exactly_once():
    """A change to specfx/ that moves a mutant's text fails here, naming the mutant to re-anchor."""
    assert len(MUTANTS) >= 20
    assert mutation.check_patches(MUTANTS) == []


def test_a_patch_that_no_longer_applies_is_an_error():
    mutant = Mutant("gone", "nothing", "specfx/guards.py", "text that is not there", "", ("tests/test_guards.py",))
    with pytest.raises(ValueError, match=r"mutant gone: the text to replace occurs 0 times in specfx/guards.py "
                                         r"\(expected once\): re-anchor it"):
        mutant.apply_to("def f():\n    return 1\n")
    assert mutation.check_patches([mutant]) == [
        "mutant gone: the text to replace occurs 0 times in specfx/guards.py (expected once): "
        "re-anchor it in tools/testing/mutants.py"]


def test_a_mutant_is_killed_in_a_copy_and_the_checkout_stays_unchanged(tmp_path, monkeypatch):
    """On a tiny checkout: the mutant's test fails in the copy (killed, by that test), the
    surviving one passes its test and the whole suite (not killed), and neither the checkout
    nor the copy keeps a patched file."""
    (tmp_path / "lib.py").write_text("def double(x):\n    return 2 * x\n\n\ndef name():\n    return 'lib'\n")
    (tmp_path / "test_lib.py").write_text("from lib import double\n\n\ndef test_double():\n"
                                          "    assert double(3) == 6\n")
    before = {path.name: path.read_text() for path in tmp_path.iterdir()}
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    caught = Mutant("doubles-wrong", "double adds", "lib.py", "return 2 * x", "return 2 + x", ("test_lib.py",))
    missed = Mutant("renamed", "name changes", "lib.py", "return 'lib'", "return 'other'", ("test_lib.py",))
    with mutation.Copies(1) as copies, copies.borrow() as copy:
        killed = mutation.run_mutant(copy, caught, whole_suite=True)
        survived = mutation.run_mutant(copy, missed, whole_suite=True)
        assert (copy / "lib.py").read_text() == before["lib.py"]
    assert (killed.killed, killed.by, killed.stage) == (True, "test_lib.py::test_double", "subset")
    assert (survived.killed, survived.stage) == (False, "suite")
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == before
    assert not copies.base.exists()
