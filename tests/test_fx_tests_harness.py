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
