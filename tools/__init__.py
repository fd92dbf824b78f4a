"""Scripts beside the library, grouped by purpose (``tools/README.md`` lists them).

Run them from the checkout root as ``python -m tools.<group>.<name>``; they import
each other as ``tools.<group>.<name>``, and so do the tests (pytest puts the checkout
root on ``sys.path``). Not installed with specfx.
"""

from pathlib import Path

# The checkout the scripts belong to: where the docs they write live, and the directory a
# subprocess they start must run in (or have on PYTHONPATH) to import ``tools`` again.
CHECKOUT = Path(__file__).resolve().parent.parent
