"""The registered NumPy functions no other rule test checked with all three of
``check_rrule``, ``check_frule`` and ``check_grads(order=2)``: one line each, in
float64 and float32 (second order in float64 only: finite differences of finite
differences lose float32's digits), with broadcast shapes where the function
broadcasts. A sweep like autograd's ``test_numpy.py``."""

import numpy as np
import pytest

from adrules.testing import check_frule, check_grads, check_rrule


def R(*shape, seed=0, low=0.5, high=1.5):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def D(*shape, seed=3):
    """Distinct values, so extrema and ties are away from kinks."""
    return np.random.default_rng(seed).permutation(int(np.prod(shape))).reshape(shape) * 0.1 + 0.05


CASES = [
    (np.add.accumulate, (R(3, 4), 1)),
    (np.multiply.reduce, (R(3, 4), 1)),
    (np.minimum.reduce, (D(3, 4), 0)),
    (np.amax, (D(3, 4), 1)),
    (np.amin, (D(3, 4), 0)),
    (np.clip, (R(3, 4), R(4, seed=1, low=0.5, high=0.55), R(3, 1, seed=2, low=1.45, high=1.5))),
    (np.fmax, (D(3, 4), D(4, seed=5) + 0.01)),
    (np.fmin, (D(3, 4), D(4, seed=5) + 0.01)),
    (np.float_power.outer, (R(2), R(3, seed=1))),
    (np.fmax.outer, (D(2), D(3, seed=5) + 0.01)),
    (np.fmin.outer, (D(2), D(3, seed=5) + 0.01)),
    (np.fmod.outer, (R(2), R(3, seed=1, low=2.0, high=3.0))),
    (np.remainder.outer, (R(2), R(3, seed=1, low=2.0, high=3.0))),
    (np.logaddexp2.outer, (R(2), R(3, seed=1))),
    (np.atleast_1d, (R(),)),
    (np.atleast_3d, (R(2, 3),)),
    (np.column_stack, ([R(3), R(3, 2, seed=1)],)),
    (np.hstack, ([R(2, 1), R(2, 3, seed=1)],)),
    (np.dstack, ([R(2, 3), R(2, 3, seed=1)],)),
    (np.vsplit, (R(4, 2), 2)),
    (np.dsplit, (R(1, 2, 4), 2)),
    (np.fliplr, (R(2, 3),)),
    (np.flipud, (R(2, 3),)),
    (np.inner, (R(2, 3), R(4, 3, seed=1))),
    (np.vdot, (R(2, 3), R(2, 3, seed=1))),
    (np.kron, (R(2, 2), R(3, seed=1))),
    (np.linalg.qr, (R(3, 2),)),
    (np.select, ([R(3) > 1.0, R(3, seed=2) > 1.0], [R(3, seed=1), R(1, seed=3)], 0.5)),
    (np.where, (R(3, 4) > 1.0, R(3, 4, seed=1), R(4, seed=2))),
]


def _label(case):
    from adrules.registry import function_name
    return function_name(case[0])


def _float32(args):
    if isinstance(args, np.ndarray) and args.dtype == np.float64:
        return args.astype(np.float32)
    if isinstance(args, (list, tuple)):
        return type(args)(_float32(a) for a in args)
    return args


@pytest.mark.parametrize("f, args", CASES, ids=[_label(c) for c in CASES])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_rules(f, args, dtype):
    if dtype == "float32":
        args = _float32(args)
    check_rrule(f, *args)
    check_frule(f, *args)
    if dtype == "float64":
        check_grads(lambda *a: f(*a), *args, order=2)


def SPD(n=3):
    a = R(n, n, seed=7)
    return a @ a.T + np.diag(np.arange(n) * 3.0 + n)  # eigenvalues apart


