"""Rules: scipy.linalg's ``solve_triangular``, ``solve_banded``, ``cholesky``,
``cho_factor``, ``cho_solve``, ``solve_sylvester``, ``sqrtm`` and ``expm``, real or complex
(ChainRules' convention: each pullback is its frule's adjoint for Re tr(xᴴ y), with
conjugate transposes where real matrices have transposes).

Python functions that call ``np.asarray``: each name in ``scipy.linalg`` becomes an
``@adrules.primitive`` (``_scipy_entry.replace_function``). ``solve_triangular``,
``solve_sylvester``, ``sqrtm`` and ``expm`` compute their values with SciPy's function and
have rules written here, in calls that have rules (themselves among them: derivatives of
derivatives work):

* ``solve_triangular(a, b, trans, lower, unit_diagonal)`` reads one triangle of ``a`` (not
  its diagonal with ``unit_diagonal``): ``a``'s cotangent is in that triangle. ``trans``
  0/'N', 1/'T', 2/'C' (the conjugate transpose; 'T' for real matrices). ``a`` may be a
  stack of matrices.
* ``solve_banded((l, u), ab, b)``: A's entries a[i, j] are ab[u + i - j, j]; b's cotangent
  solves with the transpose, banded too, and ab's holds the cotangent's band (0 in the
  corners SciPy does not read).
* ``solve_sylvester(a, b, q)``, X with a X + X b = q: the cotangent of q is the solution of
  the transposed equation, as autograd's.
* ``sqrtm(A)``, Y with Y Y = A: its tangent solves Y dY + dY Y = dA (a Sylvester equation).
* ``expm(A)``: its tangent is the Fréchet derivative, read from the exponential of the
  block matrix [[A, dA], [0, A]] (Higham's identity), and its cotangent the Fréchet
  derivative at A transposed; ``A`` may be a stack of matrices.

``cholesky``, ``cho_factor`` and ``cho_solve`` are written with ``numpy.linalg.cholesky``
and ``solve_triangular`` and differentiate those (``_compose.composite_rule``): the factor
read from the triangle SciPy reads (upper by default, as SciPy's); ``cho_factor``'s other
triangle holds what this SciPy puts there (``a``'s entries, or zeros from SciPy 1.18 on);
``cho_solve`` reads the factor's triangle only.
"""

import numpy as np
import scipy.linalg as sl

from ..tangents import NoTangent, Thunk, ZeroTangent, is_zero
from ._compose import composite_rule
from ._scipy_entry import replace_function
from ._utils import numpy_frule, numpy_rrule, tangent_at

solve_triangular = replace_function(sl, "solve_triangular")
solve_banded = replace_function(sl, "solve_banded")
solve_sylvester = replace_function(sl, "solve_sylvester")
sqrtm = replace_function(sl, "sqrtm")
expm = replace_function(sl, "expm")
cholesky = replace_function(sl, "cholesky")
cho_factor = replace_function(sl, "cho_factor")
cho_solve = replace_function(sl, "cho_solve")


def _T(x):
    return np.swapaxes(x, -1, -2)


def _is_complex(x):
    return np.iscomplexobj(x)


def _conj(x):
    """``x``'s conjugate; ``x`` itself when real (np.conjugate would copy it)."""
    return np.conjugate(x) if _is_complex(x) else x


def _H(x):
    """The conjugate transpose of a stack of matrices (the transpose of real ones)."""
    return np.conjugate(_T(x)) if _is_complex(x) else _T(x)


def _operation(trans, a):
    """``solve_triangular``'s ``trans`` as 0 (a), 1 (aᵀ) or 2 (aᴴ); 2 is 1 for a real ``a``."""
    if trans in (0, "N", "n"):
        return 0
    if trans in (1, "T", "t"):
        return 1
    if trans in (2, "C", "c"):
        return 2 if _is_complex(a) else 1
    raise ValueError(f"scipy.linalg.solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")


def _apply(op, m):
    """op(m): m, mᵀ or mᴴ."""
    return m if op == 0 else _T(m) if op == 1 else _H(m)


def _triangle(m, lower, unit_diagonal):
    """The part of ``m`` that ``solve_triangular`` reads: one triangle, without the diagonal
    for ``unit_diagonal``."""
    return np.tril(m, -1 if unit_diagonal else 0) if lower else np.triu(m, 1 if unit_diagonal else 0)


