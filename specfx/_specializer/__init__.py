"""Layer 7 — ``Specializer``: trace on first call, re-specialize when a guard fails, one
``Variant`` per specialization with its prologue."""
