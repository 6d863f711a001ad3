"""Rules: functions whose outputs carry no derivative.

Integer-valued, boolean-valued and shape-valued functions: their outputs are returned
as plain values, so a traced value passing through them simply stops being traced.
"""

import numpy as np

from ..registry import non_differentiable

# ---- rounding and sign ---------------------------------------------------------
non_differentiable(np.floor, np.ceil, np.rint, np.trunc, np.fix, np.round, np.around,
                   np.signbit, np.heaviside, np.floor_divide)
non_differentiable(np.sign, complex=False)  # complex z: z / |z|, which moves with z

# ---- comparisons and logic --------------------------------------------------------
non_differentiable(np.equal, np.not_equal, np.less, np.less_equal, np.greater,
                   np.greater_equal, np.logical_and, np.logical_or, np.logical_xor,
                   np.logical_not, np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert,
                   np.isfinite, np.isnan, np.isinf, np.isclose, np.allclose,
                   np.array_equal, np.array_equiv, np.any, np.all)

# ---- indices and searches -------------------------------------------------------------
non_differentiable(np.argmax, np.argmin, np.argsort, np.argwhere, np.nonzero, np.flatnonzero,
                   np.searchsorted, np.digitize, np.count_nonzero, np.unravel_index)

# ---- shapes, dtypes and fresh arrays --------------------------------------------------
non_differentiable(np.shape, np.ndim, np.size, np.result_type, np.zeros_like, np.ones_like,
                   np.empty_like, np.iscomplexobj, np.isrealobj,
                   np.may_share_memory, np.shares_memory)
