"""Layer 2 — what may be baked in, and how specfx says so: the flags and the immutable
``Policy`` (``policy``), ``@specialize`` scopes (``scope``), naming values in the user's terms
(``describe``) and the wording of every refusal, guard failure, entry check and export
failure (``messages``).

``Policy`` and ``Specialize`` are re-exported here because graphs pickled by 0.2 name them
``specfx._policy.Policy``/``Specialize``.
"""

from .policy import Policy, Specialize

__all__ = ["Policy", "Specialize"]
