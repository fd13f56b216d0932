"""Launch dims, output dims and result buffers, for both module kinds.

Unit: ``jarp/warp/_plan/_dims.py``: a ``JaxKernel``'s launch dims (construction-time default, per-call override, a
missing one named), the forms of ``output_dims`` (int, tuple, dict by name in Warp or JAX shapes, at construction
or per call; a ``JaxCallable``'s default follows its first array input), pure outputs zero-filled before every
launch, in-out arguments returned first, and empty arrays.

Tests run over both kinds (``tests/support/kinds.py``) where both have the feature; values are checked against NumPy.
Zero-fill is checked in buffers filled with a sentinel first (`_in_poisoned_buffers`): a fresh XLA buffer is often
zero already, so a result that merely happens to start at zero proves nothing.
"""

import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels as k
from tests.support.kernels import BIN_WEIGHTS, BINS, ERRORS, N_BINS, vecmat_data
from tests.support.kinds import Kind, over_kinds

# ======================================================================================================================
# Launch dims (JaxKernel) and output dims: construction-time defaults, call-time overrides
# ======================================================================================================================


def test_missing_launch_dims_is_named():
    m = jax_kernel(k.diagonal_kernel)
    with pytest.raises(ERRORS, match="launch_dims"):
        m()
    with pytest.raises(ERRORS, match="launch_dims"):
        jax.jit(lambda: m())()


def test_construction_time_launch_and_output_dims():
    diag = jax_kernel(k.diagonal_kernel, launch_dims=4)
    (out,) = diag()
    assert out.shape == (4, 3, 3)
    (out,) = diag(launch_dims=2)  # the call option wins
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out[1], np.diag([1.0, 2.0, 3.0]).astype(np.float32))

    funky = jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3})
    a_np = np.arange(8, dtype=np.float32)
    b, c = jax.jit(funky)(jnp.asarray(a_np))
    np.testing.assert_array_equal(b, a_np[:5] + 1.0)
    np.testing.assert_array_equal(c, 2.0 * a_np[:3])
    b, c = funky(jnp.asarray(a_np), output_dims=2)  # the call option wins
    np.testing.assert_array_equal(b, a_np[:2] + 1.0)
    np.testing.assert_array_equal(c, 2.0 * a_np[:2])


@pytest.mark.parametrize("dims", [(), (1, 1, 1, 1, 1)])
def test_launch_dims_outside_warps_one_to_four_are_refused_where_given(dims: tuple[int, ...]):
    """At construction (not at the first call) and as a call option, by the same check and message."""
    with pytest.raises(ValueError, match=r"jax_kernel\(\): launch_dims must have 1 to 4 dims, got"):
        jax_kernel(k.diagonal_kernel, launch_dims=dims)
    m = jax_kernel(k.diagonal_kernel, launch_dims=2)
    with pytest.raises(ValueError, match=r"launch_dims must have 1 to 4 dims, got"):
        m(launch_dims=dims)


def test_matmul_tuple_output_dims_and_construction_launch_dims():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 2)).astype(np.float32)
    b = rng.normal(size=(2, 4)).astype(np.float32)
    m = jax_kernel(k.matmul_kernel, launch_dims=(3, 4))
    (c,) = m(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    # output bigger than the launch: the rest stays zero
    (c,) = m(jnp.asarray(a), jnp.asarray(b), output_dims=(4, 5))
    expected = np.zeros((4, 5), np.float32)
    expected[:3, :4] = a @ b
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-6)


def test_callable_default_output_dims_follow_first_array_input_and_are_zero_filled():
    # c and d both default to the Warp shape of `a` (10,); the vec2 kernel only writes d[:5], the rest stays zero
    m = jax_callable(k.example_func, num_outputs=2)
    a = np.arange(10, dtype=np.float32)
    b = np.arange(10, dtype=np.float32).reshape((5, 2))
    c, d = jax.jit(lambda a, b: m(a, b, 2.0))(jnp.asarray(a), jnp.asarray(b))
    assert c.shape == (10,)
    assert d.shape == (10, 2)
    np.testing.assert_array_equal(c, 2.0 * a)
    np.testing.assert_array_equal(d[:5], 2.0 * b)
    np.testing.assert_array_equal(d[5:], np.zeros((5, 2), np.float32))


N4 = 4


