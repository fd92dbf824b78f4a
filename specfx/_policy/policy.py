"""What may be specialized: the ``Specialize`` flags and the immutable ``Policy``.

A policy is a *layer*: it grants some flags and may explicitly deny others.
Layers stack (the trace policy, then matching ``scopes`` of the submodules
being traced, then ``@specialize`` annotations, in the order the code enters
them) and the innermost layer that names a flag decides it. ``resolve``
folds a stack of layers into the flags in force and remembers which layer
decided each flag, so errors can say which policy or decorator was in force.
"""

from __future__ import annotations

import builtins  # `bool` is shadowed by the keyword of Policy.__init__
import enum
import fnmatch
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Optional, Tuple, Union

__all__ = ["FLAG_KEYWORDS", "Policy", "Specialize", "resolve", "Layer", "Resolved"]


class Specialize(enum.Flag):
    """The properties of traced values that may be baked into a graph.

    ============  =====================================================  ==========================
    member        baked in                                               guarded by
    ============  =====================================================  ==========================
    ``ITER_LEN``  the number of elements: iteration, ``*t``, ``len()``   length == traced length
    ``BOOL``      truth of a value: ``if``/``while``/``and``/``assert``  truth == traced truth
    ``SHAPES``    ``.shape``/``.size()``/``.dim()``/``.numel()`` as ints  shape == traced shape
    ``SCALARS``   ``int()``/``float()``/``.item()``/``.tolist()`` of data  value == traced value
    ============  =====================================================  ==========================

    ``NONE`` is plain ``torch.fx`` behaviour and ``ALL`` is every flag.

    >>> Specialize.ITER_LEN | Specialize.BOOL
    <Specialize.ITER_LEN|BOOL: 3>
    >>> Specialize.BOOL in Specialize.ALL
    True
    """

    NONE = 0
    ITER_LEN = 1
    BOOL = 2
    SHAPES = 4
    SCALARS = 8
    ALL = 15


# One table maps decorator/policy keywords to flags; everything else derives from it.
FLAG_KEYWORDS: Mapping[str, Specialize] = MappingProxyType(
    {
        "iter": Specialize.ITER_LEN,
        "bool": Specialize.BOOL,
        "shapes": Specialize.SHAPES,
        "scalars": Specialize.SCALARS,
    }
)
_KEYWORD_OF_FLAG = {flag: keyword for keyword, flag in FLAG_KEYWORDS.items()}


def keyword_of(flag: Specialize) -> str:
    """The keyword (``iter``, ``bool``, ...) that grants ``flag``."""
    return _KEYWORD_OF_FLAG[flag]


def _single_flags(flags: Specialize) -> list[Specialize]:
    return [flag for flag in _KEYWORD_OF_FLAG if flag in flags]


def parse_flags(spec: Union[Specialize, str]) -> Specialize:
    """Turn a ``Specialize`` or a string such as ``"iter,bool"`` into flags.

    Strings list keywords (``iter``, ``bool``, ``shapes``, ``scalars``) or
    member names (``ITER_LEN``, ``ALL``, ``NONE``), separated by ``,`` or ``|``.

    >>> parse_flags("iter, bool")
    <Specialize.ITER_LEN|BOOL: 3>
    """
    if isinstance(spec, Specialize):
        return spec
    if not isinstance(spec, str):
        raise TypeError(
            f"flags must be a specfx.Specialize or a string like 'iter,bool'; "
            f"got {spec!r} ({type(spec).__name__})"
        )
    flags = Specialize.NONE
    for word in spec.replace("|", ",").split(","):
        word = word.strip()
        if not word:
            continue
        if word.lower() in FLAG_KEYWORDS:
            flags |= FLAG_KEYWORDS[word.lower()]
        elif word.upper() in Specialize.__members__:
            flags |= Specialize[word.upper()]
        else:
            allowed = ", ".join([*FLAG_KEYWORDS, *Specialize.__members__])
            raise ValueError(f"unknown specialization flag {word!r}; allowed: {allowed}")
    return flags


