"""Import path of 0.1: graphs pickled by specfx 0.1 name ``specfx._guards.Specialization``.

The guards now live in :mod:`specfx.guards`, the records in ``specfx._decisions``.
"""

from ._decisions import Specialization
from .guards import GUARDS, describe_identity

__all__ = ["GUARDS", "Specialization", "describe_identity"]
