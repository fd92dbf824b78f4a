"""Scripts beside the library: benchmarks, the model zoo, the fuzzer, generators.

One way to run and import them: from the checkout root, ``python -m tools.NAME``;
they import each other as ``tools.NAME`` and the tests ``import tools.NAME``
(pytest puts the checkout root on ``sys.path``). Not installed with specfx.
"""