def _check_optional_bool(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(
            f"{name}= takes True, False or None; got {value!r} ({type(value).__name__})"
        )


def _flags_from_keywords(
    flags: Union[Specialize, str], keywords: Mapping[str, Optional[bool]]
) -> tuple[Specialize, Specialize]:
    """(granted, denied) from a flags argument plus ``iter=``/``bool=``/... keywords."""
    granted = parse_flags(flags)
    denied = Specialize.NONE
    for name, value in keywords.items():
        _check_optional_bool(name, value)
        flag = FLAG_KEYWORDS[name]
        if value is True:
            granted |= flag
            denied &= ~flag
        elif value is False:
            granted &= ~flag
            denied |= flag
    return granted, denied


class Policy:
    """An immutable statement of what may be specialized while tracing.

    ``flags`` grants :class:`Specialize` members (a string like
    ``"iter,bool"`` works too); the keywords ``iter=``, ``bool=``,
    ``shapes=``, ``scalars=`` grant (``True``) or explicitly deny (``False``)
    one flag and override ``flags``. A denial matters when policies are
    layered: inside ``scopes`` or ``@specialize`` the innermost layer that
    names a flag decides it.

    ``param_shapes_constant`` lets shapes of module parameters be read as
    ints (as ``torch.fx.Tracer(param_shapes_constant=True)``); ``scopes`` maps
    module qualified-name globs (``"encoder.layers.*"``) to the policy that
    applies inside matching submodules (the most specific pattern wins);
    ``annotations=False`` ignores ``@specialize`` in model code.

    Policies compare, hash and combine: ``a | b`` layers ``b`` over ``a``
    (flags ``b`` names win, like ``dict | dict``).

    >>> Policy(Specialize.ITER_LEN) == Policy(iter=True)
    True
    >>> Policy(Specialize.ALL, scalars=False)
    Policy(iter=True, bool=True, shapes=True, scalars=False)
    >>> Policy(iter=True) | Policy(bool=True)
    Policy(iter=True, bool=True)
    >>> Policy(scopes={"blocks.*": Policy(bool=True)}).scopes["blocks.*"]
    Policy(bool=True)
    """

    __slots__ = ("_granted", "_denied", "_param_shapes_constant", "_scopes", "_annotations", "_hash")

    _granted: Specialize
    _denied: Specialize
    _param_shapes_constant: bool
    _scopes: Tuple[Tuple[str, "Policy"], ...]
    _annotations: bool
    _hash: int

    def __init__(
        self,
        flags: Union[Specialize, str] = Specialize.NONE,
        *,
        iter: Optional[bool] = None,
        bool: Optional[bool] = None,
        shapes: Optional[bool] = None,
        scalars: Optional[bool] = None,
        param_shapes_constant: builtins.bool = False,
        scopes: Mapping[str, "Policy"] = MappingProxyType({}),
        annotations: builtins.bool = True,
    ) -> None:
        granted, denied = _flags_from_keywords(
            flags, {"iter": iter, "bool": bool, "shapes": shapes, "scalars": scalars}
        )
        if not isinstance(param_shapes_constant, builtins.bool):
            raise TypeError(
                f"param_shapes_constant= takes True or False; got {param_shapes_constant!r}"
            )
        if not isinstance(annotations, builtins.bool):
            raise TypeError(f"annotations= takes True or False; got {annotations!r}")
        self._set_parts(granted, denied, param_shapes_constant, _validate_scopes(scopes), annotations)

    @property
    def flags(self) -> Specialize:
        """The flags this policy grants."""
        return self._granted

    @property
    def denied(self) -> Specialize:
        """The flags this policy explicitly forbids (``iter=False`` and friends)."""
        return self._denied

    @property
    def param_shapes_constant(self) -> builtins.bool:
        """Whether parameter shapes may be read as ints."""
        return self._param_shapes_constant

    @property
    def scopes(self) -> Mapping[str, "Policy"]:
        """Module qualified-name glob -> policy inside matching submodules (read-only)."""
        return MappingProxyType(dict(self._scopes))

    @property
    def annotations(self) -> builtins.bool:
        """Whether ``@specialize`` annotations in model code are honoured."""
        return self._annotations

    def allows(self, flag: Specialize) -> builtins.bool:
        """Whether every flag in ``flag`` is granted.

        >>> Policy(iter=True).allows(Specialize.ITER_LEN)
        True
        """
        return flag in self._granted

    def scope_for(self, qualified_name: str) -> Optional["Policy"]:
        """The scope policy for the submodule ``qualified_name``: the most
        specific matching pattern (fewest wildcards, then longest), or None.

        >>> Policy(scopes={"a.*": Policy(bool=True)}).scope_for("a.0")
        Policy(bool=True)
        """
        match = _match_scope(self._scopes, qualified_name)
        return match[1] if match else None

    def scope_match(self, *qualified_names: str) -> Optional[Tuple[str, "Policy"]]:
        """``(pattern, policy)`` of :meth:`scope_for`, or None; given several names (a
        submodule registered twice), the most specific pattern matching any of them."""
        matches = [m for m in (_match_scope(self._scopes, name) for name in qualified_names) if m is not None]
        return max(matches, key=lambda item: _specificity(item[0])) if matches else None

    def __or__(self, other: object) -> "Policy":
        if isinstance(other, Specialize):
            other = Policy(other)
        if not isinstance(other, Policy):
            return NotImplemented
        return Policy._from_parts(
            (self._granted & ~other._denied) | other._granted,
            (self._denied & ~other._granted) | other._denied,
            self._param_shapes_constant or other._param_shapes_constant,
            _validate_scopes({**dict(self._scopes), **dict(other._scopes)}),
            self._annotations and other._annotations,
        )

    @classmethod
    def _from_parts(
        cls,
        granted: Specialize,
        denied: Specialize,
        param_shapes_constant: builtins.bool,
        scopes: Tuple[Tuple[str, "Policy"], ...],
        annotations: builtins.bool,
    ) -> "Policy":
        policy = cls.__new__(cls)
        policy._set_parts(granted, denied, param_shapes_constant, scopes, annotations)
        return policy

    def _set_parts(
        self,
        granted: Specialize,
        denied: Specialize,
        param_shapes_constant: builtins.bool,
        scopes: Tuple[Tuple[str, "Policy"], ...],
        annotations: builtins.bool,
    ) -> None:
        parts = (granted, denied, param_shapes_constant, scopes, annotations)
        for name, value in zip(("_granted", "_denied", "_param_shapes_constant", "_scopes", "_annotations"), parts):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_hash", hash(parts))

    def __ror__(self, other: object) -> "Policy":
        # `Specialize.X | policy`: the policy on the right still wins for the flags it names.
        if isinstance(other, Specialize):
            return Policy(other) | self
        return NotImplemented

    def _key(self) -> tuple[Any, ...]:
        return (self._granted, self._denied, self._param_shapes_constant, self._scopes, self._annotations)

    def __eq__(self, other: object) -> builtins.bool:
        if not isinstance(other, Policy):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return self._hash

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Policy is immutable; build a new one (e.g. policy | Policy(bool=True))")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Policy is immutable")

    def __reduce__(self) -> Any:
        return (Policy._from_parts, self._key())

    def __repr__(self) -> str:
        parts = []
        for flag in _single_flags(Specialize.ALL):
            if flag in self._granted:
                parts.append(f"{keyword_of(flag)}=True")
            elif flag in self._denied:
                parts.append(f"{keyword_of(flag)}=False")
        if self._param_shapes_constant:
            parts.append("param_shapes_constant=True")
        if self._scopes:
            inner = ", ".join(f"{pattern!r}: {policy!r}" for pattern, policy in self._scopes)
            parts.append(f"scopes={{{inner}}}")
        if not self._annotations:
            parts.append("annotations=False")
        return f"Policy({', '.join(parts)})"

    def describe_keywords(self) -> str:
        """The granted/denied flags as decorator keywords, e.g. ``iter=True, bool=False``."""
        words = [
            f"{keyword_of(flag)}={flag in self._granted}"
            for flag in _single_flags(self._granted | self._denied)
        ]
        return ", ".join(words)


