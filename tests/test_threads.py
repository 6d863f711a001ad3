"""Tracer state is per thread: concurrent differentiations never see each other's tapes."""

import sys
import threading

import numpy as np
import pytest

import adrules as ad

N_ITER = 200


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch threads every few bytecodes so the differentiations really interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def run_in_threads(workers, timeout=60):
    """Start one thread per worker function, all released together by a barrier."""
    barrier = threading.Barrier(len(workers))
    errors = []

    def wrap(work, k):
        def run():
            try:
                barrier.wait()
                work(k)
            except BaseException as e:  # noqa: BLE001  (reported to the main thread)
                errors.append((k, repr(e)))
        return run

    threads = [threading.Thread(target=wrap(w, k)) for k, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


def test_four_threads_different_gradients_elementwise():
    x = np.array([0.3, -0.8, 1.4])
    cases = [
        (lambda x: np.sin(x) * x, lambda x: np.cos(x) * x + np.sin(x)),
        (lambda x: np.exp(x) / (1.0 + x * x), lambda x: np.exp(x) * (1 + x * x - 2 * x) / (1 + x * x) ** 2),
        (lambda x: x ** 3 - 2.0 * x, lambda x: 3 * x ** 2 - 2.0),
        (lambda x: np.tanh(2.0 * x), lambda x: 2.0 * (1 - np.tanh(2.0 * x) ** 2)),
    ]
    mismatches = []

    def work(k):
        f, df = cases[k]
        ones = np.ones(3)
        for i in range(N_ITER):
            xi = x + 0.001 * i
            y, back = ad.pullback(f, xi)
            (g,) = back(ones)
            if not np.allclose(g, df(xi), rtol=1e-12, atol=1e-14):
                mismatches.append((k, i, g, df(xi)))

    run_in_threads([work] * 4)
    assert not mismatches, mismatches[:3]


def test_four_threads_gradients_with_reductions_and_indexing():
    def work(k):
        for i in range(N_ITER):
            x = np.linspace(0.1, 1.0, 5) * (k + 1) + 0.0001 * i
            (g,) = ad.gradient(lambda x: np.sum(x[1:] * x[:-1]) * (k + 1), x)
            expected = np.zeros(5)
            expected[:-1] += x[1:]
            expected[1:] += x[:-1]
            np.testing.assert_allclose(g, expected * (k + 1), rtol=1e-12)

    run_in_threads([work] * 4)


def test_two_threads_nested_derivatives_and_perturbation_confusion():
    def second_derivative(k):
        for i in range(N_ITER):
            x = 0.1 + 0.01 * i
            d2 = ad.gradient(lambda x: ad.gradient(np.sin, x)[0], x)[0]
            assert d2 == pytest.approx(-np.sin(x), rel=1e-12)

    def confusion(k):
        for i in range(N_ITER):
            x = 0.5 + i
            g = ad.gradient(lambda x: x * ad.gradient(lambda y: x + y, 1.0)[0], x)[0]
            assert g == 1.0

    run_in_threads([second_derivative, confusion, second_derivative, confusion])


def test_threads_mixing_forward_and_reverse():
    def forward(k):
        for i in range(N_ITER):
            x = 0.2 + 0.01 * i
            _, dy = ad.jvp(lambda x: np.exp(x) * x, (x,), (1.0,))
            assert dy == pytest.approx(np.exp(x) * (1 + x), rel=1e-12)

    def reverse(k):
        for i in range(N_ITER):
            x = 0.2 + 0.01 * i
            (g,) = ad.gradient(lambda x: np.log(x) * x, x)
            assert g == pytest.approx(np.log(x) + 1.0, rel=1e-12)

    run_in_threads([forward, reverse, forward, reverse])


@ad.primitive
def poly(x):
    return x * x + 1.0


@ad.rrule.register(poly)
def poly_rrule(x):
    return poly(x), lambda g: (ad.NoTangent(), 2.0 * x * g)


def test_primitive_called_plainly_while_another_thread_traces():
    """One thread differentiates through ``poly`` while another calls it on plain values."""
    plain_results = []

    def tracer(k):
        for i in range(N_ITER):
            x = 0.5 + 0.01 * i
            (g,) = ad.gradient(lambda x: poly(x) * 3.0, x)
            assert g == pytest.approx(6.0 * x, rel=1e-12)

    def plain(k):
        for i in range(N_ITER * 5):
            x = 0.5 + 0.01 * i
            y = poly(x)
            assert type(y) is float
            plain_results.append(y == x * x + 1.0)

    run_in_threads([tracer, plain, tracer, plain])
    assert all(plain_results)


def test_pullbacks_created_in_one_thread_called_in_another():
    backs = []
    xs = [np.array([0.1, 0.2]) * k for k in range(1, 5)]
    for x in xs:
        backs.append(ad.pullback(lambda x: np.sin(x) * x, x)[1])
    results = [None] * 4

    def work(k):
        for _ in range(50):
            results[k] = backs[k](np.ones(2))[0]

    run_in_threads([work] * 4)
    for x, (g,) in zip(xs, [(r,) for r in results]):
        np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-12)
