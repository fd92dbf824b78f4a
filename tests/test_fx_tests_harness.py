"""tools/peers/fx_tests.py: PyTorch's TestFX run with specfx in place of torch.fx's tracer,
without and with example inputs (its checkGraphModule traced on the inputs it checks)."""

from __future__ import annotations

import textwrap

import pytest

from tools.peers import fx_tests

SUITE = textwrap.dedent('''
    import unittest

    import torch
    from torch.fx import symbolic_trace


    class TestFX(unittest.TestCase):
        def assertEqual(self, first, second, msg=None):  # tensors, as PyTorch's TestCase compares them
            torch.testing.assert_close(first, second)

        def checkGraphModule(self, m, args, kwargs=None):
            kwargs = kwargs or {}
            gm = symbolic_trace(m)
            self.assertEqual(m(*args, **kwargs), gm(*args, **kwargs))

        def test_optional_input_left_out(self):
            class M(torch.nn.Module):
                def forward(self, x, y=None):
                    return x if y is None else x + y

            self.checkGraphModule(M(), (torch.ones(2),))

        def test_self_inside_star_args(self):
            class M(torch.nn.Module):
                def forward(*args, **kwargs):
                    return torch.relu(args[1])

            with self.assertRaisesRegex(RuntimeError, r"cannot be part of \\*args expansion"):
                self.checkGraphModule(M(), (torch.rand(1), torch.rand(1)), {"foo": torch.rand(1)})


    class TestOther(unittest.TestCase):  # a second class: `--class all` runs it too
        def test_len_of_proxy(self):
            def f(x):
                return len(x)

            with self.assertRaisesRegex(RuntimeError, "'len' is not supported"):
                symbolic_trace(f)

        @unittest.skip("skipped upstream")
        def test_skipped(self):
            pass
''')


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "fx_harness_suite.py"
    path.write_text(SUITE)
    yield str(path)
    fx_tests.uninstall()


@pytest.mark.parametrize("baseline, examples, passed", [
    (True, False, ["test_self_inside_star_args"]),   # stock: `y is None` is False on a Proxy
    (False, False, ["test_self_inside_star_args"]),  # specfx without examples: the same
    (False, True, ["test_optional_input_left_out", "test_self_inside_star_args"]),
])
def test_counts_per_mode(suite, capsys, baseline, examples, passed):
    result = fx_tests.run(suite, baseline=baseline, examples=examples)
    assert sorted(result.passed) == passed and result.testsRun == 2
    header = capsys.readouterr().out.splitlines()[0]
    assert ("with example inputs" in header) == examples


def test_all_classes_with_a_total(suite, capsys):
    result = fx_tests.run(suite, class_name=fx_tests.ALL)
    out = capsys.readouterr().out
    assert "fx_compat: TestFX from" in out and "fx_compat: TestOther from" in out
    assert "fx_compat: all 2 classes: 4 run: 2 passed, 0 failed, 1 errors, 1 skipped" in out
    assert fx_tests.outcomes(result) == {
        "TestFX.test_optional_input_left_out": "ERROR",
        "TestFX.test_self_inside_star_args": "passed",
        "TestOther.test_len_of_proxy": "passed",
        "TestOther.test_skipped": "skipped",
    }


def test_compare_runs_three_modes_and_lists_differences(suite, capsys):
    # each mode in a process of its own; specfx with examples passes one test more than stock,
    # which is listed but is no difference
    status = fx_tests.compare(suite, fx_tests.ALL)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| stock `torch.fx` | 4 | 2 | 0 | 1 | 1 |" in out
    assert "| specfx, no example inputs | 4 | 2 | 0 | 1 | 1 |" in out
    assert "| specfx, `checkGraphModule` with example inputs | 4 | 3 | 0 | 0 | 1 |" in out
    assert "PASSES ONLY WITH EXAMPLES TestFX.test_optional_input_left_out: stock ERROR" in out
    assert "every test has stock's outcome in every mode" in out


def test_compare_fails_on_a_difference(suite, capsys, monkeypatch):
    # a specfx mode that lost a test stock passes is a difference: exit status 1, test named
    real_run = fx_tests.subprocess_outcomes

    def losing(command):
        found = real_run(command)
        if "--baseline" not in command:
            found["TestOther.test_len_of_proxy"] = "FAIL"
        return found

    monkeypatch.setattr(fx_tests, "subprocess_outcomes", losing)
    assert fx_tests.compare(suite, fx_tests.ALL) == 1
    out = capsys.readouterr().out
    assert ("DIFFERS (specfx, no example inputs) TestOther.test_len_of_proxy: stock passed, specfx FAIL"
            in out)
    assert "2 outcomes differ from stock" in out
