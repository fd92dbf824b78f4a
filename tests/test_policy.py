"""Tests for ``specfx.Specialize``, ``specfx.Policy`` and ``specfx._policy.policy.resolve``."""

from __future__ import annotations

import copy
import enum
import functools
import operator
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specfx
from specfx import Policy, Specialize
from specfx._policy.policy import Layer, resolve

SINGLE_FLAGS = [Specialize.ITER_LEN, Specialize.BOOL, Specialize.SHAPES, Specialize.SCALARS]
KEYWORDS = {"iter": Specialize.ITER_LEN, "bool": Specialize.BOOL, "shapes": Specialize.SHAPES,
            "scalars": Specialize.SCALARS}

# -- strategies ------------------------------------------------------------------------------

# Property tests stay small so the whole file runs in about a second.
quick = settings(max_examples=40, deadline=None)

tri_state = st.sampled_from([None, True, False])
flag_sets = st.integers(min_value=0, max_value=15).map(Specialize)
keyword_values = st.fixed_dictionaries({name: tri_state for name in KEYWORDS})
patterns = st.sampled_from(["a", "a.*", "a.b", "a.b.*", "*", "enc.layers.?", "dec.[0-9]"])


@st.composite
def flat_policies(draw):
    """Policies without scopes (the only kind a scope may hold)."""
    return Policy(
        draw(flag_sets),
        **draw(keyword_values),
        param_shapes_constant=draw(st.booleans()),
        annotations=draw(st.booleans()),
    )


# A small space of policies, many spelled in different ways, so random pairs are often equal.
few_policies = st.builds(
    lambda flags, iter_, bool_, annotations: Policy(flags, iter=iter_, bool=bool_, annotations=annotations),
    st.sampled_from([Specialize.NONE, Specialize.ITER_LEN, Specialize.ITER_LEN | Specialize.BOOL]),
    st.sampled_from([None, True]),
    tri_state,
    st.booleans(),
)


@st.composite
def policies(draw):
    """Any policy, possibly with a few scopes."""
    scopes = draw(st.dictionaries(patterns, flat_policies(), max_size=3))
    return Policy(
        draw(flag_sets),
        **draw(keyword_values),
        param_shapes_constant=draw(st.booleans()),
        scopes=scopes,
        annotations=draw(st.booleans()),
    )


def state_of(policy: Policy, flag: Specialize):
    """True if granted, False if denied, None if the policy does not name ``flag``."""
    if flag in policy.flags:
        return True
    if flag in policy.denied:
        return False
    return None


class TestSpecialize:
    """``Specialize``: the enum.Flag of what may be baked in."""

    def test_is_an_enum_flag(self):
        """Specialize is an enum.Flag, so members combine with ``|`` and test with ``in``."""
        assert issubclass(Specialize, enum.Flag)
        assert Specialize.BOOL in (Specialize.ITER_LEN | Specialize.BOOL)
        assert Specialize.SHAPES not in (Specialize.ITER_LEN | Specialize.BOOL)

    def test_member_values(self):
        """Each single flag is its own bit, NONE is 0 and ALL is every bit."""
        assert [f.value for f in SINGLE_FLAGS] == [1, 2, 4, 8]
        assert Specialize.NONE.value == 0
        assert Specialize.ALL.value == 15

    def test_all_is_the_union_of_every_flag(self):
        """ALL is exactly ITER_LEN | BOOL | SHAPES | SCALARS."""
        assert Specialize.ALL == functools.reduce(operator.or_, SINGLE_FLAGS)
        assert all(flag in Specialize.ALL for flag in SINGLE_FLAGS)

    def test_none_is_falsy_and_contained_in_everything(self):
        """NONE grants nothing: it is falsy and no single flag is in it."""
        assert not Specialize.NONE
        assert not any(flag in Specialize.NONE for flag in SINGLE_FLAGS)

    def test_members_by_name(self):
        """Members are reachable by their documented names."""
        assert set(Specialize.__members__) == {"NONE", "ITER_LEN", "BOOL", "SHAPES", "SCALARS", "ALL"}
        assert Specialize["ITER_LEN"] is Specialize.ITER_LEN

    def test_exported_from_package(self):
        """Specialize and Policy are importable from the top-level package."""
        assert specfx.Specialize is Specialize
        assert specfx.Policy is Policy


