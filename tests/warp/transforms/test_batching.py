"""vmap, for both module kinds: the sequential default is correct for every kernel; folding stays available.

Unit: the batching rule of ``jarp/warp/_jax/_primitive.py``. The default (``vmap_method="sequential"``) runs one launch
per batch slice and is correct for kernels that are not elementwise (gathers through a per-batch table, reads of
``a.shape[0]``, atomic reductions into fixed-size outputs). ``"broadcast_all"`` (alias ``"expand_dims"``), at
construction or per call, is correct for elementwise kernels; for a ``JaxKernel`` it folds the batch into launch
dim 0. Also: ``in_axes``/``out_axes``, unbatched (shared) inputs and in-out arguments, nested ``vmap`` and
``eqx.filter_vmap``.

Tests run over both kinds (``tests/support/kinds.py``). Values are checked against NumPy; default-vmap results are also
checked against a per-slice Python loop.
"""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.kernels import N_SPRING, STIFFNESS, spring_data, spring_expected, vecmat_data
from tests.support.kinds import KERNEL, Kind, over_kinds

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

B, N, M, NB = 3, 5, 7, 4


def spring(kind: Kind, **options):
    return kind("spring", num_outputs=2, **options)


# ======================================================================================================================
# The default is correct for every kernel
# ======================================================================================================================


def _nonelementwise_cases():
    rng = np.random.default_rng(1)
    tables = rng.normal(size=(B, N)).astype(np.float32)
    indices = rng.integers(0, N, size=(B, M)).astype(np.int32)
    x = rng.normal(size=(B, N)).astype(np.float32)
    bins = rng.integers(0, NB, size=(B, M)).astype(np.int32)
    weights = rng.random((B, M)).astype(np.float32)
    return {
        # per-batch lookup table gathered through indices
        "gather-per-batch-table": (
            "gather",
            (indices, tables),
            {},
            np.take_along_axis(tables, indices, axis=1),
        ),
        # reads a.shape[0]
        "reads-shape": ("reverse", (x,), {}, x[:, ::-1]),
        # atomic reduction into a fixed-size output
        "atomic-fixed-size-output": (
            "scatter_add",
            (bins, weights),
            {"output_dims": NB},
            np.stack([np.bincount(bins[b], weights=weights[b], minlength=NB) for b in range(B)]).astype(np.float32),
        ),
    }


@pytest.mark.parametrize("case", list(_nonelementwise_cases()))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@over_kinds
def test_default_vmap_is_correct_for_nonelementwise_kernels(kind: Kind, case, jit):
    role, args, call_kwargs, expected = _nonelementwise_cases()[case]
    m = kind(role)
    fn = jax.vmap(partial(m, **call_kwargs))
    if jit:
        fn = jax.jit(fn)
    (out,) = fn(*(jnp.asarray(a) for a in args))
    loop = np.stack([np.asarray(m(*(jnp.asarray(a[b]) for a in args), **call_kwargs)[0]) for b in range(B)])
    np.testing.assert_allclose(loop, expected, rtol=1e-6)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("case", list(_nonelementwise_cases()))
@over_kinds
def test_explicit_sequential_vmap_method(kind: Kind, case):
    role, args, call_kwargs, expected = _nonelementwise_cases()[case]
    for m, kwargs in [
        (kind(role, vmap_method="sequential"), call_kwargs),
        (kind(role, vmap_method="broadcast_all"), {**call_kwargs, "vmap_method": "sequential"}),
    ]:
        (out,) = jax.jit(jax.vmap(partial(m, **kwargs)))(*(jnp.asarray(a) for a in args))
        np.testing.assert_allclose(out, expected, rtol=1e-6)


