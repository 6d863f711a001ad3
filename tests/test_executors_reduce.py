"""Chunking and deterministic reductions, checked against independent computations."""

from __future__ import annotations

import math
import operator
import random

import numpy as np
import pytest

import executors
from executors import chunk_ranges, neumaier_sum, tree_sum

# ------------------------------------------------------------- chunk_ranges


@pytest.mark.parametrize("n", [0, 1, 2, 15, 16, 17, 100, 1001])
@pytest.mark.parametrize("size", [None, 1, 3, 16, 1000])
def test_chunk_ranges_cover_in_order(n, size):
    chunks = chunk_ranges(n, size)
    flat = [i for r in chunks for i in r]
    assert flat == list(range(n))
    assert all(len(r) >= 1 and r.step == 1 for r in chunks)
    expected = size if size is not None else max(1, -(-n // 16))
    assert all(len(r) == expected for r in chunks[:-1])
    if chunks:
        assert 1 <= len(chunks[-1]) <= expected


def test_chunk_ranges_default_is_at_most_16_chunks():
    assert [len(chunk_ranges(n)) for n in (1, 16, 17, 32, 33, 1000)] == [1, 16, 9, 16, 11, 16]
    assert chunk_ranges(40) == [range(i, min(i + 3, 40)) for i in range(0, 40, 3)]


def test_chunk_ranges_do_not_depend_on_workers_or_config():
    ref = chunk_ranges(103, 10)
    for n_workers in (1, 2, 3, 8):
        with executors.config(executor="threads", n_workers=n_workers, chunk_size=4):
            assert chunk_ranges(103, 10) == ref
            assert chunk_ranges(103) == chunk_ranges(103, None)
    # what workers see is what the parent computed, on every worker count
    for n_workers in (1, 2, 3):
        ex = executors.resolve("threads", n_workers)
        assert ex.map(lambda r: (r.start, r.stop), ref) == [(r.start, r.stop) for r in ref]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_chunk_ranges_validates_chunk_size(bad):
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_ranges(10, bad)


@pytest.mark.parametrize("bad", [-1, 2.0, None, "3"])
def test_chunk_ranges_validates_n_items(bad):
    with pytest.raises(ValueError, match="n_items"):
        chunk_ranges(bad, 2)


def test_chunk_ranges_accepts_numpy_integers():
    assert chunk_ranges(np.int64(5), np.int32(2)) == [range(0, 2), range(2, 4), range(4, 5)]


# ----------------------------------------------------------------- tree_sum


def _hand_pairwise(v):
    """The tree written out by hand for the lengths tested below."""
    n = len(v)
    if n == 1:
        return v[0]
    if n == 2:
        return v[0] + v[1]
    if n == 3:
        return (v[0] + v[1]) + v[2]
    if n == 4:
        return (v[0] + v[1]) + (v[2] + v[3])
    if n == 5:
        return ((v[0] + v[1]) + (v[2] + v[3])) + v[4]
    if n == 6:
        return ((v[0] + v[1]) + (v[2] + v[3])) + (v[4] + v[5])
    if n == 7:
        return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + v[6])
    if n == 8:
        return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
    raise NotImplementedError


def _bits(x):
    return float(x).hex()


@pytest.mark.parametrize("n", range(1, 9))
def test_tree_sum_order_matches_hand_written_tree(n):
    rng = random.Random(n)
    for _ in range(200):
        v = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 12) for _ in range(n)]
        assert _bits(tree_sum(v)) == _bits(_hand_pairwise(v))


def test_tree_sum_order_is_observable():
    # (a+b)+(c+d) vs ((a+b)+c)+d differ: the test above can fail
    v = [1e16, 1.0, -1e16, 1.0]
    assert tree_sum(v) == (1e16 + 1.0) + (-1e16 + 1.0) == 0.0
    assert ((1e16 + 1.0) + -1e16) + 1.0 == 1.0  # the left fold gives other bits
    rng = random.Random(0)
    differs = 0
    for _ in range(200):
        w = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 12) for _ in range(7)]
        left = w[0]
        for x in w[1:]:
            left += x
        differs += _bits(left) != _bits(tree_sum(w))
    assert differs > 20