class TestPolicyFlags:
    """``Policy``: flags and keyword overrides."""

    def test_default_grants_nothing(self):
        """Policy() grants and denies nothing and honours annotations."""
        policy = Policy()
        assert policy.flags == Specialize.NONE
        assert policy.denied == Specialize.NONE
        assert policy.param_shapes_constant is False
        assert dict(policy.scopes) == {}
        assert policy.annotations is True

    def test_flags_equal_keywords(self):
        """Policy(Specialize.ITER_LEN) is the same policy as Policy(iter=True)."""
        assert Policy(Specialize.ITER_LEN) == Policy(iter=True)
        assert hash(Policy(Specialize.ITER_LEN)) == hash(Policy(iter=True))

    @pytest.mark.parametrize("keyword", list(KEYWORDS))
    def test_each_keyword_grants_its_flag(self, keyword):
        """Each keyword maps one-to-one to its flag."""
        assert Policy(**{keyword: True}).flags == KEYWORDS[keyword]
        assert Policy(**{keyword: True}) == Policy(KEYWORDS[keyword])

    def test_keyword_false_overrides_flags_and_records_denial(self):
        """Policy(ALL, iter=False) drops ITER_LEN and records it as denied."""
        policy = Policy(Specialize.ALL, iter=False)
        assert policy.flags == Specialize.BOOL | Specialize.SHAPES | Specialize.SCALARS
        assert policy.denied == Specialize.ITER_LEN
        assert not policy.allows(Specialize.ITER_LEN)

    def test_denial_distinguishes_from_unset(self):
        """iter=False is a different policy from not naming iter at all."""
        assert Policy(iter=False) != Policy()
        assert Policy(iter=False).flags == Policy().flags

    def test_keyword_true_adds_to_flags(self):
        """A True keyword adds its flag to the flags argument."""
        assert Policy(Specialize.BOOL, iter=True).flags == Specialize.BOOL | Specialize.ITER_LEN

    def test_none_keyword_leaves_flags(self):
        """A keyword given as None changes nothing."""
        assert Policy(Specialize.ALL, iter=None, bool=None) == Policy(Specialize.ALL)

    def test_allows(self):
        """allows() is true only when every requested flag is granted."""
        policy = Policy(iter=True, bool=True)
        assert policy.allows(Specialize.ITER_LEN)
        assert policy.allows(Specialize.ITER_LEN | Specialize.BOOL)
        assert not policy.allows(Specialize.ITER_LEN | Specialize.SHAPES)
        assert policy.allows(Specialize.NONE)

    def test_describe_keywords(self):
        """describe_keywords() spells the named flags as decorator keywords."""
        assert Policy(iter=True, bool=False).describe_keywords() == "iter=True, bool=False"
        assert Policy().describe_keywords() == ""

    @quick
    @given(flags=flag_sets, keywords=keyword_values)
    def test_keyword_semantics(self, flags, keywords):
        """True grants, False denies and None keeps what ``flags`` says, for every flag."""
        policy = Policy(flags, **keywords)
        for name, flag in KEYWORDS.items():
            value = keywords[name]
            if value is None:
                assert (flag in policy.flags) == (flag in flags)
                assert flag not in policy.denied
            else:
                assert (flag in policy.flags) is value
                assert (flag in policy.denied) is (not value)
        assert not (policy.flags & policy.denied)