def _as_columns(b, a):
    """``b`` as a stack of column matrices: a vector right-hand side gets a last axis of 1."""
    return b[..., None] if np.ndim(b) == np.ndim(a) - 1 else b


# ---- solve_triangular -----------------------------------------------------------------------------
@numpy_rrule(solve_triangular, complex=True)
def solve_triangular_rrule(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                           check_finite=True):
    op = _operation(trans, a)
    x = solve_triangular(a, b, trans, lower, unit_diagonal, False, check_finite)

    def solve_triangular_pullback(g):  # b̄ = op(a)⁻ᴴ ḡ
        if op == 0:
            b_bar = solve_triangular(a, g, 2 if _is_complex(a) else 1, lower, unit_diagonal, False, check_finite)
        else:  # op(a)⁻ᴴ is a⁻¹ for aᴴ, conj(a)⁻¹ for aᵀ
            b_bar = solve_triangular(_conj(a) if op == 1 else a, g, 0, lower, unit_diagonal, False, check_finite)

        def a_bar():
            m = -_as_columns(b_bar, a) @ _H(_as_columns(x, a))  # of the matrix solved with
            return _triangle(_apply(op, m), lower, unit_diagonal)

        return NoTangent(), Thunk(a_bar), b_bar

    return x, solve_triangular_pullback


@numpy_frule(solve_triangular, complex=True)
def solve_triangular_frule(tangents, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                           check_finite=True):
    op = _operation(trans, a)
    x = solve_triangular(a, b, trans, lower, unit_diagonal, False, check_finite)
    da, db = tangent_at(tangents, 0), tangent_at(tangents, 1)
    if is_zero(da) and is_zero(db):
        return x, ZeroTangent()
    rhs = 0.0 if is_zero(db) else _as_columns(db, a)
    if not is_zero(da):
        dm = _triangle(da, lower, unit_diagonal)
        rhs = rhs - _apply(op, dm) @ _as_columns(x, a)
    dx = solve_triangular(a, rhs, trans, lower, unit_diagonal, False, check_finite)
    return x, np.reshape(dx, np.shape(x))


# ---- solve_banded ----------------------------------------------------------------------------------------
def _shifted(v, s):
    """``v[j + s]`` along the first axis for each j, zeros where j + s is outside."""
    m = np.shape(v)[0]
    if s == 0:
        return v
    if abs(s) >= m:
        return np.zeros(np.shape(v))
    pad = np.zeros((abs(s),) + np.shape(v)[1:])
    return np.concatenate([v[s:], pad]) if s > 0 else np.concatenate([pad, v[:m + s]])


def _banded_transpose(lower, upper, ab):
    """The banded form of A^T: ``(upper, lower)`` bands, row k the row u + l - k of ab
    shifted by k - l."""
    return np.stack([_shifted(ab[upper + lower - k], k - lower) for k in range(lower + upper + 1)])


def _columns(v, x):
    """``v`` (a row of ab) shaped to scale ``x``'s rows."""
    return v if np.ndim(x) == 1 else v[:, None]


