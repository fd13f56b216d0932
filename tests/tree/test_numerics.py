from __future__ import annotations

import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from jax.test_util import check_grads

from jarp.tree import isin, kahan_summation

# kahan_summation


def test_single_summand() -> None:
    total, compensation = kahan_summation({"a": jnp.float32(2.0)})
    assert total["a"] == 2.0
    assert compensation["a"] == 0.0
    total, compensation = kahan_summation(jnp.float32(2.0), compensate=jnp.float32(0.5))
    assert total == 2.0
    assert compensation == 0.5


def test_recovers_lost_low_order_bits() -> None:
    # float32 spacing at 1e8 is 8: added one at a time, every 1.0 is rounded away.
    big, one = jnp.float32(1e8), jnp.float32(1.0)
    naive = big
    for _ in range(8):
        naive = naive + one
    assert naive == 1e8
    total, compensation = kahan_summation(big, *[one] * 8)
    assert total == 1e8 + 8
    assert compensation == 0.0
    total, compensation = kahan_summation(big, *[one] * 3)
    assert total == 1e8
    assert compensation == -3.0
    total, compensation = kahan_summation(total, *[one] * 5, compensate=compensation)
    assert total == 1e8 + 8
    assert compensation == 0.0


def _running_sums(increments: jax.Array, start: jax.Array) -> tuple[jax.Array, jax.Array]:
    def kahan_step(carry: tuple[jax.Array, jax.Array], x: jax.Array) -> tuple[tuple[jax.Array, jax.Array], None]:
        return kahan_summation(carry[0], x, compensate=carry[1]), None

    (total, _), _ = jax.lax.scan(kahan_step, (start, jnp.zeros_like(start)), increments)
    naive, _ = jax.lax.scan(lambda s, x: (s + x, None), start, increments)
    return total, naive


def test_running_total_in_compiled_loop() -> None:
    # XLA must not simplify the compensation away: (t - s) - y is zero only in exact arithmetic.
    increments = jnp.asarray(np.random.default_rng(0).uniform(0.0, 0.2, 20_000).astype(np.float32))
    start = jnp.float32(1000.0)
    total, naive = jax.jit(_running_sums)(increments, start)
    exact = 1000.0 + math.fsum(np.asarray(increments, dtype=np.float64))
    kahan_error, naive_error = abs(float(total) - exact), abs(float(naive) - exact)
    assert kahan_error < 1e-3 < naive_error
    assert kahan_error * 100 < naive_error


def test_pytrees_vmap_and_structure_errors() -> None:
    trees = [{"e": jnp.full((3,), 1e8, jnp.float32), "n": jnp.ones(3, jnp.int32)}] + [
        {"e": jnp.ones(3, jnp.float32), "n": jnp.ones(3, jnp.int32)}
    ] * 8
    total, compensation = kahan_summation(*trees)
    assert total["e"].tolist() == [1e8 + 8] * 3
    assert total["n"].tolist() == [9] * 3
    assert total["n"].dtype == jnp.int32
    assert compensation["n"].tolist() == [0] * 3
    batched, _ = jax.vmap(kahan_summation)(*trees)
    np.testing.assert_array_equal(batched["e"], total["e"])
    with pytest.raises(ValueError, match="`summands\\[1\\]` has pytree structure"):
        kahan_summation({"a": jnp.zeros(1)}, {"b": jnp.zeros(1)})
    with pytest.raises(ValueError, match="`compensate` has pytree structure"):
        kahan_summation({"a": jnp.zeros(1)}, compensate=jnp.zeros(1))
    with pytest.raises(TypeError, match="at least one summand"):
        kahan_summation()


def test_gradients() -> None:
    @jax.jit
    def f(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
        total, compensation = kahan_summation({"x": a}, {"x": b * 2}, compensate={"x": c})
        return jnp.sum(total["x"] ** 2) + jnp.sum(compensation["x"])

    args = (jnp.array([1.0, 2.0]), jnp.array([0.5, 0.25]), jnp.array([0.0, 0.0]))
    check_grads(f, args, order=1, modes=["fwd", "rev"])
    g_a, g_b = jax.grad(f, argnums=(0, 1))(*args)
    total = args[0] + 2 * args[1]
    np.testing.assert_allclose(g_a, 2 * total)
    np.testing.assert_allclose(g_b, 4 * total)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=40))
