"""The ChainRules names behave as ChainRules documents them (ChainRulesCore's own tests
are the reference: test/tangent_types/*.jl, test/projection.jl; ChainRulesTestUtils for
the checks). Each test failed before its fix."""

import copy
import itertools
import pickle
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_rrule

Z, N = ad.ZeroTangent(), ad.NoTangent()


@dataclass
class Foo:
    x: float
    y: float


class Pair(NamedTuple):
    a: float
    b: float


# ---- zeros -------------------------------------------------------------------------


def test_iterating_a_zero_gives_it_once_instead_of_hanging():
    # Python iterated through __getitem__, which returns the zero for every index: forever
    # (list(ZeroTangent()) hung); islice keeps this test from hanging if that comes back
    assert list(itertools.islice(Z, 3)) == [Z] and list(itertools.islice(N, 3)) == [N]


def test_no_tangent_wins_addition_and_zero_tangent_wins_multiplication():
    assert N + Z is N and Z + N is N
    assert N - Z is N and Z - N is N
    assert N * Z is Z and Z * N is Z


def test_the_two_zeros_are_not_equal():
    # an assertion that an index got NoTangent() passed on ZeroTangent()
    assert Z != N and N != Z and not (Z == N)
    assert Z == ad.ZeroTangent() and N == ad.NoTangent()


def test_a_zero_converts_to_the_number_zero():
    # ChainRules: convert(Float64, ZeroTangent()) == 0.0, convert(Int64, NoTangent()) == 0
    assert float(Z) == 0.0 and int(N) == 0 and complex(Z) == 0j


# ---- Tangent -----------------------------------------------------------------------


def test_negating_subtracting_and_dividing_a_tangent():
    a, b = ad.Tangent(Foo, x=2.0, y=-2.0), ad.Tangent(Foo, x=1.0)
    assert -a == ad.Tangent(Foo, x=-2.0, y=2.0) == -1.0 * a
    assert a - b == ad.Tangent(Foo, x=1.0, y=-2.0)
    assert ad.Tangent(tuple, 2.0, 3.0) - ad.Tangent(tuple, 1.0, 1.0) == ad.Tangent(tuple, 1.0, 2.0)
    assert a / 2.0 == ad.Tangent(Foo, x=1.0, y=-1.0)
    assert a - Z is a


def test_a_tangent_times_a_zero_is_that_zero():
    t = ad.Tangent(Foo, x=1.0)
    assert t * Z is Z and t * N is N


def test_the_product_of_two_tangents_is_refused():
    # it gave a Tangent of Tangents
    with pytest.raises(TypeError):
        ad.Tangent(Foo, x=2.0) * ad.Tangent(Foo, x=1.0)


def test_tangents_of_different_types_do_not_add():
    with pytest.raises(TypeError, match="different types"):
        ad.Tangent(Foo, x=1.0) + ad.Tangent(Pair, a=1.0)


def test_equality_reads_missing_fields_as_zero_and_thunks_by_value():
    assert ad.Tangent(Foo, y=2.5, x=Z) == ad.Tangent(Foo, y=2.5)
    assert ad.Tangent(tuple, 1.0, 2.0) == ad.Tangent(tuple, 1.0, ad.Thunk(lambda: 2 * 1.0))
    assert ad.Tangent(Foo, x=1.0) != ad.Tangent(Foo, x=1.0, y=1.0)


def test_reading_a_field_evaluates_its_thunk():
    t = ad.Tangent(Pair, a=ad.Thunk(lambda: 2.0 ** 2))
    assert t.a == 4.0 and t["a"] == 4.0 and t.b is Z
    assert ad.Tangent(tuple, ad.Thunk(lambda: 4.0))[0] == 4.0


def test_an_integer_index_reads_the_field_at_that_position():
    t = ad.Tangent(Pair, b=4.0)
    assert t[1] == 4.0 and t[0] is Z


@pytest.mark.parametrize("primal, tangent, expected", [
    (Foo(3.5, 1.5), ad.Tangent(Foo, x=2.5), Foo(6.0, 1.5)),
    ((1.0, 2.0), ad.Tangent(tuple, 1.0, 1.0), (2.0, 3.0)),
    (Pair(1.5, 0.5), ad.Tangent(Pair, a=1.5, b=0.5), Pair(3.0, 1.0)),
    (Pair(1, 2.0), ad.Tangent(Pair, a=N, b=0.1), Pair(1, 2.1)),
    ({"a": 3.0, "b": 2.0}, ad.Tangent(dict, a=5.0), {"a": 8.0, "b": 2.0}),
])
def test_a_primal_plus_its_tangent_is_a_new_primal(primal, tangent, expected):
    assert primal + tangent == expected
    assert tangent + primal == expected
    assert type(primal + tangent) is type(primal)