@over_kinds
@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(batch=st.integers(1, 4), n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_default_vmap_property_reverse_and_gather(kind: Kind, batch, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, n)).astype(np.float32)
    indices = rng.integers(0, n, size=(batch, 3)).astype(np.int32)
    (rev,) = jax.vmap(kind("reverse"))(jnp.asarray(x))
    np.testing.assert_array_equal(rev, x[:, ::-1])
    (gathered,) = jax.vmap(kind("gather"))(jnp.asarray(indices), jnp.asarray(x))
    np.testing.assert_array_equal(gathered, np.take_along_axis(x, indices, axis=1))


# ======================================================================================================================
# "broadcast_all": folding the batch into launch dim 0, for elementwise kernels
# ======================================================================================================================


@over_kinds
def test_vmap_method_none_means_no_batching_rule(kind: Kind):
    """``vmap_method=None`` is Warp's bridge's "no batching rule": an unbatched call runs, ``jax.vmap`` over it is an
    error naming the module and what to do, a per-call method still batches it, and a ``custom_vmap`` rule that
    calls it on the whole batch (as a library batching the call itself does) runs."""
    add = kind("add", vmap_method=None)
    a = jnp.arange(2 * N, dtype=jnp.float32).reshape((2, N))
    (s,) = jax.jit(add)(a[0], a[1])
    np.testing.assert_array_equal(s, np.asarray(a[0] + a[1]))
    with pytest.raises(ValueError, match=r"vmap_method=None.*no batching rule.*custom_vmap"):
        jax.vmap(add)(a, a)
    (s,) = jax.vmap(partial(add, vmap_method="sequential"))(a, a)
    np.testing.assert_array_equal(s, np.asarray(2 * a))

    @jax.custom_batching.custom_vmap
    def batched_add(x, y):
        return add(x, y)[0]

    @batched_add.def_vmap
    def _rule(axis_size, in_batched, x, y):
        del axis_size
        assert all(in_batched)
        flat = add(x.reshape(-1), y.reshape(-1))[0]  # the whole batch in one call
        return flat.reshape(x.shape), True

    np.testing.assert_array_equal(jax.jit(jax.vmap(batched_add))(a, a), np.asarray(2 * a))


