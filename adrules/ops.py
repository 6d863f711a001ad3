"""Array operations that are methods or syntax rather than NumPy functions.

``x[i]`` and ``x.astype(t)`` have no NumPy function the registry could be keyed by,
so they get one here; their rules live in ``rules/indexing.py`` and ``rules/ufuncs.py``.
"""

import numpy as np

from .registry import primitive


@primitive
def getitem(x, index):
    """``x[index]`` as a function.

    >>> getitem(np.arange(4.0), slice(1, 3))
    array([1., 2.])
    """
    return x[index]


@primitive
def astype(x, dtype, **kwargs):
    """``x.astype(dtype)`` as a function (Python scalars too).

    >>> astype(1.5, np.float32)
    np.float32(1.5)
    """
    if hasattr(x, "astype"):
        return x.astype(dtype, **kwargs)
    return np.dtype(dtype).type(x)


def block(arrays):
    """``np.block(arrays)`` written with ``np.reshape`` and ``np.concatenate``, which have
    rules: the tracer calls it for ``np.block`` of traced blocks (nested lists, whose
    boxes the rules of one NumPy call cannot take). Each block gets leading axes of
    length 1 up to the result's dimensions; the innermost lists are joined along the
    last axis, the next ones along the one before.

    >>> block([[np.eye(2), np.zeros((2, 1))]])
    array([[1., 0., 0.],
           [0., 1., 0.]])
    """
    depth, ndims = _block_depth(arrays), []
    _block_ndims(arrays, ndims)
    ndim = max(depth, *ndims)

    def join(x, level):
        if type(x) is list:
            return np.concatenate([join(e, level + 1) for e in x], axis=level - depth)
        shape = np.shape(x)
        return np.reshape(x, (1,) * (ndim - len(shape)) + shape)

    return join(arrays, 0)


def _block_depth(x):
    if type(x) is not list:
        return 0
    if not x:
        raise ValueError("np.block: lists cannot be empty")
    depths = {_block_depth(e) for e in x}
    if len(depths) != 1:
        raise ValueError("np.block: list depths are mismatched: nest every block equally deep")
    return 1 + depths.pop()


def _block_ndims(x, out):
    if type(x) is list:
        for e in x:
            _block_ndims(e, out)
    elif type(x) is tuple:
        raise TypeError("np.block: blocks are given in lists, not tuples")
    else:
        out.append(np.ndim(x))