# Functions whose rules no test checked in float32: the rrule and the frule at float32
# arguments (the tolerances follow the dtype; the float64 checks live in the family files).
FLOAT32 = [
    (np.add.outer, (R(2), R(3, seed=1))), (np.subtract.outer, (R(2), R(3, seed=1))),
    (np.divide.outer, (R(2), R(3, seed=1))), (np.power.outer, (R(2), R(3, seed=1))),
    (np.arctan2.outer, (R(2), R(3, seed=1))), (np.hypot.outer, (R(2), R(3, seed=1))),
    (np.logaddexp.outer, (R(2), R(3, seed=1))), (np.maximum.outer, (D(2), D(3, seed=5) + 0.01)),
    (np.minimum.outer, (D(2), D(3, seed=5) + 0.01)), (np.maximum, (D(3, 4), D(4, seed=5) + 0.01)),
    (np.minimum, (D(3, 4), D(4, seed=5) + 0.01)), (np.copysign, (R(3, 4), R(4, seed=1) - 1.0)),
    (np.add.reduce, (R(3, 4), 1)), (np.maximum.reduce, (D(3, 4), 0)), (np.multiply.accumulate, (R(3, 4), 1)),
    (np.min, (D(3, 4), 1)), (np.nanmax, (D(3, 4), 1)), (np.nanmin, (D(3, 4), 0)), (np.nanprod, (R(3, 4), 1)),
    (np.nanvar, (R(3, 4), 1)), (np.nancumsum, (R(3, 4), 1)), (np.nancumprod, (R(3, 4), 0)),
    (np.median, (D(3, 4), 1)), (np.nanmedian, (D(3, 4), 0)), (np.percentile, (D(2, 5), 31.0, 1)),
    (np.nanpercentile, (D(2, 5), 31.0, 1)), (np.nanquantile, (D(2, 5), 0.31, 1)),
    (np.cov, (R(2, 4),)), (np.corrcoef, (R(2, 4),)), (np.correlate, (R(4), R(2, seed=1), "full")),
    (np.interp, (np.array([0.2, 1.3]), np.array([0.0, 1.0, 2.0]), R(3, seed=1))), (np.ediff1d, (R(4),)),
    (np.polyval, (R(3), R(2, seed=1))), (np.polyadd, (R(3), R(2, seed=1))), (np.polysub, (R(3), R(2, seed=1))),
    (np.polymul, (R(3), R(2, seed=1))), (np.polyder, (R(4), 2)), (np.polyint, (R(3), 2)),
    (np.vander, (R(3), 4)), (np.geomspace, (R(2), R(2, seed=1) + 2.0, 4)), (np.logspace, (R(2), R(2, seed=1), 3)),
    (np.append, (R(2, 3), R(1, 3, seed=1), 0)), (np.delete, (R(2, 3), 1, 1)), (np.diagflat, (R(2), 1)),
    (np.diagonal, (R(3, 3), 1)), (np.triu, (R(3, 3), 1)), (np.full_like, (R(2, 3), 1.5)),
    (np.compress, (np.array([True, False, True]), R(2, 3), 1)), (np.extract, (np.array([True, False, True]), R(3))),
    (np.choose, (np.array([0, 1, 0]), [R(3), R(3, seed=1)])), (np.take, (R(2, 3), np.array([0, 2, 0]), 1)),
    (np.take_along_axis, (R(2, 3), np.array([[0, 2], [1, 1]]), 1)), (np.partition, (D(2, 4), 1, 1)),
    (np.concatenate, ([R(2, 3), R(1, 3, seed=1)], 0)), (np.stack, ([R(3), R(3, seed=1)], 1)),
    (np.vstack, ([R(3), R(2, 3, seed=1)],)), (np.split, (R(4, 2), 2, 0)), (np.array_split, (R(5), 2)),
    (np.hsplit, (R(2, 4), 2)), (np.unstack, (R(2, 3),)), (np.ravel, (R(2, 3), "F")),
    (np.squeeze, (R(2, 1, 3), 1)), (np.swapaxes, (R(2, 3), 0, 1)), (np.moveaxis, (R(2, 3, 4), 0, 2)),
    (np.rollaxis, (R(2, 3, 4), 2, 0)), (np.expand_dims, (R(2, 3), 1)), (np.flip, (R(2, 3), 1)),
    (np.atleast_2d, (R(3),)), (np.matrix_transpose, (R(2, 3),)), (np.broadcast_arrays, (R(3), R(2, 1, seed=1))),
    (np.meshgrid, (R(2), R(3, seed=1))), (np.outer, (R(2), R(3, seed=1))), (np.tensordot, (R(2, 3), R(3, 2, seed=1), 1)),
    (np.vecdot, (R(2, 3), R(3, seed=1))), (np.matvec, (R(2, 3), R(3, seed=1))), (np.vecmat, (R(2), R(2, 3, seed=1))),
    (np.cumulative_sum, (R(3, 4),), {"axis": 1}), (np.cumulative_prod, (R(3, 4),), {"axis": 0}),
    (np.linalg.det, (SPD(),)), (np.linalg.slogdet, (SPD(),)), (np.linalg.eigvalsh, (SPD(),)),
    (np.linalg.matrix_power, (SPD(), 2)), (np.linalg.multi_dot, ([R(2, 3), R(3, 2, seed=1)],)),
    (np.linalg.lstsq, (R(3, 2), R(3, seed=1))), (np.linalg.cond, (SPD(), "fro")),
    (np.linalg.tensorinv, (np.reshape(SPD(4), (2, 2, 4)), 2)),
    (np.linalg.tensorsolve, (np.reshape(SPD(4), (2, 2, 2, 2)), R(2, 2, seed=1))),
    (np.linalg.matmul, (R(2, 3), R(3, 2, seed=1))), (np.linalg.outer, (R(2), R(3, seed=1))),
    (np.linalg.tensordot, (R(2, 3), R(3, 2, seed=1)), {"axes": 1}), (np.linalg.vecdot, (R(2, 3), R(3, seed=1))),
    (np.linalg.cross, (R(2, 3), R(3, seed=1))), (np.linalg.diagonal, (R(3, 3),)), (np.linalg.trace, (R(3, 3),)),
    (np.linalg.matrix_transpose, (R(2, 3),)), (np.linalg.matrix_norm, (R(2, 3),)),
    (np.linalg.vector_norm, (R(2, 3),)), (np.linalg.svdvals, (R(3, 2),)),
]
FLOAT32 = [c if len(c) == 3 else (*c, {}) for c in FLOAT32]


@pytest.mark.parametrize("f, args, fkwargs", FLOAT32, ids=[_label(c) for c in FLOAT32])
def test_rules_float32(f, args, fkwargs):
    args = _float32(args)
    check_rrule(f, *args, fkwargs=fkwargs)
    check_frule(f, *args, fkwargs=fkwargs)
