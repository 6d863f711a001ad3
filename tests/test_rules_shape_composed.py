"""rules/shape_composed.py against finite differences (rrule, frule, second order) and NumPy's
values: rot90, rollaxis, append, meshgrid, linspace, partition, cumulative_sum/prod, pad modes."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_grads, check_rules


def _x(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(dtype)


_check_all = check_rules


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k, axes", [(1, (0, 1)), (2, (0, 1)), (3, (1, 2)), (-1, (2, 0)), (4, (0, 1))])
def test_rot90(k, axes, dtype):
    _check_all(np.rot90, _x((2, 3, 4), dtype), k, axes)


@pytest.mark.parametrize("axis, start", [(2, 0), (0, 3), (-1, 1), (1, -1), (1, 1)])
def test_rollaxis(axis, start):
    _check_all(np.rollaxis, _x((2, 3, 4)), axis, start)


@pytest.mark.parametrize("shapes, axis", [(((2, 3), (4,)), None), (((2, 3), (1, 3)), 0), (((2, 3), (2, 2)), 1)])
def test_append(shapes, axis):
    _check_all(np.append, _x(shapes[0], seed=1), _x(shapes[1], seed=2), axis)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
def test_meshgrid(indexing, sparse):
    x, y, z = _x((3,), seed=1), _x((4,), seed=2), _x((2,), seed=3)
    _check_all(np.meshgrid, x, y, z, fkwargs={"indexing": indexing, "sparse": sparse})
    _check_all(np.meshgrid, x, y, fkwargs={"indexing": indexing, "sparse": sparse})


@pytest.mark.parametrize("kwargs", [{}, {"num": 5, "endpoint": False}, {"num": 1}, {"num": 4, "axis": 1}])
def test_linspace_traced_endpoints(kwargs):
    start, stop = _x((3,), seed=1), _x((3,), seed=2)
    _check_all(np.linspace, start, stop, fkwargs=kwargs)
    if "axis" not in kwargs:
        _check_all(np.linspace, 0.3, 2.0, fkwargs=kwargs)


def test_linspace_retstep():
    start, stop = _x((2,), seed=1), _x((2,), seed=2)
    _check_all(np.linspace, start, stop, 7, True, True)
    _check_all(np.linspace, np.float32(0.5), np.float32(1.5), fkwargs={"num": 3})


@pytest.mark.parametrize("kth, axis", [(1, -1), ([0, 3], 0), (2, None)])
def test_partition(kth, axis):
    x = np.random.default_rng(3).permutation(20).reshape(4, 5) * 0.1  # gaps >> the FD step
    _check_all(np.partition, x, kth, axis)


@pytest.mark.skipif(not hasattr(np, "cumulative_sum"), reason="NumPy >= 2.1")
@pytest.mark.parametrize("kwargs", [{"axis": 0}, {"axis": 1, "include_initial": True}])
def test_cumulative_sum_and_prod(kwargs):
    x = _x((3, 4)) + 1.5
    _check_all(np.cumulative_sum, x, fkwargs=kwargs)
    _check_all(np.cumulative_prod, x, fkwargs=kwargs)
    _check_all(np.cumulative_sum, _x((5,)), fkwargs={"include_initial": True})


@pytest.mark.parametrize("mode", ["wrap", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("pad_width", [1, (2, 3), ((1, 0), (4, 5))])
def test_pad_modes(mode, pad_width):
    x = _x((3, 4))
    _check_all(np.pad, x, pad_width, mode)
    _check_all(np.pad, x, pad_width, fkwargs={"mode": mode})


def test_pad_float32_and_constant_mode_still_the_existing_rule():
    _check_all(np.pad, _x((3,), np.float32), 2, "reflect")
    _check_all(np.pad, _x((3,)), 2, fkwargs={"constant_values": 1.5})
    with pytest.raises(NotImplementedError, match="mode='mean'"):
        ad.gradient(lambda v: np.sum(np.pad(v, 1, mode="mean")), _x((3,)))


def test_broadcast_arrays_unstack_diagflat_matrix_transpose():
    _check_all(np.broadcast_arrays, _x((3,)), _x((2, 1), seed=1))
    _check_all(np.diagflat, _x((2, 2)), fkwargs={"k": 1})
    if hasattr(np, "unstack"):
        _check_all(np.unstack, _x((2, 3)), fkwargs={"axis": 1})
    if hasattr(np, "matrix_transpose"):
        _check_all(np.matrix_transpose, _x((2, 3, 4)))


def test_full_like_and_logspace():
    _check_all(np.full_like, _x((2, 3)), 1.5)
    _check_all(np.full_like, _x((2, 3)), _x((3,), seed=1))  # a fill value that broadcasts
    _check_all(np.logspace, _x((2,)), _x((2,), seed=1), fkwargs={"num": 4, "base": 2.0})
    _check_all(np.logspace, 0.5, 1.5, 5)


@pytest.mark.parametrize("axis", [None, 1])
def test_compress_extract_delete(axis):
    x = _x((2, 4))
    _check_all(np.compress, np.array([True, False, True, True]) if axis else x.ravel() > 0, x, axis)
    _check_all(np.extract, x > 0, x)
    _check_all(np.delete, x, [0, 2], axis)
    _check_all(np.delete, x, slice(1, 3), axis)


def test_geomspace():
    _check_all(np.geomspace, np.array([0.5, 2.0]), np.array([3.0, 7.0]), fkwargs={"num": 4})
    _check_all(np.geomspace, -0.5, -4.0, 5, False)


_RNG = np.random.default_rng(3)


@pytest.mark.parametrize("name", ["2x2 of matrices", "scalar times eye beside ones", "flat with a number",
                                  "three deep"])
def test_block_of_traced_blocks(name):
    """np.block takes nested lists, which reached the tracer as lists of lists: infinite
    recursion between NumPy's dispatch and the tracer. Both modes to second order, against
    finite differences; the value as NumPy's."""
    f, x = {
        "2x2 of matrices": (lambda a: np.block([[a, a * 2.0], [a ** 2, a]]) ** 2, _RNG.normal(size=(2, 2))),
        "scalar times eye beside ones": (lambda s: np.block([[s * np.eye(2), np.ones((2, 1))]]) ** 2, 0.5),
        "flat with a number": (lambda a: np.block([a[0], a[1], 3.0]) ** 2, _RNG.normal(size=(2, 2))),
        "three deep": (lambda a: np.block([[[a]], [[a * 3.0]]]) ** 3, _RNG.normal(size=(2, 2))),
    }[name]
    check_grads(f, x, order=2)
    y = ad.jvp(f, (x,), (np.ones_like(x),))[0]
    np.testing.assert_array_equal(y, f(x))


