"""Why some NumPy and SciPy functions have no derivative rule, in the user's words: the
error a traced value meets there quotes it (``tracer``), and so does the coverage table
(``coverage``, ``docs/coverage.md``).

>>> reason("numpy.putmask").startswith("writes into an existing array in place")
True
>>> reason("numpy.add.at").split(":")[0]
'writes into its first argument in place, which cannot be differentiated'
>>> reason("numpy.sin") is None
True
"""

from __future__ import annotations

ASARRAY = ("a Python function that converts its input with np.asarray, so the tracer never "
           "sees the call")

IN_PLACE = ("writes into an existing array in place, which cannot be differentiated: build a new "
            "array with np.where, np.concatenate or indexing")

# a ufunc's .at method (np.add.at(out, idx, x)): a scatter into ``out``
UFUNC_AT = ("writes into its first argument in place, which cannot be differentiated: build the "
            "result as a new array, with indexing, np.where or a one-hot matrix onehot = "
            "(idx[:, None] == np.arange(n))")
ADD_AT = ("writes into its first argument in place, which cannot be differentiated: build the "
          "sum by index as a new array, np.bincount(idx, weights=x, minlength=n) (1-D), or "
          "onehot.T @ x with onehot = (idx[:, None] == np.arange(n))")

FILES = "writes a file: nothing to differentiate"

# its pullback, sum over j >= i of g_j exp(x_i - y_j), factors only through exp(x_i) and
# exp(-y_j), which overflow at opposite ends of a long log-likelihood
LOG_ACCUMULATE = ("no rule: its derivative has no overflow-free vectorized form; write the recursion "
                  "with np.logaddexp in a loop (as an HMM's forward pass does), or np.logaddexp.reduce "
                  "for the total alone")

# Functions left out on purpose, by qualified name.
LEFT_OUT = {
    "numpy.logaddexp.accumulate": LOG_ACCUMULATE,
    "numpy.logaddexp2.accumulate": LOG_ACCUMULATE.replace("np.logaddexp", "np.logaddexp2"),
    "numpy.full": "dispatches only on like=, so a traced fill value never reaches a rule: "
                  "write fill_value * np.ones(shape)",
    "numpy.linalg.eig": "complex eigenvalues and eigenvectors: complex values are not supported yet",
    "numpy.linalg.eigvals": "complex eigenvalues: complex values are not supported yet",
    "scipy.special.logsumexp": ASARRAY + ": write m + np.log(np.sum(np.exp(x - m)))",
    "scipy.special.softmax": ASARRAY + ": write np.exp(x - logsumexp) with NumPy",
    "scipy.special.log_softmax": ASARRAY + ": write x - logsumexp with NumPy",
    "scipy.special.polygamma": ASARRAY + "; digamma's rules use the Hurwitz zeta ufunc instead",
    "scipy.special.multigammaln": ASARRAY + ": sum gammaln terms with NumPy",
}

# NumPy functions of a kind, by name in the numpy namespace
REASON_GROUPS = {
    **dict.fromkeys(("copyto", "fill_diagonal", "place", "put", "put_along_axis", "putmask"), IN_PLACE),
    **dict.fromkeys(("save", "savetxt", "savez", "savez_compressed"), FILES),
}


def reason(qualified: str) -> str | None:
    """Why the function named ``qualified`` ("numpy.put") has no rule, if that is known."""
    if qualified in LEFT_OUT:
        return LEFT_OUT[qualified]
    space, _, name = qualified.rpartition(".")
    if space == "numpy" and name in REASON_GROUPS:
        return REASON_GROUPS[name]
    if space.startswith("numpy.") and name == "at":
        return ADD_AT if space in ("numpy.add", "numpy.subtract") else UFUNC_AT
    return None