def _validate_scopes(scopes: Any) -> Tuple[Tuple[str, Policy], ...]:
    if not isinstance(scopes, Mapping):
        raise TypeError(
            f"scopes= takes a mapping of module-name globs to Policy objects, "
            f"e.g. {{'encoder.layers.*': Policy(bool=True)}}; got {type(scopes).__name__}"
        )
    items = []
    for pattern, policy in scopes.items():
        if not isinstance(pattern, str):
            raise TypeError(
                f"scopes keys are module qualified-name globs (str); got {pattern!r} "
                f"({type(pattern).__name__})"
            )
        if not pattern:
            raise ValueError("scopes keys must not be empty; use the trace policy for the root module")
        if isinstance(policy, Specialize):
            policy = Policy(policy)
        if not isinstance(policy, Policy):
            raise TypeError(
                f"scopes[{pattern!r}] must be a Policy (or Specialize); got {type(policy).__name__}"
            )
        if policy._scopes:
            raise ValueError(
                f"scopes[{pattern!r}] has scopes of its own; scopes do not nest - "
                f"write every pattern as a full qualified-name glob in the trace policy"
            )
        items.append((pattern, policy))
    return tuple(sorted(items, key=lambda item: item[0]))


def _specificity(pattern: str) -> tuple[int, int]:
    wildcards = sum(pattern.count(c) for c in "*?[")
    return (-wildcards, len(pattern))