class TestPolicyStrings:
    """``Policy``: flags given as strings."""

    def test_keyword_list(self):
        """Policy("iter,bool") grants ITER_LEN and BOOL."""
        assert Policy("iter,bool") == Policy(iter=True, bool=True)

    def test_member_name(self):
        """Policy("ALL") is Policy(Specialize.ALL)."""
        assert Policy("ALL") == Policy(Specialize.ALL)

    def test_mixed_separators_spaces_and_case(self):
        """Keywords and member names mix, with ``,`` or ``|``, spaces and any case."""
        assert Policy("ITER_LEN | shapes, Bool") == Policy(iter=True, shapes=True, bool=True)

    def test_empty_string_is_none(self):
        """An empty string grants nothing."""
        assert Policy("") == Policy()

    def test_string_combines_with_keywords(self):
        """Keywords override a string flags argument like any other."""
        assert Policy("ALL", scalars=False) == Policy(Specialize.ALL, scalars=False)

    def test_unknown_word_lists_allowed_values(self):
        """An unknown word raises ValueError naming it and listing every allowed value."""
        with pytest.raises(ValueError, match=r"unknown specialization flag 'shape'; allowed: "
                                             r"iter, bool, shapes, scalars, NONE, ITER_LEN, BOOL, "
                                             r"SHAPES, SCALARS, ALL"):
            Policy("iter,shape")


class TestPolicyValidation:
    """``Policy``: bad arguments fail up front with clear messages."""

    @pytest.mark.parametrize("keyword", list(KEYWORDS))
    @pytest.mark.parametrize("value", [1, 0, "yes"])
    def test_non_bool_flag_keyword(self, keyword, value):
        """A flag keyword that is not True/False/None raises TypeError naming it and the value."""
        with pytest.raises(TypeError, match=rf"{keyword}= takes True, False or None; got {value!r} "
                                            rf"\({type(value).__name__}\)"):
            Policy(**{keyword: value})

    def test_non_bool_param_shapes_constant(self):
        """param_shapes_constant must be a bool."""
        with pytest.raises(TypeError, match=r"param_shapes_constant= takes True or False; got 1"):
            Policy(param_shapes_constant=1)

    def test_non_bool_annotations(self):
        """annotations must be a bool."""
        with pytest.raises(TypeError, match=r"annotations= takes True or False; got None"):
            Policy(annotations=None)

    @pytest.mark.parametrize("flags", [3, None, [Specialize.BOOL]])
    def test_bad_flags_type(self, flags):
        """flags must be a Specialize or a string."""
        with pytest.raises(TypeError, match=r"flags must be a specfx.Specialize or a string like 'iter,bool'"):
            Policy(flags)

    def test_unknown_keyword(self):
        """An unknown keyword is a TypeError naming it."""
        with pytest.raises(TypeError, match="shape"):
            Policy(shape=True)

    def test_flag_keywords_are_keyword_only(self):
        """Only ``flags`` is positional."""
        with pytest.raises(TypeError):
            Policy(Specialize.ALL, True)

    @pytest.mark.parametrize("scopes", [[("a.*", Policy())], "a.*", None])
    def test_scopes_not_a_mapping(self, scopes):
        """scopes must be a mapping, and the message shows an example."""
        with pytest.raises(TypeError, match=r"scopes= takes a mapping of module-name globs to Policy objects, "
                                            r"e\.g\. \{'encoder\.layers\.\*': Policy\(bool=True\)\}"):
            Policy(scopes=scopes)

    def test_scope_key_not_str(self):
        """A scope key that is not a string raises TypeError showing it."""
        with pytest.raises(TypeError, match=r"scopes keys are module qualified-name globs \(str\); got 0 \(int\)"):
            Policy(scopes={0: Policy()})

    @pytest.mark.parametrize("value", [True, "bool", None, {"bool": True}])
    def test_scope_value_not_policy(self, value):
        """A scope value that is not a Policy (or Specialize) raises TypeError naming the pattern."""
        with pytest.raises(TypeError, match=r"scopes\['a\.\*'\] must be a Policy \(or Specialize\); got "):
            Policy(scopes={"a.*": value})

    def test_empty_pattern(self):
        """An empty scope pattern raises ValueError pointing to the trace policy."""
        with pytest.raises(ValueError, match=r"scopes keys must not be empty; use the trace policy for the root"):
            Policy(scopes={"": Policy(bool=True)})

    def test_nested_scopes(self):
        """A scope policy with scopes of its own raises ValueError: scopes do not nest."""
        inner = Policy(scopes={"b": Policy(bool=True)})
        with pytest.raises(ValueError, match=r"scopes\['a'\] has scopes of its own; scopes do not nest"):
            Policy(scopes={"a": inner})

    def test_scope_value_may_be_specialize(self):
        """A Specialize scope value is taken as Policy(flags)."""
        assert Policy(scopes={"a": Specialize.BOOL}) == Policy(scopes={"a": Policy(bool=True)})