def test_a_tangent_copies_and_pickles():
    # deepcopy returned ZeroTangent() (the __deepcopy__ lookup read as a missing field);
    # copy and pickle raised 'Tangent is immutable'
    t = ad.Tangent(Foo, x=np.array([1.0]))
    for other in (copy.deepcopy(t), copy.copy(t), pickle.loads(pickle.dumps(t))):
        assert isinstance(other, ad.Tangent) and other == t
    assert not hasattr(t, "__array_interface__")


# ---- Thunk -------------------------------------------------------------------------


def test_arithmetic_on_a_thunk_acts_on_its_value():
    calls = []
    t = ad.Thunk(lambda: calls.append(1) or np.array([1.0, 2.0]))
    assert calls == []  # still lazy
    np.testing.assert_array_equal(t + np.ones(2), [2.0, 3.0])
    np.testing.assert_array_equal(np.ones(2) + t, [2.0, 3.0])
    np.testing.assert_array_equal(2 * t, [2.0, 4.0])
    np.testing.assert_array_equal(t * 2, [2.0, 4.0])
    np.testing.assert_array_equal(-t, [-1.0, -2.0])
    np.testing.assert_array_equal(t / 2, [0.5, 1.0])
    np.testing.assert_array_equal(1 - t, [0.0, -1.0])
    assert t[1] == 2.0
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    assert calls == [1]  # evaluated once
    assert ad.Thunk(lambda: 1.0) + ad.Thunk(lambda: 2.0) == 3.0


def test_a_zero_leaves_a_thunk_unevaluated():
    boom = ad.Thunk(lambda: 1 / 0)
    assert boom + Z is boom and Z + boom is boom
    assert boom * Z is Z and Z * boom is Z


def test_a_thunk_scales_a_tangent():
    c = ad.Tangent(Foo, x=1.5, y=2.0)
    assert ad.Thunk(lambda: 2) * c == 2 * c == c * ad.Thunk(lambda: 2)


# ---- ProjectTo ---------------------------------------------------------------------


def test_projecting_onto_a_named_tuple():
    # NT(generator) raised TypeError: a NamedTuple takes its fields one by one
    p = ad.ProjectTo(Pair(1.0, np.float32(2.0)))
    out = p(Pair(2.0, 3.0))
    assert type(out) is Pair and out.a == 2.0 and type(out.b) is np.float32
    assert p(ad.Tangent(Pair, b=3.0)) == Pair(Z, np.float32(3.0))
    assert p(Z) == Pair(Z, Z)


def test_projecting_a_structural_tangent_onto_a_dict():
    # its values were read as keys ("the cotangent has keys 2.0")
    assert ad.ProjectTo({"a": 1.0, "b": 2.0})(ad.Tangent(dict, a=2.0)) == {"a": 2.0, "b": Z}


def test_a_number_is_projected_to_a_number():
    # a one-element array came back as a 0-d array for a float
    for dx in (np.array([2.0]), np.array(2.0), np.array([[2.0]])):
        out = ad.ProjectTo(1.0)(dx)
        assert not isinstance(out, np.ndarray) and out == 2.0
    out = ad.ProjectTo(np.float32(1.0))(np.array([2.0]))
    assert type(out) is np.float32
    out = ad.ProjectTo(np.array(1.0))(2.0)  # a 0-d array's stays one (ChainRules: fill(dx))
    assert isinstance(out, np.ndarray) and out.shape == () and out == 2.0


# ---- adrules.testing ---------------------------------------------------------------


@ad.primitive
def _power(x, n):
    return x ** n


@pytest.mark.filterwarnings("ignore:rrule for .* registered again")  # one function, three rules
def test_check_rrule_refuses_a_zero_tangent_where_no_tangent_belongs():
    # ChainRulesTestUtils: an argument with no tangent space (an int) and a plain
    # function's self slot get NoTangent(); ZeroTangent() there passed silently
    @ad.rrule.register(_power)
    def zero_for_the_int(x, n):
        return _power(x, n), lambda g: (N, g * n * x ** (n - 1), Z)

    with pytest.raises(AssertionError, match="argument 1 is not differentiable but got cotangent "
                                             r"ZeroTangent\(\); return NoTangent\(\)"):
        check_rrule(_power, np.array([1.5]), 3)

    @ad.rrule.register(_power)
    def zero_for_self(x, n):
        return _power(x, n), lambda g: (Z, g * n * x ** (n - 1), N)

    with pytest.raises(AssertionError, match=r"self slot .* must be NoTangent\(\), got ZeroTangent"):
        check_rrule(_power, np.array([1.5]), 3)

    @ad.rrule.register(_power)
    def right(x, n):
        return _power(x, n), lambda g: (N, g * n * x ** (n - 1), N)

    check_rrule(_power, np.array([1.5]), 3)
