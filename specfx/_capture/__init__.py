"""Layer 5 — the trace loop: the tracer and the narrow ``TraceSession`` protocol its helpers
see (``session``), value-demand hooks (``demands``), the one place decisions go
(``decisions``), values, evaluation and deferral, state keeping, the one place for global
patches, held tensors, ambient reads, factories, roots and transformers support.
"""
