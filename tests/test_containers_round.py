"""Containers and odd arrays through every derivative, as a researcher passes them: each
test is a case that was wrong (a crash with an unclear message, a type that changed, a
mistake refused by one derivative and taken by another), checked against values derived
by hand."""

from dataclasses import dataclass

import numpy as np
import pytest

import adrules as ad


@dataclass
class Params:
    w: np.ndarray
    k: int = 2


class Scaled:
    """A registered node whose static data is an array (a mask, a scale)."""

    def __init__(self, x, scale):
        self.x, self.scale = x, scale


ad.register_node(Scaled, lambda n: ((n.x,), n.scale), lambda scale, c: Scaled(c[0], scale))


# --- jvp: the tangent given as a list, or as something that is no number -------------

def test_jvp_takes_a_list_tangent_for_an_array_primal():
    # x * 2 on the list [1.0, 0.0] repeated it: "an frule returned a tangent of shape (4,)"
    x = np.array([1.0, 2.0])
    y, dy = ad.jvp(lambda x: x * 2, (x,), ([1.0, 0.0],))
    np.testing.assert_array_equal(dy, [2.0, 0.0])
    y, dy = ad.jvp(lambda x: x + x, (x,), ((1.0, 0.5),))
    np.testing.assert_array_equal(dy, [2.0, 1.0])


def test_jvp_list_tangent_takes_the_primal_dtype():
    _, dy = ad.jvp(lambda x: x * 2, (np.ones(2, np.float32),), ([1, 0],))
    assert dy.dtype == np.float32
    np.testing.assert_array_equal(dy, [2.0, 0.0])


@pytest.mark.parametrize("tangent", ["a", b"a", np.array(["a"])[0]])
def test_jvp_string_tangent_is_named(tangent):
    # was ProjectionError "the rule returned a str": the user's tangent, not a rule
    with pytest.raises(TypeError, match=r"jvp\(<lambda>\): the tangent of argument 0 is a"):
        ad.jvp(lambda x: x * 2, (1.0,), (tangent,))


def test_jvp_object_array_tangent_is_named():
    with pytest.raises(TypeError, match="tangent of argument 0 is an array of dtype object"):
        ad.jvp(lambda x: x * 2, (np.ones(2),), (np.array([1.0, None]),))