@pytest.mark.parametrize("method", ["broadcast_all", "expand_dims"])
@pytest.mark.parametrize("where", ["construction", "call"])
@over_kinds
def test_broadcast_all_is_available_and_correct_for_elementwise_kernels(kind: Kind, method, where):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(B, N)).astype(np.float32)
    b = rng.normal(size=(B, N)).astype(np.float32)
    if where == "construction":
        add = kind("add", vmap_method=method)
        sincos = kind("sincos", num_outputs=2, vmap_method=method)
        scale = kind("scale", vmap_method=method)
    else:
        add = partial(kind("add"), vmap_method=method)
        sincos = partial(kind("sincos", num_outputs=2), vmap_method=method)
        scale = partial(kind("scale"), vmap_method=method)

    @jax.jit
    def f(a, b):
        (s,) = jax.vmap(add)(a, b)
        (t,) = jax.vmap(add, in_axes=(0, None))(a, b[0])
        sin, cos = jax.vmap(sincos)(a)
        (u,) = jax.vmap(lambda x: scale(x, 3.0))(a)
        return s, t, sin, cos, u

    s, t, sin, cos, u = f(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(s, a + b, rtol=1e-6)
    np.testing.assert_allclose(t, a + b[0][None, :], rtol=1e-6)
    np.testing.assert_allclose(sin, np.sin(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cos, np.cos(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(u, 3.0 * a, rtol=1e-6)


def test_broadcast_all_folds_the_batch_into_launch_dim_0():
    # folding is what "broadcast_all" means: a kernel reading a.shape[0] sees the whole folded batch (a JaxCallable
    # launches its own kernels, so jarp does not fold its batch)
    x = np.arange(B * N, dtype=np.float32).reshape((B, N))
    (folded,) = jax.vmap(KERNEL("reverse", vmap_method="broadcast_all"))(jnp.asarray(x))
    np.testing.assert_array_equal(folded, x.reshape(-1)[::-1].reshape((B, N)))
    (correct,) = jax.vmap(KERNEL("reverse"))(jnp.asarray(x))
    np.testing.assert_array_equal(correct, x[:, ::-1])


# ======================================================================================================================
# in_axes / out_axes, shared inputs, nesting, filter_vmap
# ======================================================================================================================


@over_kinds
def test_vmap_in_axes_none_mixes(kind: Kind):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(N,)).astype(np.float32)
    bs = rng.normal(size=(B, N)).astype(np.float32)
    table = rng.normal(size=(N,)).astype(np.float32)
    tables = rng.normal(size=(B, N)).astype(np.float32)
    idx = rng.integers(0, N, size=(M,)).astype(np.int32)
    idxs = rng.integers(0, N, size=(B, M)).astype(np.int32)
    add = kind("add")
    gather = kind("gather")

    @jax.jit
    def f(a, bs, table, tables, idx, idxs):
        (r1,) = jax.vmap(add, in_axes=(None, 0))(a, bs)
        (r2,) = jax.vmap(add, in_axes=(0, None))(bs, a)
        (r3,) = jax.vmap(gather, in_axes=(0, None))(idxs, table)  # shared table
        (r4,) = jax.vmap(gather, in_axes=(None, 0))(idx, tables)  # shared indices, per-batch tables
        return r1, r2, r3, r4

    r1, r2, r3, r4 = f(*(jnp.asarray(x) for x in (a, bs, table, tables, idx, idxs)))
    np.testing.assert_allclose(r1, a[None, :] + bs, rtol=1e-6)
    np.testing.assert_allclose(r2, bs + a[None, :], rtol=1e-6)
    np.testing.assert_array_equal(r3, table[idxs])
    np.testing.assert_array_equal(r4, tables[:, idx])


@over_kinds
def test_vmap_multi_output_with_shared_input(kind: Kind):
    m = spring(kind)
    rng = np.random.default_rng(5)
    ps = rng.normal(size=(B, N_SPRING, 3)).astype(np.float32)
    _, w = spring_data(N_SPRING)
    energies, forces = jax.jit(jax.vmap(lambda p, w: m(p, w, STIFFNESS), in_axes=(0, None)))(
        jnp.asarray(ps), jnp.asarray(w)
    )
    assert energies.shape == (B, N_SPRING)
    assert forces.shape == (B, N_SPRING, 3)
    for b in range(B):
        exp_e, exp_f = spring_expected(ps[b], w)
        np.testing.assert_allclose(energies[b], exp_e, rtol=1e-5)
        np.testing.assert_allclose(forces[b], exp_f, rtol=1e-5)


@over_kinds
def test_vmap_vecmat_shared_vector_and_matrix_inputs(kind: Kind):
    a, b, c = vecmat_data(4)
    As = np.stack([a, 2.0 * a, -a])
    m = kind("vecmat", num_outputs=3)
    d, e, f = jax.jit(jax.vmap(m, in_axes=(0, None, None)))(jnp.asarray(As), jnp.asarray(b), jnp.asarray(c))
    assert (d.shape, e.shape, f.shape) == ((3, 4), (3, 4, 3), (3, 4, 2, 2))
    np.testing.assert_allclose(d, 2.0 * As)
    np.testing.assert_allclose(e, b[None] * As[:, :, None])
    np.testing.assert_allclose(f, c[None] * As[:, :, None, None])


@over_kinds
def test_vmap_unbatched_in_out_argument(kind: Kind):
    # the in-out buffer is shared (in_axes None) while the matrices are batched: every slice starts from `init`
    m = kind("rowsum", in_out_argnames=["sums"])
    matrices = np.arange(24, dtype=np.float32).reshape((2, 3, 4))
    init = np.array([1.0, 2.0, 3.0], np.float32)
    (out,) = jax.jit(jax.vmap(m, in_axes=(0, None)))(jnp.asarray(matrices), jnp.asarray(init))
    np.testing.assert_array_equal(out, init[None, :] + matrices.sum(axis=2))


@over_kinds
def test_vmap_nonzero_in_and_out_axes(kind: Kind):
    x = np.random.default_rng(6).normal(size=(N, B)).astype(np.float32)
    rev = kind("reverse")
    (out,) = jax.jit(jax.vmap(rev, in_axes=1))(jnp.asarray(x))
    np.testing.assert_array_equal(out, x.T[:, ::-1])
    (out,) = jax.jit(jax.vmap(rev, in_axes=1, out_axes=1))(jnp.asarray(x))
    np.testing.assert_array_equal(out, x[::-1, :])


@over_kinds
def test_vmap_vec3_input_on_axis_1(kind: Kind):
    m = spring(kind)
    p, w = spring_data()
    ps = np.stack([p, 2.0 * p, -p], axis=1)  # (n, 3 batch, 3 components)
    energies, forces = jax.jit(jax.vmap(lambda p: m(p, w, STIFFNESS), in_axes=1, out_axes=1))(jnp.asarray(ps))
    assert energies.shape == (N_SPRING, 3)
    assert forces.shape == (N_SPRING, 3, 3)
    for b in range(3):
        exp_e, exp_f = spring_expected(ps[:, b], w)
        np.testing.assert_allclose(energies[:, b], exp_e, rtol=1e-5)
        np.testing.assert_allclose(forces[:, b], exp_f, rtol=1e-5)


@over_kinds
def test_nested_vmap(kind: Kind):
    A = 2
    rng = np.random.default_rng(7)
    x = rng.normal(size=(A, B, N)).astype(np.float32)
    tables = rng.normal(size=(A, N)).astype(np.float32)
    idxs = rng.integers(0, N, size=(A, B, M)).astype(np.int32)
    rev = kind("reverse")
    gather = kind("gather")
    add = kind("add")
    add_folded = kind("add", vmap_method="broadcast_all")

    (r1,) = jax.vmap(jax.vmap(rev))(jnp.asarray(x))
    np.testing.assert_array_equal(r1, x[..., ::-1])
    (r1,) = jax.jit(jax.vmap(jax.vmap(rev)))(jnp.asarray(x))
    np.testing.assert_array_equal(r1, x[..., ::-1])

    (r2,) = jax.jit(jax.vmap(jax.vmap(gather, in_axes=(0, None)), in_axes=(0, 0)))(
        jnp.asarray(idxs), jnp.asarray(tables)
    )
    np.testing.assert_array_equal(r2, tables[np.arange(A)[:, None, None], idxs])

    for m in (add, add_folded):
        (r3,) = jax.jit(jax.vmap(jax.vmap(m)))(jnp.asarray(x), jnp.asarray(x))
        np.testing.assert_allclose(r3, 2.0 * x, rtol=1e-6)


@over_kinds
def test_eqx_filter_vmap(kind: Kind):
    x = np.random.default_rng(8).normal(size=(B, N)).astype(np.float32)
    rev = kind("reverse")
    (out,) = eqx.filter_vmap(rev)(jnp.asarray(x))
    np.testing.assert_array_equal(out, x[:, ::-1])
    out = eqx.filter_vmap(lambda m, x: m(x)[0], in_axes=(None, 0))(rev, jnp.asarray(x))
    np.testing.assert_array_equal(out, x[:, ::-1])
    out = eqx.filter_jit(eqx.filter_vmap(lambda m, x: m(x)[0], in_axes=(None, 0)))(rev, jnp.asarray(x))
    np.testing.assert_array_equal(out, x[:, ::-1])
    # a module with a static scalar argument, shared across the batch
    scale = kind("scale")
    y = eqx.filter_vmap(lambda m, x: m(x, 2.0)[0], in_axes=(None, 0))(scale, jnp.asarray(x))
    np.testing.assert_array_equal(y, 2.0 * x)
