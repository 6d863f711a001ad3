"""Rules: NumPy functions that call the user's functions (``piecewise``, ``apply_along_axis``,
``apply_over_axes``).

Each is re-implemented in NumPy calls that have rules and registered with ``composed``:
the tracer runs the implementation on the traced arguments, so the user's functions are
traced like the rest of the program, closures over traced values included. The
implementations follow NumPy's: ``piecewise`` calls each function on ``x[cond]`` only
(never on values outside its condition), later conditions win, the "otherwise" function
gets what no condition selects; ``apply_along_axis`` calls ``func1d`` once per slice, in
NumPy's order, and places the results' axes where ``axis`` was.
"""

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from .. import ops
from ._compose import composed


def _placed(values, cond, shape, dtype):
    """An array of ``shape`` holding ``values`` (broadcast to ``x[cond]``'s shape) where
    ``cond`` holds, in C order as ``y[cond] = values`` writes them, and zeros elsewhere."""
    flat = np.ravel(cond)
    k, rest = int(np.count_nonzero(flat)), shape[np.ndim(cond):]
    values = np.broadcast_to(values, (k,) + rest)
    if np.result_type(values) != dtype:  # the assignment casts to y's dtype
        values = ops.astype(values, dtype)
    padded = np.concatenate([values, np.zeros((1,) + rest, dtype)])
    return np.reshape(np.take(padded, np.where(flat, np.cumsum(flat) - 1, k), axis=0), shape)


def piecewise(x, condlist, funclist, *args, **kw):
    shape, dtype = np.shape(x), np.result_type(x)
    if not shape:  # a number: NumPy's 0-d array of it, which takes a boolean index
        x = np.reshape(x, ())
    # NumPy's reading of condlist: a single condition is a list of one
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray)) and len(shape) != 0):
        condlist = [condlist]
    condlist = np.asarray(condlist, dtype=bool)
    n, n2 = len(condlist), len(funclist)
    if n == n2 - 1:  # the "otherwise" condition
        condlist = np.concatenate([condlist, ~np.any(condlist, axis=0, keepdims=True)], axis=0)
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    y = np.zeros(shape, dtype)
    for cond, func in zip(condlist, funclist):
        if callable(func):
            vals = x[cond]
            if np.size(vals) == 0:
                continue
            func = func(vals, *args, **kw)
        mask = np.reshape(cond, np.shape(cond) + (1,) * (len(shape) - np.ndim(cond)))
        y = np.where(mask, _placed(func, cond, shape, dtype), y)
    return y


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    ndim = np.ndim(arr)
    axis = normalize_axis_index(axis, ndim)
    moved = np.moveaxis(arr, axis, -1)
    outer = np.shape(moved)[:-1]
    if 0 in outer:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    results = [func1d(moved[index + (Ellipsis,)], *args, **kwargs) for index in np.ndindex(outer)]
    shape, dtype = np.shape(results[0]), np.result_type(results[0])
    # later results are written into a buffer shaped and typed by the first
    fitted = [r if np.shape(r) == shape and np.result_type(r) == dtype
              else ops.astype(np.broadcast_to(r, shape), dtype) for r in results]
    out = np.reshape(np.stack(fitted), outer + shape)
    dims = list(range(len(outer) + len(shape)))
    return np.transpose(out, dims[:axis] + dims[len(outer):] + dims[axis:len(outer)])


def apply_over_axes(func, a, axes):
    val, ndim = a, np.ndim(a)
    for axis in ((axes,) if np.ndim(axes) == 0 else axes):
        axis = axis + ndim if axis < 0 else axis
        res = func(val, axis)
        if np.ndim(res) != np.ndim(val):
            res = np.expand_dims(res, axis)
            if np.ndim(res) != np.ndim(val):
                raise ValueError("function is not returning an array of the correct shape")
        val = res
    return val


composed(np.piecewise, piecewise)
composed(np.apply_along_axis, apply_along_axis)
composed(np.apply_over_axes, apply_over_axes)