def test_block_of_mismatched_depths_is_numpy_s_error():
    with pytest.raises(ValueError, match="depths are mismatched"):
        ad.gradient(lambda a: np.sum(np.block([[a], a])), _RNG.normal(size=(2, 2)))


def test_concatenate_with_a_piece_given_as_a_list_in_forward_mode():
    # the frule made zeros for the list piece with np.result_type(list, 1.0): TypeError
    check_grads(lambda x: np.concatenate([[0.0], x * x, (1.0, 2.0)]), np.array([1.0, 2.0]), order=2)


@pytest.mark.parametrize("obj, values_shape, axis", [
    (2, (), None), ([1, 1, 4], (3,), None), (3, (2,), None), (1, (3,), 1), (1, (4,), 0), ([0, 2], (3, 1), 1),
    (slice(0, 2), (2, 4), 0), (-1, (), -1), ([1], (3, 2), 1),
])
def test_insert(obj, values_shape, axis):
    x, values = _x((3, 4)) if axis is not None or np.ndim(obj) else _x((5,)), _x(values_shape, seed=4)
    y = ad.rrule(np.insert, x, obj, values, axis)[0]
    np.testing.assert_array_equal(y, np.insert(x, obj, values, axis))
    _check_all(np.insert, x, obj, values, axis)


def test_insert_boundary_values_by_hand():
    """u padded with fixed ends 0 and 1: d/du sum(diff(...)**2) is 2(2u_i - u_i-1 - u_i+1)."""
    u = np.array([0.2, 0.5, 0.7])
    (g,) = ad.gradient(lambda u: np.sum(np.diff(np.insert(u, [0, 3], np.array([0.0, 1.0]))) ** 2), u)
    full = np.array([0.0, 0.2, 0.5, 0.7, 1.0])
    np.testing.assert_allclose(g, 2 * (2 * full[1:-1] - full[:-2] - full[2:]))


@pytest.mark.parametrize("shape, new_shape", [((5,), 12), ((3, 4), (2, 3)), ((3, 4), (5, 4)), ((2, 2), 3)])
def test_resize(shape, new_shape):
    x = _x(shape)
    np.testing.assert_array_equal(ad.rrule(np.resize, x, new_shape)[0], np.resize(x, new_shape))
    _check_all(np.resize, x, new_shape)