class TestPolicyValueObject:
    """``Policy``: immutable, hashable, comparable, picklable, readable."""

    @pytest.mark.parametrize("name", ["flags", "denied", "scopes", "annotations", "_granted", "anything"])
    def test_setattr_raises(self, name):
        """Setting any attribute raises AttributeError and leaves the policy unchanged."""
        policy = Policy(iter=True)
        with pytest.raises(AttributeError, match="Policy is immutable"):
            setattr(policy, name, Specialize.ALL)
        assert policy == Policy(iter=True)

    def test_delattr_raises(self):
        """Deleting an attribute raises AttributeError."""
        with pytest.raises(AttributeError, match="Policy is immutable"):
            del Policy(iter=True)._granted

    def test_scopes_view_is_read_only(self):
        """The scopes mapping cannot be written through."""
        policy = Policy(scopes={"a": Policy(bool=True)})
        with pytest.raises(TypeError):
            policy.scopes["b"] = Policy()  # type: ignore[index]
        assert list(policy.scopes) == ["a"]

    def test_scopes_are_copied(self):
        """Mutating the dict passed as scopes afterwards does not change the policy."""
        scopes = {"a": Policy(bool=True)}
        policy = Policy(scopes=scopes)
        scopes["b"] = Policy(iter=True)
        del scopes["a"]
        assert dict(policy.scopes) == {"a": Policy(bool=True)}

    def test_scope_order_does_not_matter(self):
        """Policies with the same scopes in a different insertion order are equal and hash equal."""
        one = Policy(scopes={"a": Policy(bool=True), "b.*": Policy(iter=True)})
        two = Policy(scopes={"b.*": Policy(iter=True), "a": Policy(bool=True)})
        assert one == two
        assert hash(one) == hash(two)

    def test_usable_as_dict_key_and_in_sets(self):
        """Equal policies collapse in a set and find each other's dict entries."""
        table = {Policy(iter=True): "iter", Policy(Specialize.ALL, bool=False): "no-bool"}
        assert table[Policy(Specialize.ITER_LEN)] == "iter"
        assert table[Policy("ALL", bool=False)] == "no-bool"
        assert len({Policy(iter=True), Policy("iter"), Policy(Specialize.ITER_LEN)}) == 1

    def test_not_equal_to_other_types(self):
        """A policy is not equal to its flags or to None."""
        assert Policy(iter=True) != Specialize.ITER_LEN
        assert Policy() != None  # noqa: E711

    @pytest.mark.parametrize(
        ("policy", "text"),
        [
            (Policy(), "Policy()"),
            (Policy(iter=True), "Policy(iter=True)"),
            (Policy(Specialize.ALL), "Policy(iter=True, bool=True, shapes=True, scalars=True)"),
            (Policy(Specialize.ALL, iter=False), "Policy(iter=False, bool=True, shapes=True, scalars=True)"),
            (Policy(bool=True, iter=True), "Policy(iter=True, bool=True)"),
            (Policy(shapes=False, param_shapes_constant=True, annotations=False),
             "Policy(shapes=False, param_shapes_constant=True, annotations=False)"),
            (Policy(scopes={"b": Policy(iter=True), "a.*": Policy(bool=False)}),
             "Policy(scopes={'a.*': Policy(bool=False), 'b': Policy(iter=True)})"),
        ],
    )
    def test_repr(self, policy, text):
        """repr is written in Policy's own keywords, flags in table order and scopes sorted."""
        assert repr(policy) == text

    @quick
    @given(policy=policies())
    def test_repr_round_trips(self, policy):
        """repr is valid Python that builds an equal policy."""
        assert eval(repr(policy), {"Policy": Policy}) == policy

    def test_pickle_round_trip_with_denials_and_scopes(self):
        """Pickling keeps granted and denied flags, scopes and options."""
        policy = Policy(Specialize.ALL, iter=False, param_shapes_constant=True, annotations=False,
                        scopes={"enc.*": Policy(bool=False), "dec": Policy(iter=True)})
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            back = pickle.loads(pickle.dumps(policy, protocol=protocol))
            assert back == policy
            assert hash(back) == hash(policy)
            assert back.denied == Specialize.ITER_LEN
            assert back.scope_for("enc.0") == Policy(bool=False)
            with pytest.raises(AttributeError):
                back.flags = Specialize.NONE  # type: ignore[misc]

    def test_copy_and_deepcopy(self):
        """copy and deepcopy give equal policies."""
        policy = Policy(iter=False, scopes={"a": Policy(bool=True)})
        assert copy.copy(policy) == policy
        assert copy.deepcopy(policy) == policy

    @quick
    @given(policy=policies())
    def test_pickle_round_trip_property(self, policy):
        """Any policy survives pickling."""
        back = pickle.loads(pickle.dumps(policy))
        assert back == policy
        assert hash(back) == hash(policy)
        assert repr(back) == repr(policy)

    @quick
    @given(flags=flag_sets, keywords=keyword_values, psc=st.booleans(), annotations=st.booleans())
    def test_equal_construction_equal_hash(self, flags, keywords, psc, annotations):
        """Building a policy twice from the same arguments gives equal policies with equal hashes."""
        one = Policy(flags, **keywords, param_shapes_constant=psc, annotations=annotations)
        two = Policy(flags, **keywords, param_shapes_constant=psc, annotations=annotations)
        assert one == two
        assert hash(one) == hash(two)

    @quick
    @given(one=few_policies, two=few_policies)
    def test_equality_is_by_content(self, one, two):
        """Two policies are equal exactly when their flags, denials, options and scopes are, and
        equal policies hash equal."""
        same = (one.flags, one.denied, one.param_shapes_constant, dict(one.scopes), one.annotations) == (
            two.flags, two.denied, two.param_shapes_constant, dict(two.scopes), two.annotations)
        assert (one == two) is same
        if same:
            assert hash(one) == hash(two)


