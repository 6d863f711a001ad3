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

import inspect
import os
import sys
import sysconfig
from types import FrameType

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

# what to do about a library's Python function the tracer cannot enter
GIVE_IT_A_RULE = ("write it with NumPy functions, or wrap it in adrules.primitive and register a "
                  "rule for the wrapper (see help(adrules.primitive))")

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
    # (SciPy's frozen multivariate distributions check and factorize their parameters when made)
    "scipy.stats._multivariate.multivariate_normal_gen.__call__":
        "a frozen distribution, whose mean and cov SciPy factorizes with NumPy when it is made: "
        "pass traced parameters to the method, scipy.stats.multivariate_normal.logpdf(x, mean, cov)",
    "scipy.stats._multivariate.dirichlet_gen.__call__":
        "a frozen distribution, whose alpha SciPy checks with NumPy when it is made: pass a traced "
        "alpha to the method, scipy.stats.dirichlet.logpdf(x, alpha)",
}

# SciPy's Python functions that adrules replaced in SciPy's namespace by a primitive with
# rules (rules/_scipy_entry.py), by qualified name: what to say when the original, bound
# to a name before adrules was imported, meets a traced value.
REPLACED: dict[str, str] = {}

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


_OWN = ("numpy", "adrules")
_LIBRARY_DIRS = tuple({os.path.normcase(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
                       if (p := sysconfig.get_paths().get(key))})


def conversion_site(frame: FrameType | None) -> tuple[str, str | None]:
    """Where a traced value met ``np.asarray``, for the error it raises: ``(where,
    advice)``. In a library's function: that function and the line that called it, and
    what to write instead (the reason it is left out, where it is on purpose). In the
    user's code: their line, and None. ``frame``: the Python frame that called
    ``np.asarray`` (NumPy's C code adds none).

    >>> script = {"__name__": "__main__", "conversion_site": conversion_site, "sys": sys}
    >>> exec("def loss(x): return conversion_site(sys._getframe())", script)
    >>> script["loss"](1.0)
    ('loss, at <string>:1', None)
    """
    known = None  # a NumPy function left out on purpose (np.full), which converted it
    while frame is not None and _package(frame) in _OWN:
        if known is None and _package(frame) == "numpy":
            name = _public_name(frame.f_globals.get("__name__"), frame.f_code, frame)
            if name in LEFT_OUT and frame.f_back is not None:
                known = name, frame.f_back
        frame = frame.f_back
    if known is not None:  # np.full(shape, x) in the user's code, or in a pullback at second order
        name, caller = known
        return f"{name} (called at {_where(caller)})", f"{name} {LEFT_OUT[name]}."
    if frame is None:
        return "", None
    if not _in_library(frame):
        return f"{_qualname(frame)}, at {_where(frame)}", None
    names, called_at = _library_call(frame)
    replaced = next((name for name in names if name in REPLACED), None)
    if replaced is not None and not _called_by_adrules(frame):  # bound before adrules replaced it
        return replaced + called_at, REPLACED[replaced] + "."
    known = next((name for name in names if name in LEFT_OUT), None)
    if known is not None:
        return known + called_at, f"{known} is {LEFT_OUT[known]}."
    name = names[-1]
    return name + called_at, f"{name} is {ASARRAY}: {GIVE_IT_A_RULE}."


# NumPy functions that call the user's functions and reach the tracer (which traces them
# as its own calls) only when this argument is traced
_DISPATCHED_ON = {"numpy.piecewise": "x", "numpy.apply_along_axis": "arr", "numpy.apply_over_axes": "a"}


def store_site(frame: FrameType | None) -> str | None:
    """What to say of a traced value written into a NumPy array by a library's function
    (``np.piecewise`` given a plain ``x`` and functions that capture a traced value);
    None where the write is the user's own (``frame``: the frame writing it).

    >>> script = {"__name__": "__main__", "store_site": store_site, "sys": sys}
    >>> exec("def loss(x): return store_site(sys._getframe())", script)
    >>> script["loss"](1.0) is None
    True
    """
    if frame is None or not _in_library(frame):
        return None
    names, called_at = _library_call(frame)
    name = next((name for name in names if name in _DISPATCHED_ON), names[-1])
    argument = _DISPATCHED_ON.get(name)
    if argument is not None:
        return (f"{name}{called_at} wrote a traced value one of your functions returned into a NumPy "
                f"array it made: NumPy hands {name} to the tracer only when its argument {argument} is "
                f"traced, and here only a value your function captures is. Make {argument} traced "
                f"too ({argument} + 0.0 * that value), or select with np.where.")
    return (f"{name}{called_at} writes a traced value into a NumPy array it made, which cannot be "
            f"differentiated: {GIVE_IT_A_RULE}.")


def _library_call(frame):
    """``(names, called_at)`` of the library function running in ``frame``: the names a
    user can call it by, from the innermost of its frames out, and the user's line that
    called it."""
    chain, package = [frame], _package(frame)
    while chain[-1].f_back is not None and _package(chain[-1].f_back) == package:
        chain.append(chain[-1].f_back)
    caller = chain[-1].f_back
    called_at = f" (called at {_where(caller)})" if caller is not None else ""
    # the functions a user can call by name: not a decorator's wrapper or a closure
    names = [_public_name(f.f_globals.get("__name__"), f.f_code, f) for f in chain
             if "<locals>" not in _qualname(f)]
    if "<locals>" in _qualname(chain[-1]):  # a decorator's wrapper: the function it wraps
        wrapped = [v for v in chain[-1].f_locals.values() if inspect.isfunction(v)]
        names += [_public_name(v.__module__, inspect.unwrap(v).__code__) for v in wrapped[:1]]
    return names or [_public_name(chain[-1].f_globals.get("__name__"), chain[-1].f_code, chain[-1])], called_at


def _called_by_adrules(frame):
    """Whether the library function running in ``frame`` was called by adrules (through
    the primitive that replaced it), not by the user's code."""
    package = _package(frame)
    while frame is not None and _package(frame) == package:
        frame = frame.f_back
    return frame is not None and _package(frame) == "adrules"


def _package(frame):
    return str(frame.f_globals.get("__name__", "")).partition(".")[0]


def _in_library(frame):
    """Whether ``frame`` runs code of an installed package or of the standard library."""
    path = os.path.normcase(os.path.abspath(frame.f_code.co_filename))
    return path.startswith(_LIBRARY_DIRS) or f"{os.sep}site-packages{os.sep}" in path


def _qualname(frame):
    return getattr(frame.f_code, "co_qualname", frame.f_code.co_name)  # co_qualname: 3.11+


def _where(frame):
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _public_name(module, code, frame=None):
    """``scipy.linalg.solve_triangular`` for the function of ``code`` defined in module
    ``scipy.linalg._basic``: the shortest module path that exports it, or where it is
    defined (a method's class read from ``frame``'s ``self`` where Python < 3.11 has no
    ``co_qualname``)."""
    module, name = str(module or "?"), code.co_name
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        space = ".".join(parts[:i])
        fn = getattr(sys.modules.get(space), name, None)
        if callable(fn) and getattr(inspect.unwrap(fn), "__code__", None) is code:
            return f"{space}.{name}"
    qualname = getattr(code, "co_qualname", None)  # 3.11+
    if qualname is None:
        owner = frame.f_locals.get("self") if frame is not None else None
        defining = next((c for c in type(owner).__mro__ if getattr(c.__dict__.get(name), "__code__", None) is code),
                        None) if owner is not None else None
        qualname = f"{defining.__qualname__}.{name}" if defining is not None else name
    return f"{module}.{qualname}"
