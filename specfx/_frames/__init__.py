"""Layer 1 — reading the user's Python: source lines, bytecode, who reads a value's class,
the ``try`` blocks around an op.

Every piece of per-CPython-version knowledge lives behind this fence. Modules here import
nothing of specfx but :mod:`specfx.errors`.
"""