class TestPolicyCombine:
    """``Policy.__or__``: layering one policy over another."""

    def test_grants_union(self):
        """Flags from both sides are granted."""
        assert Policy(iter=True) | Policy(bool=True) == Policy(iter=True, bool=True)

    def test_right_denial_wins(self):
        """A flag the right side denies is removed and stays recorded as denied."""
        combined = Policy(Specialize.ALL) | Policy(iter=False)
        assert combined == Policy(Specialize.ALL, iter=False)
        assert combined.denied == Specialize.ITER_LEN

    def test_right_grant_wins_over_left_denial(self):
        """A flag the right side grants overrides a denial on the left."""
        combined = Policy(iter=False, bool=False) | Policy(iter=True)
        assert combined == Policy(iter=True, bool=False)

    def test_unnamed_flags_keep_left_state(self):
        """Flags the right side does not name keep the left side's grant or denial."""
        assert Policy(iter=True, bool=False) | Policy(shapes=True) == Policy(iter=True, bool=False, shapes=True)

    def test_policy_or_specialize(self):
        """Policy | Specialize treats the flags as Policy(flags)."""
        assert Policy(iter=False) | Specialize.ITER_LEN == Policy(iter=True)
        assert Policy(iter=True) | Specialize.BOOL == Policy(iter=True, bool=True)

    def test_specialize_or_policy_grants(self):
        """Specialize | Policy gives a Policy with both sides' grants."""
        combined = Specialize.BOOL | Policy(iter=True)
        assert isinstance(combined, Policy)
        assert combined == Policy(iter=True, bool=True)

    def test_specialize_or_policy_right_side_wins(self):
        """In Specialize | Policy the right-hand Policy's named flags win, as for Policy | Policy."""
        assert Specialize.ITER_LEN | Policy(iter=False) == Policy(Specialize.ITER_LEN) | Policy(iter=False)

    def test_scopes_merge_right_wins(self):
        """Scopes merge by pattern and the right side's policy wins for a shared pattern."""
        left = Policy(scopes={"a": Policy(bool=True), "b": Policy(iter=True)})
        right = Policy(scopes={"b": Policy(iter=False), "c": Policy(shapes=True)})
        assert dict((left | right).scopes) == {
            "a": Policy(bool=True), "b": Policy(iter=False), "c": Policy(shapes=True)}

    def test_options(self):
        """param_shapes_constant is on if either side turns it on; annotations off if either turns it off."""
        assert (Policy() | Policy(param_shapes_constant=True)).param_shapes_constant is True
        assert (Policy(param_shapes_constant=True) | Policy()).param_shapes_constant is True
        assert (Policy() | Policy(annotations=False)).annotations is False
        assert (Policy(annotations=False) | Policy()).annotations is False

    def test_operands_unchanged(self):
        """Combining builds a new policy and leaves both operands as they were."""
        left, right = Policy(iter=True), Policy(bool=False)
        combined = left | right
        assert combined is not left and combined is not right
        assert left == Policy(iter=True) and right == Policy(bool=False)

    @pytest.mark.parametrize("other", [3, "iter", None])
    def test_unsupported_operand(self, other):
        """Combining with something that is not a Policy or Specialize is a TypeError."""
        with pytest.raises(TypeError):
            Policy() | other
        with pytest.raises(TypeError):
            other | Policy()

    @quick
    @given(left=policies(), right=policies())
    def test_named_flags_of_right_win(self, left, right):
        """For every flag the result has the right side's state if it names the flag, else the left's."""
        combined = left | right
        for flag in SINGLE_FLAGS:
            want = state_of(right, flag)
            assert state_of(combined, flag) == (state_of(left, flag) if want is None else want)

    @quick
    @given(a=policies(), b=policies(), c=policies())
    def test_associative(self, a, b, c):
        """(a | b) | c == a | (b | c)."""
        assert (a | b) | c == a | (b | c)

    @quick
    @given(policy=policies(), flags=flag_sets)
    def test_or_specialize_is_or_policy(self, policy, flags):
        """policy | flags == policy | Policy(flags)."""
        assert policy | flags == policy | Policy(flags)

    @quick
    @given(policy=policies())
    def test_empty_policy_is_identity(self, policy):
        """Layering Policy() on either side changes nothing."""
        assert policy | Policy() == policy
        assert Policy() | policy == policy


