"""The state of a callable: what split_callable lifts, and the code behind a rebuild."""

import functools

import numpy as np

import adrules as ad
from adrules.callables import code_of, has_traced, split_callable


def make_scaler(w):
    def scale(x):
        return w * x
    return scale


def test_code_of_a_rebuilt_closure_is_the_users_function():
    seen = []

    def f(w):
        scale = make_scaler(w)
        state, rebuild = split_callable(scale)
        seen.append((code_of(rebuild), code_of(scale), len(state)))
        return rebuild(state)(2.0)

    assert ad.gradient(f, 3.0) == (2.0,)  # d(w * 2)/dw, through the rebuilt closure
    (rebuild_code, own_code, n_state), = seen
    assert rebuild_code is own_code is make_scaler(1.0).__code__
    assert n_state == 1


def test_code_of_other_callables_is_none():
    assert code_of(np.sin) is None
    assert code_of(functools.partial(len)) is None


def test_has_traced_sees_only_traced_leaves():
    seen = []
    ad.gradient(lambda x: seen.append((has_traced({"a": [x]}), has_traced([np.ones(2), 1.0]))) or x, 1.0)
    assert seen == [(True, False)]
    assert has_traced([np.ones(2)]) is False
