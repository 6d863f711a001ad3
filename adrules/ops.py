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
