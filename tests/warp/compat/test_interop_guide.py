"""Every runnable JAX example of Warp's interop guide, ported to ``jarp.warp`` and checked against NumPy.

Source: the "Using Warp kernels as JAX primitives" section of Warp's interoperability guide
(``docs/user_guide/interoperability.rst`` in NVIDIA/warp). Differences from the guide: ``from jarp.warp import jax_kernel,
jax_callable``; a jarp call ALWAYS returns a tuple (so ``(out,) = jax_triple(x)``); the kernels live in
``tests/support/kernels.py``; and every example asserts its values instead of printing them.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels as k

# ----------------------------------------------------------------------------------------------------------------------
# Using Warp kernels as JAX primitives
# ----------------------------------------------------------------------------------------------------------------------


def test_triple():
    jax_triple = jax_kernel(k.triple_kernel)

    @jax.jit
    def f():
        x = jnp.arange(0, 64, dtype=jnp.float32)
        return jax_triple(x)

    result = f()
    assert isinstance(result, tuple)
    assert len(result) == 1
    (out,) = result
    assert out.shape == (64,)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, 3.0 * np.arange(64, dtype=np.float32))


# ----------------------------------------------------------------------------------------------------------------------
# Input and Output Semantics
# ----------------------------------------------------------------------------------------------------------------------


def test_add_two_inputs_one_output():
    jax_add = jax_kernel(k.add_int_kernel)

    @jax.jit
    def f():
        n = 10
        a = jnp.arange(n, dtype=jnp.int32)
        b = jnp.ones(n, dtype=jnp.int32)
        return jax_add(a, b)

    (out,) = f()
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(out, np.arange(10, dtype=np.int32) + 1)


def test_sincos_one_input_two_outputs():
    jax_sincos = jax_kernel(k.sincos_kernel, num_outputs=2)  # specify multiple outputs

    @jax.jit
    def f():
        a = jnp.linspace(0, 2 * math.pi, 32)
        return jax_sincos(a)

    result = f()
    assert isinstance(result, tuple)
    assert len(result) == 2
    s, c = result
    angle = np.linspace(0, 2 * math.pi, 32, dtype=np.float32)
    np.testing.assert_allclose(s, np.sin(angle), atol=1e-6)
    np.testing.assert_allclose(c, np.cos(angle), atol=1e-6)


def test_diagonal_no_inputs_launch_dims():
    jax_diagonal = jax_kernel(k.diagonal_kernel)

    @jax.jit
    def f():
        # launch dimensions determine the output shape
        return jax_diagonal(launch_dims=4)

    (out,) = f()
    assert out.shape == (4, 3, 3)  # mat33 array of 4 -> JAX shape (4, 3, 3)
    assert out.dtype == jnp.float32
    expected = np.broadcast_to(np.diag([1.0, 2.0, 3.0]).astype(np.float32), (4, 3, 3))
    np.testing.assert_array_equal(out, expected)


# ----------------------------------------------------------------------------------------------------------------------
# Scalar Inputs
# ----------------------------------------------------------------------------------------------------------------------


def test_scalar_input_constant():
    jax_scale = jax_kernel(k.scale_kernel)

    @jax.jit
    def f():
        a = jnp.arange(10, dtype=jnp.float32)
        return jax_scale(a, 2.0)  # ok: constant scalar argument

    (out,) = f()
    np.testing.assert_array_equal(out, 2.0 * np.arange(10, dtype=np.float32))


def test_scalar_input_traced_is_a_runtime_value():
    # Warp's bridge rejects this call; in jarp a traced scalar becomes a runtime value (plan/test_runtime_scalars.py).
    jax_scale = jax_kernel(k.scale_kernel)

    @jax.jit
    def f(a, s):
        return jax_scale(a, s)

    a = jnp.arange(10, dtype=jnp.float32)
    (out,) = f(a, 2.0)
    np.testing.assert_array_equal(out, 2.0 * np.arange(10, dtype=np.float32))


def test_scalar_input_static_argnames():
    jax_scale = jax_kernel(k.scale_kernel)

    # make scalar arguments static
    @partial(jax.jit, static_argnames=["s"])
    def f(a, s):
        return jax_scale(a, s)  # ok: static scalar argument

    a = jnp.arange(10, dtype=jnp.float32)
    (out,) = f(a, 2.0)
    np.testing.assert_array_equal(out, 2.0 * np.arange(10, dtype=np.float32))
    (out,) = f(a, s=-0.5)
    np.testing.assert_array_equal(out, -0.5 * np.arange(10, dtype=np.float32))


# ----------------------------------------------------------------------------------------------------------------------
# Kernel Launch and Output Dimensions
# ----------------------------------------------------------------------------------------------------------------------


def test_matmul_custom_launch_dims():
    # no need to specify launch dims here
    jax_matmul = jax_kernel(k.matmul_kernel)

    @jax.jit
    def f():
        N1, M1, K1 = 3, 4, 2
        a1 = jnp.full((N1, K1), 2, dtype=jnp.float32)
        b1 = jnp.full((K1, M1), 3, dtype=jnp.float32)

        # use custom launch dims
        result1 = jax_matmul(a1, b1, launch_dims=(N1, M1))

        N2, M2, K2 = 4, 3, 2
        a2 = jnp.full((N2, K2), 2, dtype=jnp.float32)
        b2 = jnp.full((K2, M2), 3, dtype=jnp.float32)

        # use custom launch dims
        result2 = jax_matmul(a2, b2, launch_dims=(N2, M2))

        return result1, result2

    (r1,), (r2,) = f()
    np.testing.assert_array_equal(r1, np.full((3, 4), 12.0, dtype=np.float32))
    np.testing.assert_array_equal(r2, np.full((4, 3), 12.0, dtype=np.float32))


def test_matmul_values_against_numpy():
    # same example with non-constant entries, so a transposed or misindexed product would show
    jax_matmul = jax_kernel(k.matmul_kernel)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 2)).astype(np.float32)
    b = rng.normal(size=(2, 4)).astype(np.float32)
    (c,) = jax.jit(lambda a, b: jax_matmul(a, b, launch_dims=(3, 4)))(jnp.asarray(a), jnp.asarray(b))
    assert c.shape == (3, 4)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def _funky_expected(a, n_b, n_c, launch):
    b = np.zeros(n_b, np.float32)
    c = np.zeros(n_c, np.float32)
    m = min(launch, len(a))
    b[: min(m, n_b)] = a[: min(m, n_b)] + 1.0
    c[: min(m, n_c)] = 2.0 * a[: min(m, n_c)]
    return b, c


@pytest.mark.parametrize(
    ("kwargs", "n_b", "n_c", "launch"),
    [
        # Specify a custom output shape used for all outputs
        pytest.param({"output_dims": 5}, 5, 5, 8, id="int"),
        # Specify different output dimensions for each output using a dictionary
        pytest.param({"output_dims": {"b": 5, "c": 3}}, 5, 3, 8, id="dict"),
        # Specify custom launch and output dimensions together (b's tail beyond the launch stays zero)
        pytest.param({"launch_dims": 4, "output_dims": {"b": 6, "c": 3}}, 6, 3, 4, id="launch_dims+dict"),
        # "Multi-dimensional shapes can be specified using tuples or lists of integers"
        pytest.param({"output_dims": (5,)}, 5, 5, 8, id="tuple"),
        pytest.param({"output_dims": [5]}, 5, 5, 8, id="list"),
        pytest.param({"launch_dims": (4,), "output_dims": {"b": [6], "c": (3,)}}, 6, 3, 4, id="tuple+dict-of-seq"),
    ],
)
def test_funky_output_dims(kwargs, n_b, n_c, launch):
    jax_funky = jax_kernel(k.funky_kernel, num_outputs=2)
    a_np = 0.5 * np.arange(8, dtype=np.float32) - 1.0
    a = jnp.asarray(a_np)

    b, c = jax.jit(lambda a: jax_funky(a, **kwargs))(a)

    exp_b, exp_c = _funky_expected(a_np, n_b, n_c, launch)
    assert b.shape == (n_b,)
    assert c.shape == (n_c,)
    np.testing.assert_array_equal(b, exp_b)
    np.testing.assert_array_equal(c, exp_c)


def test_funky_output_dims_eager():
    # the same forms outside jit
    jax_funky = jax_kernel(k.funky_kernel, num_outputs=2)
    a_np = 0.5 * np.arange(8, dtype=np.float32) - 1.0
    a = jnp.asarray(a_np)
    b, c = jax_funky(a, launch_dims=4, output_dims={"b": 6, "c": 3})
    exp_b, exp_c = _funky_expected(a_np, 6, 3, 4)
    np.testing.assert_array_equal(b, exp_b)
    np.testing.assert_array_equal(c, exp_c)


# ----------------------------------------------------------------------------------------------------------------------
# Vector and Matrix Arrays
# ----------------------------------------------------------------------------------------------------------------------

N_VECMAT = 10


def _vecmat_inputs():
    n = N_VECMAT
    a = 1.0 + 0.5 * np.arange(n, dtype=np.float32)  # scalar array
    b = np.arange(3 * n, dtype=np.float32).reshape((n, 3))  # vec3 array
    c = np.arange(4 * n, dtype=np.float32).reshape((n, 2, 2)) - 7.0  # mat22 array
    return a, b, c


@pytest.mark.parametrize(
    "output_dims",
    [
        pytest.param(None, id="default"),
        pytest.param(N_VECMAT, id="int"),
        pytest.param({"d": N_VECMAT, "e": N_VECMAT, "f": N_VECMAT}, id="dict-warp"),
        pytest.param({"d": N_VECMAT, "e": (N_VECMAT, 3), "f": (N_VECMAT, 2, 2)}, id="dict-jax"),
        pytest.param("shapes", id="dict-from-input-shapes"),
    ],
)
def test_vecmat(output_dims):
    jax_vecmat = jax_kernel(k.vecmat_kernel, num_outputs=3)
    a_np, b_np, c_np = _vecmat_inputs()

    @jax.jit
    def f(a, b, c):
        if output_dims is None:
            return jax_vecmat(a, b, c)
        if output_dims == "shapes":
            return jax_vecmat(a, b, c, output_dims={"d": a.shape, "e": b.shape, "f": c.shape})
        return jax_vecmat(a, b, c, output_dims=output_dims)

    d, e, f_ = f(jnp.asarray(a_np), jnp.asarray(b_np), jnp.asarray(c_np))
    assert d.shape == (N_VECMAT,)
    assert e.shape == (N_VECMAT, 3)
    assert f_.shape == (N_VECMAT, 2, 2)
    np.testing.assert_allclose(d, 2.0 * a_np)
    np.testing.assert_allclose(e, b_np * a_np[:, None])
    np.testing.assert_allclose(f_, c_np * a_np[:, None, None])


def test_vecmat_zeros_as_in_guide():
    # the guide's literal call (all-zero inputs) under jit
    jax_vecmat = jax_kernel(k.vecmat_kernel, num_outputs=3)

    @jax.jit
    def f():
        n = 10
        a = jnp.zeros(n, dtype=jnp.float32)  # scalar array
        b = jnp.zeros((n, 3), dtype=jnp.float32)  # vec3 array
        c = jnp.zeros((n, 2, 2), dtype=jnp.float32)  # mat22 array
        d, e, f = jax_vecmat(a, b, c)
        return d, e, f

    d, e, f_ = f()
    assert (d.shape, e.shape, f_.shape) == ((10,), (10, 3), (10, 2, 2))
    assert not np.any(np.asarray(d))
    assert not np.any(np.asarray(e))
    assert not np.any(np.asarray(f_))


# ----------------------------------------------------------------------------------------------------------------------
# JAX VMAP Support
# ----------------------------------------------------------------------------------------------------------------------


def test_vmap_basic_add():
    jax_add = jax_kernel(k.add_kernel)

    # batched inputs
    a = jnp.arange(3 * 4, dtype=jnp.float32).reshape((3, 4))
    b = jnp.ones(3 * 4, dtype=jnp.float32).reshape((3, 4))

    (output,) = jax.jit(jax.vmap(jax_add))(a, b)
    assert output.shape == (3, 4)
    np.testing.assert_array_equal(output, np.arange(12, dtype=np.float32).reshape((3, 4)) + 1.0)


def test_vmap_method_per_call_as_in_guide():
    # "set default vmap behavior" / "uses expand_dims" on an elementwise kernel: both give a + b
    jax_add = jax_kernel(k.add_kernel, vmap_method="sequential")
    a = jnp.arange(3 * 4, dtype=jnp.float32).reshape((3, 4))
    b = jnp.full((3, 4), 2.0, dtype=jnp.float32)
    expected = np.arange(12, dtype=np.float32).reshape((3, 4)) + 2.0

    @jax.jit
    def f(a, b):
        (x,) = jax.vmap(jax_add)(a, b)  # uses "sequential"
        (y,) = jax.vmap(partial(jax_add, vmap_method="expand_dims"))(a, b)  # uses "expand_dims"
        return x, y

    x, y = f(a, b)
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_array_equal(y, expected)


MATRICES = np.arange(2 * 3 * 4, dtype=np.float32).reshape((2, 3, 4))


@pytest.mark.parametrize(
    ("in_axis", "sums_shape", "expected"),
    [
        # vmap with batch dim 0: input 2 matrices with shape (3, 4), output shape (2, 3)
        pytest.param(0, (2, 3), MATRICES.sum(axis=2), id="batch-dim-0"),
        # vmap with batch dim 1: input 3 matrices with shape (2, 4), output shape (3, 2)
        pytest.param(1, (3, 2), MATRICES.sum(axis=2).T, id="batch-dim-1"),
        # vmap with batch dim 2: input 4 matrices with shape (2, 3), output shape (4, 2)
        pytest.param(2, (4, 2), MATRICES.sum(axis=1).T, id="batch-dim-2"),
    ],
)
def test_vmap_rowsum_in_out(in_axis, sums_shape, expected):
    jax_rowsum = jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"])

    # batched input with shape (2, 3, 4)
    matrices = jnp.asarray(MATRICES)

    sums = jnp.zeros(sums_shape, dtype=jnp.float32)
    (output,) = jax.jit(jax.vmap(jax_rowsum, in_axes=(in_axis, 0)))(matrices, sums)
    assert output.shape == sums_shape
    np.testing.assert_array_equal(output, expected)

    # in-out: the row sums are added to the incoming values of `sums`
    init = np.arange(math.prod(sums_shape), dtype=np.float32).reshape(sums_shape) * 100.0
    (output,) = jax.jit(jax.vmap(jax_rowsum, in_axes=(in_axis, 0)))(matrices, jnp.asarray(init))
    np.testing.assert_array_equal(output, init + expected)


def test_rowsum_in_out_unbatched():
    jax_rowsum = jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"])
    init = np.array([1.0, -2.0, 3.0], np.float32)
    (output,) = jax.jit(jax_rowsum)(jnp.asarray(MATRICES[0]), jnp.asarray(init))
    np.testing.assert_array_equal(output, init + MATRICES[0].sum(axis=1))


@pytest.mark.parametrize(
    ("in_axis", "launch_dims", "out_shape"),
    [
        # vmap with batch dim 0: input 20 sets of 50 indices each, output shape (20, 50)
        pytest.param(0, 50, (20, 50), id="batch-dim-0"),
        # vmap with batch dim 1: input 50 sets of 20 indices each, output shape (50, 20)
        pytest.param(1, 20, (50, 20), id="batch-dim-1"),
    ],
)
def test_vmap_lookup_partial_launch_dims(in_axis, launch_dims, out_shape):
    jax_lookup = jax_kernel(k.lookup_kernel)

    # lookup table (not batched)
    N = 100
    table = jnp.arange(N, dtype=jnp.float32)

    # batched indices to look up
    key = jax.random.key(42)
    indices = jax.random.randint(key, (20, 50), 0, N, dtype=jnp.int32)

    (output,) = jax.jit(jax.vmap(partial(jax_lookup, launch_dims=launch_dims), in_axes=(None, in_axis)))(table, indices)
    assert output.shape == out_shape
    expected = np.arange(N, dtype=np.float32)[np.asarray(indices)]
    np.testing.assert_array_equal(output, expected if in_axis == 0 else expected.T)


def test_vmap_lookup_nontrivial_table():
    # same as the guide, with a table that is not the identity map, so index/value confusions would show
    jax_lookup = jax_kernel(k.lookup_kernel)
    table = 0.25 * np.arange(100, dtype=np.float32) ** 2 - 3.0
    indices = np.random.default_rng(42).integers(0, 100, size=(20, 50)).astype(np.int32)
    (output,) = jax.jit(jax.vmap(partial(jax_lookup, launch_dims=50), in_axes=(None, 0)))(
        jnp.asarray(table), jnp.asarray(indices)
    )
    np.testing.assert_array_equal(output, table[indices])


# ----------------------------------------------------------------------------------------------------------------------
# JAX Automatic Differentiation
# ----------------------------------------------------------------------------------------------------------------------


def test_autodiff_scale_sum_square():
    jax_scale = jax_kernel(k.scale_sum_square, num_outputs=1, enable_backward=True)

    # scalars must be static
    @partial(jax.jit, static_argnames=["s"])
    def loss(a, b, s):
        (out,) = jax_scale(a, b, s)
        return jnp.sum(out)

    n = 16
    a = jnp.arange(n, dtype=jnp.float32)
    b = jnp.ones(n, dtype=jnp.float32)
    s = 2.0

    # gradients w.r.t. array inputs
    da, db = jax.grad(loss, argnums=(0, 1))(a, b, s)

    a_np = np.arange(n, dtype=np.float32)
    b_np = np.ones(n, dtype=np.float32)
    inner = a_np * s + b_np
    np.testing.assert_allclose(loss(a, b, s), np.sum(inner**2), rtol=1e-6)
    np.testing.assert_allclose(da, 2.0 * inner * s, rtol=1e-6)
    np.testing.assert_allclose(db, 2.0 * inner, rtol=1e-6)


def test_autodiff_multi_output():
    jax_multi = jax_kernel(k.multi_output, num_outputs=2, enable_backward=True)

    def caller(fn, a, b, s):
        c, d = fn(a, b, s)
        return jnp.sum(c + d)

    n = 16
    a = jnp.arange(n, dtype=jnp.float32)
    b = jnp.ones(n, dtype=jnp.float32)
    s = 2.0

    # differentiate a batched scalar objective over two inputs
    da, db = jax.grad(lambda a, b, s: caller(jax_multi, a, b, s), argnums=(0, 1))(a, b, s)

    a_np = np.arange(n, dtype=np.float32)
    b_np = np.ones(n, dtype=np.float32)
    np.testing.assert_allclose(da, 2.0 * a_np + b_np * s, rtol=1e-6)
    np.testing.assert_allclose(db, a_np * s, rtol=1e-6)

    c, d = jax_multi(a, b, s)
    np.testing.assert_allclose(c, a_np**2, rtol=1e-6)
    np.testing.assert_allclose(d, a_np * b_np * s, rtol=1e-6)


def test_autodiff_scale_vec2():
    jax_vec = jax_kernel(k.scale_vec2, num_outputs=1, enable_backward=True)

    @partial(jax.jit, static_argnames=["s"])
    def vec_loss(a, s):
        (out,) = jax_vec(a, s)
        return jnp.sum(out)

    a2 = jnp.arange(10, dtype=jnp.float32).reshape((5, 2))  # vec2 payload shape
    (da2,) = jax.grad(vec_loss, argnums=(0,))(a2, 3.0)
    assert da2.shape == (5, 2)
    np.testing.assert_allclose(da2, np.full((5, 2), 3.0, dtype=np.float32))
    np.testing.assert_allclose(vec_loss(a2, 3.0), 3.0 * np.arange(10).sum())


# ----------------------------------------------------------------------------------------------------------------------
# Calling Annotated Python Functions
# ----------------------------------------------------------------------------------------------------------------------


def test_jax_callable_two_kernels():
    jax_func = jax_callable(k.example_func, num_outputs=2)

    @jax.jit
    def f():
        # inputs
        a = jnp.arange(10, dtype=jnp.float32)
        b = jnp.arange(10, dtype=jnp.float32).reshape((5, 2))  # wp.vec2
        s = 2.0

        # output shapes
        output_dims = {"c": a.shape, "d": b.shape}

        c, d = jax_func(a, b, s, output_dims=output_dims)

        return c, d

    r1, r2 = f()
    assert r1.shape == (10,)
    assert r2.shape == (5, 2)
    np.testing.assert_array_equal(r1, 2.0 * np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(r2, 2.0 * np.arange(10, dtype=np.float32).reshape((5, 2)))


def test_jax_callable_two_kernels_warp_convention_and_eager():
    jax_func = jax_callable(k.example_func, num_outputs=2)
    a = jnp.arange(10, dtype=jnp.float32)
    b = jnp.arange(10, dtype=jnp.float32).reshape((5, 2))
    result = jax_func(a, b, -1.5, output_dims={"c": 10, "d": 5})
    assert isinstance(result, tuple)
    c, d = result
    np.testing.assert_array_equal(c, -1.5 * np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(d, -1.5 * np.arange(10, dtype=np.float32).reshape((5, 2)))
