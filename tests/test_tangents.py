"""Tangent types: NoTangent, ZeroTangent, Tangent, Thunk, InplaceableThunk, unthunk."""

import pickle
from dataclasses import dataclass

import numpy as np
import pytest

import adrules as ad

ZEROS = [ad.ZeroTangent, ad.NoTangent]


@dataclass
class Line:
    w: float
    b: float


# ---- the two zeros -----------------------------------------------------------------

@pytest.mark.parametrize("Z", ZEROS)
def test_zero_types_are_singletons(Z):
    assert Z() is Z()
    assert pickle.loads(pickle.dumps(Z())) is Z()


def test_zero_and_no_tangent_are_different():
    assert ad.ZeroTangent() is not ad.NoTangent()
    assert type(ad.ZeroTangent()) is not type(ad.NoTangent())
    assert repr(ad.ZeroTangent()) == "ZeroTangent()" and repr(ad.NoTangent()) == "NoTangent()"


@pytest.mark.parametrize("Z", ZEROS)
@pytest.mark.parametrize("other", [2.5, np.float32(2.5), np.array([1.0, -2.0]), np.ones((2, 3), np.float32)])
def test_zeros_absorb_multiplication(Z, other):
    assert Z() * other is Z()
    assert other * Z() is Z()


@pytest.mark.parametrize("Z", ZEROS)
def test_zeros_vanish_in_addition_with_arrays(Z):
    a = np.array([1.0, -2.0, 3.0])
    for result in (a + Z(), Z() + a):
        assert isinstance(result, np.ndarray)
        np.testing.assert_array_equal(result, [1.0, -2.0, 3.0])
    np.testing.assert_array_equal(a - Z(), [1.0, -2.0, 3.0])
    np.testing.assert_array_equal(Z() - a, [-1.0, 2.0, -3.0])


@pytest.mark.parametrize("Z", ZEROS)
def test_zeros_vanish_in_addition_with_scalars(Z):
    assert Z() + 2.5 == 2.5
    assert 2.5 + Z() == 2.5
    assert np.float32(1.5) + Z() == np.float32(1.5)
    assert 4.0 - Z() == 4.0
    assert Z() - 4.0 == -4.0


@pytest.mark.parametrize("Z", ZEROS)
def test_numpys_linear_ufuncs_of_a_zero_are_what_its_operators_give(Z):
    # a rule writing np.conj(dx) or np.multiply(dx, c) got "does not support ufuncs"
    a = np.array([1.0, -2.0])
    for ufunc in (np.conj, np.negative, np.positive):
        assert ufunc(Z()) is Z()
    assert np.multiply(Z(), a) is Z() and np.multiply(a, Z()) is Z() and np.matmul(a, Z()) is Z()
    assert np.divide(Z(), a) is Z()
    np.testing.assert_array_equal(np.add(a, Z()), a)
    np.testing.assert_array_equal(np.subtract(Z(), a), -a)
    out = np.zeros(2)
    assert np.add(Z(), a, out=out) is out and out.tolist() == [1.0, -2.0]  # out= is written
    assert (a == Z()) is False and (a != Z()) is True
    with pytest.raises(TypeError):  # exp of a zero tangent is no tangent: not silently 1
        np.exp(Z())
    with pytest.raises(TypeError):
        np.divide(a, Z())


@ad.primitive
def _scaled(x, c):
    return x * c


@ad.frule.register(_scaled)
def _scaled_frule(tangents, x, c):
    _, dx, dc = tangents  # dc is a zero when c is a constant
    return _scaled(x, c), np.add(np.multiply(dx, np.conj(c)), np.multiply(np.conj(x), dc))


def test_a_users_frule_written_with_numpy_ufuncs_takes_zero_tangents_of_constants():
    x, c = np.array([0.5, -1.5]), np.array([2.0, 3.0])
    dx = np.array([1.0, 0.25])
    _, jx = ad.jvp(lambda x: _scaled(x, c), (x,), (dx,))
    np.testing.assert_allclose(jx, (_scaled(x + 1e-6 * dx, c) - _scaled(x - 1e-6 * dx, c)) / 2e-6, rtol=1e-8)
    _, jc = ad.jvp(lambda c: _scaled(x, c), (c,), (dx,))
    np.testing.assert_allclose(jc, x * dx, rtol=1e-12)


def test_float32_array_plus_zero_keeps_dtype():
    a = np.ones(3, np.float32)
    assert (a + ad.ZeroTangent()).dtype == np.float32
    assert (ad.ZeroTangent() + a).dtype == np.float32


def test_zero_plus_zero_is_zero():
    assert ad.ZeroTangent() + ad.ZeroTangent() is ad.ZeroTangent()
    assert -ad.ZeroTangent() is ad.ZeroTangent()


@pytest.mark.parametrize("Z", ZEROS)
def test_zeros_are_falsy_and_index_to_themselves(Z):
    assert not Z()
    assert Z()[0] is Z()


# ---- structural tangents -----------------------------------------------------------

def test_tangent_attribute_and_item_access():
    t = ad.Tangent(Line, w=2.0, b=-1.0)
    assert t.w == 2.0 and t["w"] == 2.0
    assert t.b == -1.0 and t["b"] == -1.0


def test_tangent_missing_fields_are_zero():
    t = ad.Tangent(Line, w=2.0)
    assert t.b is ad.ZeroTangent()
    assert t["b"] is ad.ZeroTangent()


def test_tangent_addition_merges_fields():
    s = ad.Tangent(Line, w=2.0) + ad.Tangent(Line, w=1.0, b=3.0)
    assert s.w == 3.0 and s.b == 3.0
    assert isinstance(s, ad.Tangent)
    assert s.primal_type is Line