@numpy_rrule(solve_banded, complex=True)
def solve_banded_rrule(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    lower, upper = (int(n) for n in l_and_u)
    x = solve_banded((lower, upper), ab, b, False, False, check_finite)

    def solve_banded_pullback(g):  # b̄ = A⁻ᴴ ḡ, Ā = -b̄ xᴴ
        ab_h = _conj(_banded_transpose(lower, upper, ab))
        b_bar = solve_banded((upper, lower), ab_h, g, False, False, check_finite)

        def ab_bar():  # a[i, j] = ab[u + i - j, j]: row k of ab's cotangent is -b̄[j + k - u] conj(x[j])
            rows = [-_shifted(b_bar, k - upper) * _conj(x) for k in range(lower + upper + 1)]
            return np.stack([r if np.ndim(x) == 1 else np.sum(r, axis=1) for r in rows])

        return NoTangent(), NoTangent(), Thunk(ab_bar), b_bar

    return x, solve_banded_pullback


@numpy_frule(solve_banded, complex=True)
def solve_banded_frule(tangents, l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    lower, upper = (int(n) for n in l_and_u)
    x = solve_banded((lower, upper), ab, b, False, False, check_finite)
    dab, db = tangent_at(tangents, 1), tangent_at(tangents, 2)
    if is_zero(dab) and is_zero(db):
        return x, ZeroTangent()
    rhs = np.zeros(np.shape(x)) if is_zero(db) else db
    if not is_zero(dab):  # (dA x)[i] = sum over bands k of dab[k, i + u - k] x[i + u - k]
        for k in range(lower + upper + 1):
            rhs = rhs - _shifted(_columns(dab[k], x) * x, upper - k)
    return x, solve_banded((lower, upper), ab, rhs, False, False, check_finite)


# ---- Sylvester equations, square roots, exponentials --------------------------------------------------
@numpy_rrule(solve_sylvester, complex=True)
def solve_sylvester_rrule(a, b, q):
    x = solve_sylvester(a, b, q)

    def solve_sylvester_pullback(g):  # q̄ solves aᴴ q̄ + q̄ bᴴ = ḡ
        q_bar = solve_sylvester(_H(a), _H(b), g)
        return NoTangent(), Thunk(lambda: -q_bar @ _H(x)), Thunk(lambda: -_H(x) @ q_bar), q_bar

    return x, solve_sylvester_pullback


@numpy_frule(solve_sylvester, complex=True)
def solve_sylvester_frule(tangents, a, b, q):
    x = solve_sylvester(a, b, q)
    da, db, dq = (tangent_at(tangents, i) for i in range(3))
    if is_zero(da) and is_zero(db) and is_zero(dq):
        return x, ZeroTangent()
    rhs = np.zeros(np.shape(x)) if is_zero(dq) else dq
    if not is_zero(da):
        rhs = rhs - da @ x
    if not is_zero(db):
        rhs = rhs - x @ db
    return x, solve_sylvester(a, b, rhs)


@numpy_rrule(sqrtm, complex=True)
def sqrtm_rrule(A, *args, **kwargs):
    y = sqrtm(A, *args, **kwargs)

    def sqrtm_pullback(g):  # Ā solves yᴴ Ā + Ā yᴴ = ḡ
        return NoTangent(), solve_sylvester(_H(y), _H(y), g)

    return y, sqrtm_pullback


@numpy_frule(sqrtm, complex=True)
def sqrtm_frule(tangents, A, *args, **kwargs):
    y, dA = sqrtm(A, *args, **kwargs), tangent_at(tangents, 0)
    return y, (ZeroTangent() if is_zero(dA) else solve_sylvester(y, y, dA))


def _frechet(A, E):
    """The Fréchet derivative of expm at A along E: the upper right block of
    expm([[A, E], [0, A]])."""
    n = np.shape(A)[-1]
    top = np.concatenate([A, E], axis=-1)
    bottom = np.concatenate([np.zeros(np.shape(A)), A], axis=-1)
    return expm(np.concatenate([top, bottom], axis=-2))[..., :n, n:]


@numpy_rrule(expm, complex=True)
def expm_rrule(A):
    y = expm(A)

    def expm_pullback(g):  # the Fréchet derivative's adjoint: the derivative at Aᴴ
        return NoTangent(), _frechet(_H(A), g)

    return y, expm_pullback


@numpy_frule(expm, complex=True)
def expm_frule(tangents, A):
    y, dA = expm(A), tangent_at(tangents, 0)
    return y, (ZeroTangent() if is_zero(dA) else _frechet(A, dA))


# ---- Cholesky factors, written with numpy.linalg.cholesky --------------------------------------------
def _cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    return np.linalg.cholesky(a, upper=not lower)


def _leaves_a_in_the_other_triangle():
    """Whether this SciPy's cho_factor leaves a's entries in the triangle it does not
    write (SciPy 1.18 writes zeros there)."""
    return bool(cho_factor.__wrapped__(np.array([[4.0, 1.0], [2.0, 3.0]]))[0][1, 0] == 2.0)


_LEAVES_A = _leaves_a_in_the_other_triangle()


def _cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    factor = _cholesky(a, lower)
    if not _LEAVES_A:
        return factor, lower
    return factor + (np.triu(a, 1) if lower else np.tril(a, -1)), lower


def _cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    # a = L Lᴴ (lower) or Uᴴ U: two triangular solves with the factor's triangle
    adjoint = 2 if np.iscomplexobj(c) else 1
    y = solve_triangular(c, b, 0 if lower else adjoint, lower)
    return solve_triangular(c, y, adjoint if lower else 0, lower)


composite_rule(cholesky, _cholesky)
composite_rule(cho_factor, _cho_factor)
composite_rule(cho_solve, _cho_solve)