@functools.lru_cache(maxsize=4096)
def _match_scope(
    scopes: Tuple[Tuple[str, Policy], ...], name: str
) -> Optional[Tuple[str, Policy]]:
    matches = [(pattern, policy) for pattern, policy in scopes if fnmatch.fnmatchcase(name, pattern)]
    if not matches:
        return None
    return max(matches, key=lambda item: _specificity(item[0]))


class Layer(NamedTuple):
    """One entry of the stack of policies in force: a policy and where it came from
    (``"trace(policy=...)"``, ``"@specialize(iter=True) on Block.forward"``, ...)."""

    policy: Policy
    origin: str


class Resolved(NamedTuple):
    """The flags in force for a stack of layers, and which layer decided each flag."""

    flags: Specialize
    param_shapes_constant: bool
    deciders: Tuple[Tuple[Specialize, Optional[Layer]], ...]

    def decider(self, flag: Specialize) -> Optional[Layer]:
        """The innermost layer that named ``flag``, or None if no layer did."""
        for candidate, layer in self.deciders:
            if candidate == flag:
                return layer
        return None


@functools.lru_cache(maxsize=4096)
def resolve(layers: Tuple[Layer, ...]) -> Resolved:
    """Fold a stack of layers (outermost first): the innermost naming a flag wins.

    >>> outer = Layer(Policy(iter=True, bool=True), "trace(policy=...)")
    >>> inner = Layer(Policy(bool=False), "@specialize(bool=False) on f")
    >>> resolve((outer, inner)).flags
    <Specialize.ITER_LEN: 1>
    """
    flags = Specialize.NONE
    psc = False
    decided: dict[Specialize, Layer] = {}
    for layer in layers:
        policy = layer.policy
        flags = (flags & ~policy.denied) | policy.flags
        psc = psc or policy.param_shapes_constant
        for flag in _single_flags(policy.flags | policy.denied):
            decided[flag] = layer
    deciders = tuple((flag, decided.get(flag)) for flag in _single_flags(Specialize.ALL))
    return Resolved(flags, psc, deciders)

# pickles of graphs (gm.specfx_policy, records) name them by the public package's path
Policy.__module__ = Specialize.__module__ = "specfx"