def test_tree_sum_arrays_and_custom_add():
    rng = np.random.default_rng(3)
    arrs = [rng.standard_normal(50) * 10.0 ** rng.integers(-8, 8, 50) for _ in range(6)]
    copies = [a.copy() for a in arrs]
    assert tree_sum(arrs).tobytes() == _hand_pairwise(arrs).tobytes()
    assert all((a == c).all() for a, c in zip(arrs, copies))  # inputs untouched
    calls = []

    def add(a, b):
        calls.append((a, b))
        return f"({a}+{b})"

    assert tree_sum("abcde", add=add) == "(((a+b)+(c+d))+e)"
    assert tree_sum([[1], [2], [3]], add=operator.add) == [1, 2, 3]


def test_tree_sum_empty_and_zero():
    with pytest.raises(ValueError, match="empty"):
        tree_sum([])
    z = object()
    assert tree_sum([], zero=z) is z
    assert math.copysign(1, tree_sum([-0.0], zero=0.0)) == -1  # zero not added
    x = np.ones(3)
    assert tree_sum([x]) is x
    assert tree_sum(iter([1, 2, 3])) == 6


def test_tree_sum_same_bits_from_any_backend_and_worker_count():
    rng = np.random.default_rng(7)
    xs = rng.standard_normal(500) * 10.0 ** rng.integers(-10, 10, 500)
    chunks = chunk_ranges(len(xs), 13)

    def work(r, xs):
        acc = 0.0
        for i in r:
            acc += xs[i] ** 3
        return acc

    ref = tree_sum(executors.SerialExecutor().map(work, chunks, shared=(xs,)))
    for n in (1, 2, 3):
        got = tree_sum(executors.resolve("threads", n).map(work, chunks, shared=(xs,)))
        assert _bits(got) == _bits(ref)


# ------------------------------------------------------------- neumaier_sum


def test_neumaier_classic_cases():
    assert neumaier_sum([1e100, 1.0, -1e100]) == 1.0
    assert neumaier_sum([1.0, 1e100, 1.0, -1e100]) == 2.0
    assert neumaier_sum([0.1] * 10) == math.fsum([0.1] * 10)
    assert isinstance(neumaier_sum([1, 2, 3]), float)
    assert neumaier_sum([5.0]) == 5.0


def test_neumaier_accuracy_vs_fsum():
    rng = random.Random(11)
    worst_naive = 0.0
    for _ in range(100):
        v = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-10, 10) for _ in range(300)]
        exact = math.fsum(v)
        scale = math.fsum(abs(x) for x in v)
        err = abs(neumaier_sum(v) - exact)
        assert err <= 2 * 2.0**-53 * abs(exact) + 1e-30 * scale
        worst_naive = max(worst_naive, abs(_left_fold(v) - exact) / scale)
    assert worst_naive > 1e-17  # naive summation is measurably worse


def _left_fold(values):
    # written out: the built-in sum() of floats is itself compensated from Python 3.12 on
    total = 0.0
    for v in values:
        total += v
    return total


def test_left_fold_reference_is_naive():
    assert _left_fold([1e100, 1.0, -1e100]) == 0.0


def test_neumaier_elementwise_arrays_vs_fsum():
    rng = np.random.default_rng(5)
    arrs = [rng.standard_normal((4, 3)) * 10.0 ** rng.integers(-12, 12, (4, 3)) for _ in range(200)]
    got = neumaier_sum(arrs)
    assert got.shape == (4, 3) and got.dtype == np.float64
    for idx in np.ndindex(4, 3):
        exact = math.fsum(float(a[idx]) for a in arrs)
        assert abs(got[idx] - exact) <= 2 * 2.0**-53 * abs(exact)
    # deterministic
    assert neumaier_sum(arrs).tobytes() == got.tobytes()


def test_neumaier_broadcasts_scalars_and_arrays():
    out = neumaier_sum([np.array([1e100, 1.0]), 1.0, np.array([-1e100, 0.0])])
    assert out.tolist() == [1.0, 2.0]


def test_neumaier_complex_and_nonfinite():
    z = neumaier_sum([1e100 + 1j, 1.0 + 1e100j, -1e100 - 1e100j])
    assert z == 1.0 + 1j
    assert neumaier_sum([math.inf, 1.0]) == math.inf
    assert math.isnan(neumaier_sum([math.inf, -math.inf]))
    out = neumaier_sum([np.array([np.inf, 1.0]), np.array([1.0, 2.0])])
    assert out.tolist() == [math.inf, 3.0]


def test_neumaier_float32_stays_float32():
    out = neumaier_sum([np.float32(1.0), np.float32(2.0)])
    assert out.dtype == np.float32 and out == 3.0


def test_neumaier_empty():
    with pytest.raises(ValueError, match="empty"):
        neumaier_sum([])
    assert neumaier_sum([], zero=0.0) == 0.0
