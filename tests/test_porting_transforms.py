"""Four short programs written for autograd or JAX, in their own styles (``jacobian(f)(x)``,
``hessian(f)(x)``, ``jacfwd``/``jacrev``, ``hessian_vector_product``, ``make_jvp``,
``make_vjp``, a size-1 output), ported by changing their imports only: the ported text
differs from the original in import lines alone. Every derivative they compute is checked
against central finite differences of the program's own functions, and, where autograd
is installed, against the original program run on autograd.
"""

import re
import textwrap

import numpy as np
import pytest

AUTOGRAD_JACOBIAN_HESSIAN = textwrap.dedent("""\
    import autograd.numpy as np
    from autograd import grad, hessian, jacobian

    def rosenbrock(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    def warp(x, scale):
        return np.sin(scale * x) * x[0] + np.exp(-x)

    x = np.array([-1.2, 1.0, 0.8])
    J = jacobian(warp)(x, 2.0)
    J_scale = jacobian(warp, argnum=1)(x, 2.0)
    H = hessian(rosenbrock)(x)
    newton_step = x - np.linalg.solve(H, grad(rosenbrock)(x))
""")

AUTOGRAD_PRODUCTS = textwrap.dedent("""\
    import autograd.numpy as np
    import autograd.numpy.random as npr
    from autograd import hessian_vector_product, make_jvp, make_vjp

    def logistic_loss(w, X, y):
        return np.mean(np.logaddexp(0.0, -y * (X @ w))) + 0.05 * np.sum(w ** 2)

    def features(w, X):
        return np.tanh(X @ w)

    rs = npr.RandomState(0)
    X, y = rs.randn(6, 3), np.sign(rs.randn(6))
    w, v, u = rs.randn(3), rs.randn(3), rs.randn(6)
    Hv = hessian_vector_product(logistic_loss)(w, X, y, v)
    value, Jv = make_jvp(features)(w, X)(v)
    vjp, value_again = make_vjp(features)(w, X)
    uJ = vjp(u)
""")

JAX_JACOBIANS = textwrap.dedent("""\
    import jax.numpy as jnp
    from jax import hessian, jacfwd, jacrev

    def f(x):
        return jnp.stack([x[0] * x[1] ** 2, jnp.sin(x[2]) * x[0], jnp.exp(x[1])])

    def energy(x, k):
        return k * jnp.sum(f(x) ** 2)

    def hessian_by_hand(fun):
        return jacfwd(jacrev(fun))

    x = jnp.array([0.5, -1.0, 2.0])
    J_fwd, J_rev = jacfwd(f)(x), jacrev(f)(x)
    H = hessian(energy)(x, 0.5)
    H_composed = hessian_by_hand(lambda x: energy(x, 0.5))(x)
    dJ_dk = jacrev(energy, argnums=1)(x, 0.5)
""")

AUTOGRAD_SIZE_ONE = textwrap.dedent("""\
    import autograd.numpy as np
    from autograd import grad, value_and_grad
    from autograd.scipy.special import logsumexp

    def mixture_log_likelihood(params, data):  # shape (1,), as in the gmm example
        means, log_weights = params
        lls = log_weights[:, None] - 0.5 * (data[None, :] - means[:, None]) ** 2
        return np.sum(logsumexp(lls, axis=0, keepdims=True), axis=1)

    def column_total(x):
        return np.sum(x ** 3, axis=0, keepdims=True)

    data = np.array([-1.0, 0.2, 0.4, 2.5])
    params = (np.array([-1.0, 2.0]), np.array([-0.7, -0.7]))
    value, (g_means, g_weights) = value_and_grad(mixture_log_likelihood)(params, data)
    g_column = grad(column_total)(np.array([[1.0, 2.0]]).T)
""")

PROGRAMS = {
    "autograd jacobian/hessian": AUTOGRAD_JACOBIAN_HESSIAN,
    "autograd hvp/make_jvp/make_vjp": AUTOGRAD_PRODUCTS,
    "jax jacfwd/jacrev/hessian": JAX_JACOBIANS,
    "autograd size-1 output": AUTOGRAD_SIZE_ONE,
}

#: The port: what a user changes, import lines only.
_IMPORTS = [("autograd.numpy", "numpy"), ("jax.numpy", "numpy"), ("autograd.scipy", "scipy"),
            ("from autograd import", "from adrules import"), ("from jax import", "from adrules import")]


def port(source):
    lines = []
    for line in source.splitlines(keepends=True):
        if re.match(r"(import|from) ", line):
            for old, new in _IMPORTS:
                line = line.replace(old, new)
        lines.append(line)
    return "".join(lines)


def run(source, name):
    namespace = {"__name__": name}
    exec(compile(source, name, "exec"), namespace)
    return namespace


def fd_jacobian(f, x, h=1e-6):
    """Central differences, one column per element of x: shape f(x).shape + x.shape."""
    x = np.asarray(x, dtype=float)
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = h
        e = e.reshape(x.shape)
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    return np.stack(cols, axis=-1).reshape(np.shape(f(x)) + x.shape)


def fd_hessian(f, x, h=1e-4):
    """Second central differences of scalar f."""
    n = x.size
    H = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * h * h)
    return H