@pytest.mark.parametrize(
    ("construction", "call"),
    [
        pytest.param(None, None, id="default"),
        pytest.param(None, N4, id="int"),
        pytest.param(None, (N4,), id="tuple"),
        pytest.param(None, {"d": N4, "e": N4, "f": N4}, id="dict-warp"),
        pytest.param(None, {"d": N4, "e": (N4, 3), "f": (N4, 2, 2)}, id="dict-jax"),
        pytest.param(None, {"d": (N4,), "e": (N4, 3), "f": (N4, 2, 2)}, id="dict-from-shapes"),
        pytest.param({"f": (N4, 2, 2), "d": N4, "e": [N4]}, None, id="construction-dict"),
        pytest.param(N4, None, id="construction-int"),
    ],
)
def test_callable_vecmat_output_dims_forms(construction, call):
    a, b, c = vecmat_data(N4)
    m = jax_callable(k.vecmat_func, num_outputs=3, output_dims=construction)
    fn = jax.jit(lambda a, b, c: m(a, b, c) if call is None else m(a, b, c, output_dims=call))
    d, e, f = fn(jnp.asarray(a), jnp.asarray(b), jnp.asarray(c))
    assert (d.shape, e.shape, f.shape) == ((N4,), (N4, 3), (N4, 2, 2))
    np.testing.assert_allclose(d, 2.0 * a)
    np.testing.assert_allclose(e, b * a[:, None])
    np.testing.assert_allclose(f, c * a[:, None, None])


# ======================================================================================================================
# Zero-filled outputs; in-out arguments
# ======================================================================================================================


SENTINEL = 1000.0


