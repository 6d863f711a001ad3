"""Writing and testing your own derivative rules, ChainRules style.

Shows: an ``@ad.primitive`` (a numerically stable logsumexp) with an rrule whose named
pullback returns a ``Thunk`` (the softmax is only computed if someone needs it), its
frule, an ``ad.scalar_rule`` one-liner for an elementwise softplus, and the checks a
rule author runs in a test suite: ``check_rrule``, ``check_frule`` and
``check_grads(..., order=2)``. A deliberately wrong rule is caught by ``check_rrule``.

    python examples/custom_rule.py
"""

import numpy as np

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule


@ad.primitive
def logsumexp(x):
    """log(sum(exp(x))) without overflow: shift by the maximum first."""
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


@ad.rrule.register(logsumexp)
def logsumexp_rrule(x):
    y = logsumexp(x)

    def logsumexp_pullback(ybar):
        # d y / d x = softmax(x) = exp(x - y); a Thunk, so it is only computed when needed
        return ad.NoTangent(), ad.Thunk(lambda: ybar * np.exp(x - y))

    return y, logsumexp_pullback


@ad.frule.register(logsumexp)
def logsumexp_frule(tangents, x):
    _, dx = tangents  # (tangent of the function itself, tangent of x)
    y = logsumexp(x)
    return y, np.sum(np.exp(x - y) * ad.unthunk(dx))


@ad.primitive
def softplus(x):
    """log(1 + exp(x)), stable for large |x|."""
    return np.logaddexp(0.0, x)


# one line gives both modes: the partial is sigmoid(x) = exp(x - softplus(x)), y passed last
ad.scalar_rule(softplus, lambda x, y: np.exp(x - y))


@ad.primitive
def bad_softplus(x):
    return np.logaddexp(0.0, x)


ad.scalar_rule(bad_softplus, lambda x, y: np.exp(-y))  # wrong: that is 1 - sigmoid(x)


def model(x):
    return logsumexp(2.0 * softplus(x) - x)


def main():
    x = np.array([-3.0, 0.5, 1.0, 2.0])
    check_rrule(logsumexp, x)
    check_frule(logsumexp, x)
    check_rrule(softplus, x)
    check_frule(softplus, x)
    check_grads(model, x, order=2)  # forward and reverse mode, up to second derivatives
    print("check_rrule, check_frule, check_grads(order=2): passed")
    y, back = ad.rrule(logsumexp, x)  # calling a rule directly: the cotangent stays lazy
    print(f"rrule(logsumexp, x): y = {y:.4f}, pullback(1.0) = {back(1.0)}")

    try:
        check_rrule(bad_softplus, x)
    except AssertionError as e:
        print("wrong rule caught:", str(e).splitlines()[0])
    else:
        raise SystemExit("check_rrule did not catch the wrong rule of bad_softplus")

    big = np.array([1000.0, 1000.0, -1000.0])  # exp(1000) overflows: the shift keeps it finite
    value, (grad,) = ad.value_and_gradient(logsumexp, big)
    print(f"logsumexp({big}) = {value:.6f}, gradient {grad}")

    # self-check against hand-derived formulas, no finite differences from the library
    np.testing.assert_allclose(value, 1000.0 + np.log(2.0), rtol=1e-15)
    np.testing.assert_allclose(grad, [0.5, 0.5, 0.0], atol=1e-15)
    p = np.exp(x) / np.sum(np.exp(x))  # softmax
    np.testing.assert_allclose(ad.gradient(logsumexp, x)[0], p, rtol=1e-13)
    np.testing.assert_allclose(ad.hessian(logsumexp, x), np.diag(p) - np.outer(p, p), atol=1e-13)
    sig = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(ad.gradient(lambda x: np.sum(softplus(x)), x)[0], sig, rtol=1e-13)
    _, dy = ad.jvp(logsumexp, (x,), (np.ones_like(x),))
    np.testing.assert_allclose(dy, 1.0, rtol=1e-13)  # softmax sums to one
    # the model through both rules, against central differences of plain NumPy
    h, plain = 1e-6, lambda x: np.log(np.sum(np.exp(2 * np.logaddexp(0, x) - x)))
    fd = [(plain(x + h * e) - plain(x - h * e)) / (2 * h) for e in np.eye(len(x))]
    np.testing.assert_allclose(ad.gradient(model, x)[0], fd, rtol=1e-7)
    print("self-check against hand-derived gradients and finite differences: ok")


if __name__ == "__main__":
    main()