class TestPolicyScopes:
    """``Policy.scope_for`` / ``Policy.scope_match``: the most specific pattern wins."""

    POLICY = Policy(scopes={
        "*": Policy(scalars=True),
        "enc.*": Policy(iter=True),
        "enc.layers.*": Policy(bool=True),
        "enc.layers.0": Policy(shapes=True),
        "dec.?": Policy(bool=False),
    })

    @pytest.mark.parametrize(
        ("name", "pattern"),
        [
            ("enc.layers.0", "enc.layers.0"),  # no wildcard beats any wildcard
            ("enc.layers.1", "enc.layers.*"),  # one wildcard each: the longer pattern wins
            ("enc.norm", "enc.*"),
            ("dec.1", "dec.?"),
            ("dec.10", "*"),
            ("head", "*"),
        ],
    )
    def test_most_specific_match(self, name, pattern):
        """scope_match names the winning pattern and scope_for returns its policy."""
        assert self.POLICY.scope_match(name) == (pattern, self.POLICY.scopes[pattern])
        assert self.POLICY.scope_for(name) == self.POLICY.scopes[pattern]

    def test_fewer_wildcards_beat_longer_pattern(self):
        """A pattern with fewer wildcards wins even when it is shorter."""
        policy = Policy(scopes={"a.*.*.c": Policy(iter=True), "a.*": Policy(bool=True)})
        assert policy.scope_match("a.b.b.c")[0] == "a.*"

    def test_no_match(self):
        """A name no pattern matches has no scope."""
        policy = Policy(scopes={"enc.*": Policy(iter=True)})
        assert policy.scope_for("dec.0") is None
        assert policy.scope_match("dec.0") is None
        assert Policy().scope_for("anything") is None

    def test_matching_is_case_sensitive(self):
        """Module names match case-sensitively."""
        assert Policy(scopes={"Enc.*": Policy(iter=True)}).scope_for("enc.0") is None

    @quick
    @given(order=st.permutations(list(POLICY.scopes)),
           name=st.sampled_from(["enc.layers.0", "enc.layers.1", "enc.x", "dec.1", "x", "enc"]))
    def test_insertion_order_does_not_matter(self, order, name):
        """The match depends on the patterns only, not on the order they were given in."""
        reordered = Policy(scopes={pattern: self.POLICY.scopes[pattern] for pattern in order})
        assert reordered.scope_match(name) == self.POLICY.scope_match(name)