def close(a, b, rtol=1e-6, atol=1e-7):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_port_changes_imports_only(name):
    original = PROGRAMS[name].splitlines()
    ported = port(PROGRAMS[name]).splitlines()
    changed = [b for a, b in zip(original, ported) if a != b]
    assert changed and all(re.match(r"(import|from) ", line) for line in changed)
    assert all("autograd" not in line and "jax" not in line for line in ported)


def test_autograd_jacobian_and_hessian():
    ns = run(port(AUTOGRAD_JACOBIAN_HESSIAN), "jacobian_hessian")
    x, warp, rosenbrock = ns["x"], ns["warp"], ns["rosenbrock"]
    close(ns["J"], fd_jacobian(lambda x: warp(x, 2.0), x))
    close(ns["J_scale"], fd_jacobian(lambda s: warp(x, s), 2.0))
    close(ns["H"], fd_hessian(rosenbrock, x), rtol=1e-5, atol=1e-4)
    g = fd_jacobian(rosenbrock, x)
    close(ns["newton_step"], x - np.linalg.solve(fd_hessian(rosenbrock, x), g), rtol=1e-5)


def test_autograd_hessian_vector_product_make_jvp_make_vjp():
    ns = run(port(AUTOGRAD_PRODUCTS), "products")
    w, X, y, v, u = (ns[k] for k in "wXyvu")
    loss, features = ns["logistic_loss"], ns["features"]
    gradient = lambda w: fd_jacobian(lambda w: loss(w, X, y), w)  # noqa: E731
    close(ns["Hv"], (gradient(w + 1e-4 * v) - gradient(w - 1e-4 * v)) / 2e-4, rtol=1e-5, atol=1e-6)
    J = fd_jacobian(lambda w: features(w, X), w)
    close(ns["value"], features(w, X))
    close(ns["Jv"], J @ v)
    close(ns["value_again"], features(w, X))
    close(ns["uJ"], u @ J)


def test_jax_jacfwd_jacrev_hessian():
    ns = run(port(JAX_JACOBIANS), "jax_jacobians")
    x, f, energy = ns["x"], ns["f"], ns["energy"]
    J = fd_jacobian(f, x)
    close(ns["J_fwd"], J)
    close(ns["J_rev"], J)
    H = fd_hessian(lambda x: energy(x, 0.5), x)
    close(ns["H"], H, rtol=1e-5, atol=1e-5)
    close(ns["H_composed"], H, rtol=1e-5, atol=1e-5)
    close(ns["dJ_dk"], fd_jacobian(lambda k: energy(x, k), 0.5))


def test_autograd_size_one_output():
    pytest.importorskip("scipy")
    ns = run(port(AUTOGRAD_SIZE_ONE), "size_one")
    data, (means, log_weights) = ns["data"], ns["params"]
    ll = ns["mixture_log_likelihood"]
    assert np.shape(ns["value"]) == (1,)  # the value as the array it is
    close(ns["value"], ll((means, log_weights), data))
    close(ns["g_means"], fd_jacobian(lambda m: ll((m, log_weights), data)[0], means))
    close(ns["g_weights"], fd_jacobian(lambda lw: ll((means, lw), data)[0], log_weights))
    x = np.array([[1.0, 2.0]]).T
    close(ns["g_column"], 3 * x ** 2)


@pytest.mark.parametrize("name", [n for n in PROGRAMS if n.startswith("autograd")])
def test_the_port_agrees_with_autograd(name):
    pytest.importorskip("autograd")
    if "scipy" in PROGRAMS[name]:
        pytest.importorskip("scipy")
    ours, theirs = run(port(PROGRAMS[name]), "ported"), run(PROGRAMS[name], "original")
    results = [k for k, v in theirs.items() if isinstance(v, (np.ndarray, tuple)) and not k.startswith("_")]
    assert len(results) >= 3
    for key in results:
        for a, b in zip(np.atleast_1d(ours[key]) if not isinstance(ours[key], tuple) else ours[key],
                        np.atleast_1d(theirs[key]) if not isinstance(theirs[key], tuple) else theirs[key]):
            close(a, b, rtol=1e-12, atol=1e-12)


def test_the_function_forms_say_how_they_are_called():
    import adrules as ad

    def f(x, y):
        return x * y

    x = np.ones(2)
    with pytest.raises(TypeError, match=r"^jacobian\(f\) returns a function: call it with the point"):
        ad.jacobian(f)()
    with pytest.raises(TypeError, match=r"^hessian\(f\): argnums is for the function form, hessian\(f, argnums=1\)"):
        ad.hessian(f, x, x, argnums=1)
    with pytest.raises(TypeError, match=r"argument 0 is an integer \(1\).*autograd's argnum, name it: "
                                        r"jacobian\(f, argnum=1\)"):
        ad.jacobian(f, 1)
    with pytest.raises(TypeError, match=r"^hessian_vector_product\(f\): call it with f's arguments and then "
                                        r"the vector"):
        ad.hessian_vector_product(f)(x)
    with pytest.raises(TypeError, match=r"^make_jvp: argnum must be one int"):
        ad.make_jvp(f, argnum=(0, 1))
    with pytest.raises(TypeError, match=r"^jacobian\(f\): argument 1 is an integer \(3\).*argnums=0"):
        ad.jacobian(f, argnums=(0, 1))(x, 3)
    # a size-1 output is taken as its element; a bigger one still needs a reduction
    with pytest.raises(Exception, match=r"^grad\(f\): f returned an array of shape \(2,\), but grad needs a scalar"):
        ad.grad(f)(x, x)