def _in_poisoned_buffers(fn: Callable[..., Any], args: Sequence[Any], shapes: Sequence[tuple[int, ...]]) -> Any:
    """``fn(*args)`` under ``jax.jit``, its float32 results written into buffers that hold `SENTINEL` beforehand.

    One buffer of each result's shape, filled with the sentinel, is donated to the jitted call: XLA places the results
    in them (it warns of a donated buffer it could not use, which fails here), so a launch that does not zero-fill its
    outputs returns the sentinel plus what it accumulated.
    """
    poison = [jnp.full(shape, SENTINEL, jnp.float32) for shape in shapes]
    f = jax.jit(lambda args, poison: fn(*args), donate_argnums=1, keep_unused=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*donated buffers were not usable")
        out = f(tuple(args), poison)
    assert all(p.is_deleted() for p in poison)
    return out


@pytest.mark.launch_paths  # zero-fill is done by the native handler and by the Python executors
@pytest.mark.parametrize("where", ["construction", "call"])
@over_kinds
def test_pure_outputs_start_zero_filled(kind: Kind, where):
    if where == "construction":
        m = kind("scatter_add", output_dims=N_BINS)
    else:
        m = partial(kind("scatter_add"), output_dims=N_BINS)
    expected = np.bincount(BINS, weights=BIN_WEIGHTS, minlength=N_BINS).astype(np.float32)
    bins, weights = jnp.asarray(BINS), jnp.asarray(BIN_WEIGHTS)
    for _ in range(3):
        (out,) = m(bins, weights)
        np.testing.assert_array_equal(out, expected)

    @jax.jit
    def twice(bins, weights):
        (x,) = m(bins, weights)
        (y,) = m(bins, weights)
        return x, y, x + y

    for _ in range(2):
        x, y, z = twice(bins, weights)
        np.testing.assert_array_equal(x, expected)
        np.testing.assert_array_equal(y, expected)
        np.testing.assert_array_equal(z, 2.0 * expected)
    (out,) = _in_poisoned_buffers(m, (bins, weights), [(N_BINS,)])
    np.testing.assert_array_equal(out, expected)
    # under vmap every slice of the batched output is zero-filled, not only the first
    batched = jax.vmap(m, in_axes=(None, 0))
    weights3 = jnp.stack([weights, 2 * weights, -weights])
    (out,) = _in_poisoned_buffers(batched, (bins, weights3), [(3, N_BINS)])
    np.testing.assert_array_equal(out, np.stack([expected, 2 * expected, -expected]))


@pytest.mark.launch_paths  # zero-fill is done by the native handler and by the Python executors
def test_a_repeated_thread_index_name_keeps_the_zero_fill():
    # ``i, i = wp.tid()`` then ``out[i, i] = 1.0`` over a 2-d launch writes the diagonal alone. It looks like the
    # elementwise ``i, j`` store whose fill is skipped; skipped here, the rest of ``out`` would be left as it was.
    n = 512
    m = jax_kernel(k.repeated_tid_diagonal, launch_dims=(n, n), output_dims=(n, n))
    expected = np.eye(n, dtype=np.float32)
    (out,) = _in_poisoned_buffers(m, (), [(n, n)])
    np.testing.assert_array_equal(out, expected)
    for _ in range(3):
        garbage = jnp.full((n, n), SENTINEL, jnp.float32).block_until_ready()
        del garbage  # its memory is free for the next result
        (out,) = m()
        np.testing.assert_array_equal(out, expected)
    x, y = jax.jit(lambda: (m()[0], 2.0 * m()[0]))()
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_array_equal(y, 2.0 * expected)


@over_kinds
def test_in_out_argument(kind: Kind):
    m = kind("rowsum", in_out_argnames=["sums"])
    matrix = np.arange(12, dtype=np.float32).reshape((3, 4))
    init = np.array([10.0, -20.0, 30.0], np.float32)
    for fn in (m, jax.jit(m)):
        (sums,) = fn(jnp.asarray(matrix), jnp.asarray(init))
        np.testing.assert_array_equal(sums, init + matrix.sum(axis=1))


@over_kinds
def test_output_dims_for_an_in_out_argument_takes_warps_meaning(kind: Kind):
    """As in Warp's bridge, dims given for an in-out argument are its input's shape (Warp dims or the whole JAX
    shape), by name or as the one shape of a call with no pure outputs; other dims are an error naming it."""
    matrix = jnp.arange(12, dtype=jnp.float32).reshape((3, 4))
    init = jnp.array([10.0, -20.0, 30.0], jnp.float32)
    expected = np.asarray(init) + np.asarray(matrix).sum(axis=1)
    for dims in ({"sums": 3}, {"sums": (3,)}, 3, [3]):
        for where in ("construction", "call"):
            if where == "construction":
                m = kind("rowsum", in_out_argnames=["sums"], output_dims=dims)
                (sums,) = jax.jit(m)(matrix, init)
            else:
                m = kind("rowsum", in_out_argnames=["sums"])
                (sums,) = jax.jit(partial(m, output_dims=dims))(matrix, init)
            np.testing.assert_array_equal(sums, expected)
    both = kind("rowsum_count", num_outputs=2, in_out_argnames=["sums"])
    sums, counts = jax.jit(partial(both, output_dims={"sums": 3, "counts": 3}))(matrix, init)
    np.testing.assert_array_equal(sums, expected)
    np.testing.assert_array_equal(counts, np.full(3, 4.0, np.float32))
    m = kind("rowsum", in_out_argnames=["sums"])
    with pytest.raises(ValueError, match=r"output_dims\['sums'\].*in-out argument.*\(3,\)"):
        m(matrix, init, output_dims={"sums": 5})
    with pytest.raises(ValueError, match="in-out argument 'sums'"):
        m(matrix, init, output_dims=(3, 4))
    with pytest.raises(ValueError, match=r"names \['nope'\].*neither pure outputs"):
        both(matrix, init, output_dims={"counts": 3, "nope": 2})


@pytest.mark.launch_paths  # zero-fill is done by the native handler and by the Python executors
@over_kinds
def test_in_out_comes_first_and_pure_output_is_zero_filled(kind: Kind):
    m = kind("rowsum_count", num_outputs=2, in_out_argnames=["sums"])
    matrix = np.arange(12, dtype=np.float32).reshape((3, 4))
    init = np.array([10.0, 20.0, 30.0], np.float32)
    call = partial(m, output_dims={"counts": 3})
    for fn in (call, jax.jit(call)):
        sums, counts = fn(jnp.asarray(matrix), jnp.asarray(init))
        np.testing.assert_array_equal(sums, init + matrix.sum(axis=1))
        np.testing.assert_array_equal(counts, np.full(3, 4.0, np.float32))
    # and under the default vmap, eagerly and under jit
    matrices = np.arange(24, dtype=np.float32).reshape((2, 3, 4))
    inits = np.array([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]], np.float32)
    batched = jax.vmap(partial(m, output_dims={"counts": 3}))
    for fn in (batched, jax.jit(batched)):
        sums, counts = fn(jnp.asarray(matrices), jnp.asarray(inits))
        np.testing.assert_array_equal(sums, inits + matrices.sum(axis=2))
        np.testing.assert_array_equal(counts, np.full((2, 3), 4.0, np.float32))
    for fn, args, shape in ((call, (matrix, init), (3,)), (batched, (matrices, inits), (2, 3))):
        sums, counts = _in_poisoned_buffers(fn, [jnp.asarray(a) for a in args], [shape, shape])
        np.testing.assert_array_equal(sums, args[1] + args[0].sum(axis=-1))
        np.testing.assert_array_equal(counts, np.full(shape, 4.0, np.float32))


# ======================================================================================================================
# Empty arrays
# ======================================================================================================================


@pytest.mark.launch_paths  # zero-fill is done by the native handler and by the Python executors
@over_kinds
def test_empty_arrays(kind: Kind):
    triple = kind("triple")
    (y,) = triple(jnp.zeros(0, dtype=jnp.float32))
    assert y.shape == (0,)
    (y,) = jax.jit(jax.vmap(triple))(jnp.zeros((3, 0), dtype=jnp.float32))
    assert y.shape == (3, 0)
    (y,) = jax.vmap(triple)(jnp.zeros((0, 4), dtype=jnp.float32))
    assert y.shape == (0, 4)
    (h,) = kind("scatter_add")(jnp.zeros(0, jnp.int32), jnp.zeros(0, jnp.float32), output_dims=3)
    np.testing.assert_array_equal(h, np.zeros(3, np.float32))  # nothing launched, still zero-filled
    scatter = partial(kind("scatter_add"), output_dims=3)
    (h,) = _in_poisoned_buffers(scatter, (jnp.zeros(0, jnp.int32), jnp.zeros(0, jnp.float32)), [(3,)])
    np.testing.assert_array_equal(h, np.zeros(3, np.float32))