def test_tangent_addition_with_arrays():
    s = ad.Tangent(Line, w=np.array([1.0, 2.0])) + ad.Tangent(Line, w=np.array([10.0, 20.0]), b=1.0)
    np.testing.assert_array_equal(s.w, [11.0, 22.0])
    assert s.b == 1.0


def test_tangent_plus_zero_is_itself():
    t = ad.Tangent(Line, w=2.0)
    assert (t + ad.ZeroTangent()).w == 2.0
    assert (ad.ZeroTangent() + t).w == 2.0


def test_positional_tangent_items():
    t = ad.Tangent(tuple, 1.0, 2.0)
    assert t[0] == 1.0 and t[1] == 2.0
    s = t + ad.Tangent(tuple, 10.0, 20.0)
    assert s[0] == 11.0 and s[1] == 22.0


def test_tangent_scaling():
    t = ad.Tangent(Line, w=2.0, b=3.0) * 2.0
    assert t.w == 4.0 and t.b == 6.0


def test_tangent_equality():
    assert ad.Tangent(Line, w=np.array([1.0])) == ad.Tangent(Line, w=np.array([1.0]))
    assert ad.Tangent(Line, w=np.array([1.0])) != ad.Tangent(Line, w=np.array([2.0]))


def test_tangent_is_immutable():
    t = ad.Tangent(Line, w=1.0)
    with pytest.raises(TypeError):
        t.w = 3.0


# ---- thunks ------------------------------------------------------------------------------

def test_thunk_is_lazy_and_evaluated_once():
    calls = []

    def compute():
        calls.append(1)
        return np.array([1.0, 2.0]) * 3

    t = ad.Thunk(compute)
    assert calls == []
    np.testing.assert_array_equal(ad.unthunk(t), [3.0, 6.0])
    np.testing.assert_array_equal(ad.unthunk(t), [3.0, 6.0])
    assert len(calls) == 1


def test_nested_thunk_unthunks_fully():
    t = ad.Thunk(lambda: ad.Thunk(lambda: 5.0))
    assert ad.unthunk(t) == 5.0


@pytest.mark.parametrize("x", [5.0, np.array([1.0]), ad.ZeroTangent(), ad.NoTangent(), None, "s"])
def test_unthunk_passes_other_values_through(x):
    assert ad.unthunk(x) is x


def test_inplaceable_thunk_value_and_add_into():
    calls = []

    def value():
        calls.append(1)
        return np.array([1.0, 2.0])

    def add_into(buf):
        buf += np.array([1.0, 2.0])
        return buf

    t = ad.InplaceableThunk(add_into, ad.Thunk(value))
    buf = np.array([10.0, 10.0])
    out = t.add_into(buf)
    np.testing.assert_array_equal(out, [11.0, 12.0])
    assert calls == []  # add_into does not need the value
    np.testing.assert_array_equal(ad.unthunk(t), [1.0, 2.0])
    assert isinstance(t, ad.Thunk)


def test_thunk_pickles_as_its_value():
    t = ad.Thunk(lambda: np.array([4.0]))
    back = pickle.loads(pickle.dumps(t))
    np.testing.assert_array_equal(ad.unthunk(back), [4.0])
    assert not isinstance(back, ad.Thunk)  # nothing lazy crosses a process boundary


def test_a_misspelt_field_of_a_structural_tangent_is_an_error():
    """ChainRules' Tangent{P} refuses a field P does not have; a silent ZeroTangent for
    the real field would be a wrong gradient. Where the type does not say its fields (a
    dict), the tracer refuses a key the argument lacks."""
    import dataclasses
    from typing import NamedTuple

    import adrules as ad

    @dataclasses.dataclass
    class P:
        a: np.ndarray
        b: float

    class Q(NamedTuple):
        u: float

    with pytest.raises(TypeError, match="P has no field c; its fields are a, b"):
        ad.Tangent(P, a=1.0, c=5.0)
    with pytest.raises(TypeError, match="Q has no field v"):
        ad.Tangent(Q, v=1.0)

    @ad.primitive
    def total(d):
        return d["a"] + d["b"]

    @ad.rrule.register(total)
    def total_rrule(d):
        return total(d), lambda g: (ad.NoTangent(), ad.Tangent(dict, a=g, bb=g))

    with pytest.raises(ad.tracer.TracerError, match=r"does not match its structure dict\(a=\*, b=\*\)"):
        ad.gradient(total, {"a": 1.0, "b": 2.0})


def test_numpy_reductions_and_methods_of_a_zero_tangent_are_zero():
    # np.sum(z) calls z.sum(...): the attribute was a zero, and calling it failed
    # ("'ZeroTangent' object is not callable"), e.g. in an frule of a struct held constant
    z = ad.ZeroTangent()
    assert np.sum(z) is z and np.mean(z, axis=0) is z and z.reshape(2, 3) is z and z.T is z


def test_an_frule_summing_the_zero_tangent_of_a_struct_held_constant():
    from dataclasses import dataclass

    @dataclass
    class P:
        w: np.ndarray

    @ad.primitive
    def energy(p, x):
        return np.sum(p.w ** 2) + np.sum(x ** 2)

    @ad.frule.register(energy)
    def _(tangents, p, x):
        _, dp, dx = tangents
        return energy(p, x), 2 * np.sum(p.w * dp.w) + 2 * np.sum(x * dx)

    p, x = P(np.array([1.0, 2.0])), np.array([3.0])
    assert ad.jvp(lambda x: energy(p, x), (x,), (np.ones(1),)) == (14.0, 6.0)