@example([0.0, 3.81579177029505e-40])  # a subnormal: XLA flushes it
def test_close_to_exact_sum(values: list[float]) -> None:
    xs = [jnp.float32(v) for v in values]
    total, compensation = kahan_summation(*xs)
    exact = math.fsum(values)
    scale = math.fsum(abs(v) for v in values) or 1.0
    # XLA runs CPU computations with subnormals flushed to zero, so each addition may also lose a subnormal
    # (below float32's `tiny`); hypothesis found [0.0, 3.8e-40], whose sum XLA returns as 0.0.
    flushed = len(values) * float(np.finfo(np.float32).tiny)
    assert abs(float(total) - exact) <= 4 * np.finfo(np.float32).eps * scale + flushed
    assert abs(float(total) - float(compensation) - exact) <= abs(
        float(total) - exact
    ) + 1e-30 + flushed + 2 * np.finfo(np.float32).eps * abs(exact)


@pytest.mark.x64
def test_float64_x64() -> None:
    increments = jnp.asarray(np.random.default_rng(1).uniform(0.0, 1e-6, 5_000))
    total, naive = jax.jit(_running_sums)(increments, jnp.float64(1e9))
    exact = 1e9 + math.fsum(np.asarray(increments))
    assert total.dtype == jnp.float64
    assert abs(float(total) - exact) * 100 < abs(float(naive) - exact)
    check_grads(lambda a, b: kahan_summation(a, b)[0] ** 2, (jnp.float64(1.5), jnp.float64(2.0)), order=2)


# isin


def test_isin_basic_and_sentinels() -> None:
    a = jnp.array([[0, 1, 2], [3, 4, 5]])
    b = jnp.array([5, 1, -1, 6, 1])  # -1 and 6 are outside range(6): ignored
    out = isin(a, b, max_item=6)
    assert out.shape == (2, 3)
    assert out.dtype == jnp.bool_
    assert out.tolist() == [[False, True, False], [False, False, True]]
    # Out-of-range queries never match, even if the same value is in b.
    assert isin(jnp.array([-1, 6, 7]), jnp.array([-1, 6, 7]), max_item=6).tolist() == [False, False, False]
    assert isin(jnp.array([0]), jnp.array([0]), max_item=0).tolist() == [False]
    assert isin(np.array([1, 2], np.uint8), np.array([2], np.uint8), max_item=3).tolist() == [False, True]


def test_isin_errors() -> None:
    with pytest.raises(TypeError, match="`a` must be an integer array, got dtype float32"):
        isin(jnp.zeros(2), jnp.zeros(2, jnp.int32), 3)
    with pytest.raises(TypeError, match="`b` must be an integer array, got dtype bool"):
        isin(jnp.zeros(2, jnp.int32), jnp.zeros(2, bool), 3)
    with pytest.raises(TypeError, match="`max_item` must be a concrete Python int, but got a traced value"):
        jax.jit(lambda n: isin(jnp.zeros(2, jnp.int32), jnp.zeros(2, jnp.int32), n))(3)
    with pytest.raises(TypeError, match="of type float"):
        isin(jnp.zeros(2, jnp.int32), jnp.zeros(2, jnp.int32), 3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        isin(jnp.zeros(2, jnp.int32), jnp.zeros(2, jnp.int32), -1)


def test_isin_under_jit_and_vmap() -> None:
    a = jnp.array([[0, 1, 2], [2, 3, 4]])
    b = jnp.array([[1, 9], [4, 2]])
    jitted = jax.jit(isin, static_argnames="max_item")(a, b, max_item=5)
    vmapped = jax.vmap(lambda x, y: isin(x, y, 5))(a, b)
    assert jitted.tolist() == [[False, True, True], [True, False, True]]  # b as a whole
    assert vmapped.tolist() == [[False, True, False], [True, False, True]]  # row by row


# Fixed lengths and few table sizes keep the number of distinct shapes (and compilations) small.
@settings(max_examples=30, deadline=None)
@given(
    a=st.lists(st.integers(-3, 12), min_size=12, max_size=12),
    b=st.lists(st.integers(-3, 12), min_size=8, max_size=8),
    max_item=st.sampled_from([0, 1, 6, 10]),
)
def test_isin_matches_numpy(a: list[int], b: list[int], max_item: int) -> None:
    a_arr, b_arr = np.array(a, np.int32), np.array(b, np.int32)
    expected = np.isin(a_arr, b_arr) & (a_arr >= 0) & (a_arr < max_item)
    np.testing.assert_array_equal(isin(a_arr, b_arr, max_item), expected)