class TestResolve:
    """``specfx._policy.policy.resolve``: folding a stack of layers."""

    def test_empty_stack(self):
        """No layers grant nothing and no flag has a decider."""
        resolved = resolve(())
        assert resolved.flags == Specialize.NONE
        assert resolved.param_shapes_constant is False
        assert all(resolved.decider(flag) is None for flag in SINGLE_FLAGS)

    def test_innermost_naming_layer_wins(self):
        """An inner denial removes a flag the outer layer granted; flags it does not name stay."""
        outer = Layer(Policy(iter=True, bool=True), "trace(policy=...)")
        inner = Layer(Policy(bool=False), "@specialize(bool=False) on f")
        resolved = resolve((outer, inner))
        assert resolved.flags == Specialize.ITER_LEN
        assert resolved.decider(Specialize.BOOL) is inner
        assert resolved.decider(Specialize.ITER_LEN) is outer
        assert resolved.decider(Specialize.SHAPES) is None

    def test_inner_grant_overrides_outer_denial(self):
        """An inner grant wins over an outer denial."""
        outer = Layer(Policy(Specialize.ALL, iter=False), "trace(policy=...)")
        inner = Layer(Policy(iter=True), "@specialize(iter=True) on g")
        resolved = resolve((outer, inner))
        assert resolved.flags == Specialize.ALL
        assert resolved.decider(Specialize.ITER_LEN) is inner

    def test_unnamed_layer_does_not_decide(self):
        """A layer that names no flag leaves the deciders of the outer layers."""
        outer = Layer(Policy(bool=True), "outer")
        resolved = resolve((outer, Layer(Policy(), "inner")))
        assert resolved.flags == Specialize.BOOL
        assert resolved.decider(Specialize.BOOL) is outer

    def test_param_shapes_constant_from_any_layer(self):
        """param_shapes_constant holds if any layer sets it."""
        layers = (Layer(Policy(param_shapes_constant=True), "a"), Layer(Policy(), "b"))
        assert resolve(layers).param_shapes_constant is True

    def test_decider_of_combined_flag_is_none(self):
        """decider() answers for single flags; a combination has no single decider."""
        layer = Layer(Policy(Specialize.ALL), "all")
        assert resolve((layer,)).decider(Specialize.ALL) is None

    @quick
    @given(stack=st.lists(flat_policies(), max_size=5))
    def test_matches_left_fold_of_or(self, stack):
        """The flags in force are those of p1 | p2 | ... | pn, and each flag's decider is the
        innermost layer that names it."""
        layers = tuple(Layer(policy, f"layer {index}") for index, policy in enumerate(stack))
        resolved = resolve(layers)
        folded = functools.reduce(operator.or_, stack, Policy())
        assert resolved.flags == folded.flags
        assert resolved.param_shapes_constant == folded.param_shapes_constant
        for flag in SINGLE_FLAGS:
            naming = [layer for layer in layers if state_of(layer.policy, flag) is not None]
            assert resolved.decider(flag) == (naming[-1] if naming else None)
            if naming:
                assert (flag in resolved.flags) is (flag in naming[-1].policy.flags)
