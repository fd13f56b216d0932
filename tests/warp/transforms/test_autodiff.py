"""Reverse mode, for both module kinds: Warp's adjoint through jarp's bridge.

Unit: ``jarp/warp/_jax/_adjoint.py`` (the backward launch of ``enable_backward=True`` modules) with the primitive's
transpose. The float32 tests (default process) check gradient values against closed forms and
``jax.test_util.check_grads``, and composition with ``jit``, ``vmap`` and ``eqx.filter_grad``; a module built
without ``enable_backward`` names the option. The float64 tests (marked ``x64``) check against ``jax.numpy``
references and finite differences at tight tolerances: runtime scalars, per-call dims, in-out accumulation,
overloads, multi-kernel callables.
"""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels as k
from tests.support import kernels_ad as K
from tests.support.kernels import N_SPRING, STIFFNESS, spring_data
from tests.support.kinds import CALLABLE, KERNEL, Kind, over_kinds

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

rev = partial(check_grads, order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def _spring():
    m = jax_kernel(K.spring_energy64, enable_backward=True)
    x, edges, stiffness = K.spring_net()
    return m, jnp.asarray(x), jnp.asarray(edges), jnp.asarray(stiffness)


@pytest.mark.x64
def test_spring_energy_value_and_grads_against_jnp():
    m, x, edges, stiffness = _spring()

    def energy(x, k, rest):
        return m(x, edges, k, rest, launch_dims=edges.shape[0], output_dims=1)[0][0]

    ref = partial(K.spring_energy_ref, edges=edges)
    np.testing.assert_allclose(energy(x, stiffness, 0.3), ref(x, stiffness=stiffness, rest=0.3), rtol=1e-12)
    gx, gk = jax.grad(energy, argnums=(0, 1))(x, stiffness, 0.3)
    rx, rk = jax.grad(lambda x, k: ref(x, stiffness=k, rest=0.3), argnums=(0, 1))(x, stiffness)
    np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gk, rk, rtol=1e-10, atol=1e-12)
    rev(lambda x, k: energy(x, k, 0.3), (x, stiffness))


@pytest.mark.x64
def test_traced_scalar_value_grad_and_one_trace():
    m, x, edges, stiffness = _spring()

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def energy(x, rest):
        return m(x, edges, stiffness, rest, launch_dims=edges.shape[0], output_dims=1)[0][0]

    for rest in (0.1, 0.2, 0.7):  # one trace for every value: the scalar is a runtime value
        rest = jnp.float64(rest)
        np.testing.assert_allclose(energy(x, rest), K.spring_energy_ref(x, edges, stiffness, rest), rtol=1e-12)
        g = jax.grad(energy, argnums=1)(x, rest)
        r = jax.grad(lambda r: K.spring_energy_ref(x, edges, stiffness, r))(rest)
        np.testing.assert_allclose(g, r, rtol=1e-10)
    rev(energy, (x, jnp.float64(0.25)))


@pytest.mark.x64
def test_runtime_scalar_derivative_is_closed_form():
    m = jax_kernel(K.scale_square64, enable_backward=True)
    a = jnp.arange(1.0, 6.0)
    s = jnp.float64(1.5)
    (out,) = m(a, s)
    np.testing.assert_allclose(out, a * s * s)
    ds = jax.grad(lambda s: jnp.sum(m(a, s)[0]))(s)
    np.testing.assert_allclose(ds, 2 * s * jnp.sum(a))  # d/ds sum(a s^2) = 2 s sum(a)
    # vmap over the scalar, and grad of that
    ss = jnp.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(jax.vmap(lambda s: m(a, s)[0])(ss), ss[:, None] ** 2 * a[None, :])
    np.testing.assert_allclose(jax.vmap(jax.grad(lambda s: jnp.sum(m(a, s)[0])))(ss), 2 * ss * jnp.sum(a))


@pytest.mark.x64
def test_runtime_scalar_as_a_model_leaf():
    class Layer(eqx.Module):
        scale: jax.Array
        kernel: object = eqx.field(static=True)

        def __call__(self, a):
            return self.kernel(a, self.scale)[0]

    layer = Layer(jnp.float64(2.0), jax_kernel(K.scale_square64, enable_backward=True))
    a = jnp.arange(4.0)
    grads = eqx.filter_grad(lambda lay: jnp.sum(lay(a)))(layer)
    np.testing.assert_allclose(grads.scale, 2 * 2.0 * jnp.sum(a))


@pytest.mark.x64
def test_per_call_launch_and_output_dims_with_grad():
    m = jax_kernel(K.matmul64, enable_backward=True)
    rng = np.random.default_rng(0)
    a, b = jnp.asarray(rng.normal(size=(3, 4))), jnp.asarray(rng.normal(size=(4, 5)))

    def f(a, b):
        return m(a, b, launch_dims=(3, 5), output_dims=(3, 5))[0]

    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-12)
    rev(f, (a, b))
    ga, gb = jax.grad(lambda a, b: jnp.sum(jnp.sin(f(a, b))), argnums=(0, 1))(a, b)
    ra, rb = jax.grad(lambda a, b: jnp.sum(jnp.sin(a @ b)), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, ra, rtol=1e-10)
    np.testing.assert_allclose(gb, rb, rtol=1e-10)


@pytest.mark.x64
def test_several_outputs_and_vector_arrays():
    m = jax_kernel(K.two_outputs64, num_outputs=2, enable_backward=True)
    rng = np.random.default_rng(1)
    a, b = jnp.asarray(rng.normal(size=5)), jnp.asarray(rng.normal(size=(5, 2)))
    c, d = m(a, b)
    np.testing.assert_allclose(c, jnp.sin(a) * b[:, 0])
    np.testing.assert_allclose(d, b * a[:, None] ** 2)
    rev(lambda a, b: m(a, b), (a, b))


@pytest.mark.x64
def test_in_out_accumulation_is_differentiable():
    m = jax_kernel(K.rowsum_sq64, in_out_argnames=["sums"], enable_backward=True)
    rng = np.random.default_rng(2)
    mat, init = jnp.asarray(rng.normal(size=(3, 4))), jnp.asarray(rng.normal(size=3))
    np.testing.assert_allclose(m(mat, init)[0], init + jnp.sum(mat * mat, axis=1))
    rev(lambda mat, init: m(mat, init)[0], (mat, init))


@pytest.mark.x64
def test_overloads_from_arg_types_factory_are_differentiable():
    m = jax_kernel(K.generic_mul, arg_types_factory=K.generic_mul_types, enable_backward=True)
    a, b = jnp.linspace(0.5, 1.5, 4), jnp.linspace(-1.0, 2.0, 4)
    np.testing.assert_allclose(m(a, b)[0], a * b * b)
    rev(lambda a, b: m(a, b)[0], (a, b))


@pytest.mark.x64
def test_vmap_of_grad_and_grad_of_vmap_eager_and_jit():
    m, x, edges, stiffness = _spring()

    def energy(x, k):
        return m(x, edges, k, 0.3, launch_dims=edges.shape[0], output_dims=1)[0][0]

    xs = jnp.stack([x, 1.1 * x, 0.9 * x])
    ref = jax.vmap(jax.grad(lambda x: K.spring_energy_ref(x, edges, stiffness, 0.3)))(xs)
    for wrap in (lambda f: f, jax.jit):
        np.testing.assert_allclose(wrap(jax.vmap(jax.grad(energy), in_axes=(0, None)))(xs, stiffness), ref, rtol=1e-10)
        total = wrap(jax.grad(lambda xs: jnp.sum(jax.vmap(energy, in_axes=(0, None))(xs, stiffness))))(xs)
        np.testing.assert_allclose(total, ref, rtol=1e-10)


@pytest.mark.x64
def test_multi_kernel_callable_gradient():
    m = jax_callable(K.chain64, enable_backward=True)
    a, b = jnp.linspace(0.2, 2.0, 5), jnp.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(m(a, b, 3.0)[0], 3.0 * a * a + jnp.sin(b))
    ga, gb = jax.grad(lambda a, b: jnp.sum(m(a, b, 3.0)[0]), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, 6.0 * a)
    np.testing.assert_allclose(gb, jnp.cos(b))
    rev(lambda a, b: m(a, b, 3.0)[0], (a, b))
    # vmap of the gradient runs the taped backward once per slice
    gs = jax.vmap(jax.grad(lambda a: jnp.sum(m(a, b, 3.0)[0])))(jnp.stack([a, 2 * a]))
    np.testing.assert_allclose(gs, 6.0 * jnp.stack([a, 2 * a]))


@pytest.mark.x64
def test_overwritten_in_out_is_refused_with_backward():
    # matmul64 overwrites c (`c[i, j] = acc`): Warp's adjoint cannot differentiate that
    with pytest.raises(ValueError, match="'c'"):
        jax_kernel(K.matmul64, in_out_argnames=["c"], num_outputs=1, enable_backward=True)
    jax_kernel(K.rowsum_sq64, in_out_argnames=["sums"], enable_backward=True)  # accumulation is fine


# ======================================================================================================================
# float32 (default process): gradient values, check_grads, composition with jit / vmap / filter_grad
# ======================================================================================================================

B, N, M = 3, 5, 7


def _ab(n=8, seed=9):
    rng = np.random.default_rng(seed)
    return (0.5 + rng.random(n)).astype(np.float32), (rng.random(n) - 0.5).astype(np.float32)


@over_kinds
def test_grad_values_scale_sum_square(kind: Kind):
    m = kind("scale_sum_square", enable_backward=True)
    a, b = _ab()
    s = 1.5

    def loss(a, b):
        (out,) = m(a, b, s)
        return jnp.sum(out)

    inner = a * s + b
    for grad_fn in (
        jax.grad(loss, argnums=(0, 1)),
        jax.jit(jax.grad(loss, argnums=(0, 1))),
        jax.grad(jax.jit(loss), argnums=(0, 1)),
    ):
        da, db = grad_fn(jnp.asarray(a), jnp.asarray(b))
        np.testing.assert_allclose(da, 2.0 * inner * s, rtol=1e-5)
        np.testing.assert_allclose(db, 2.0 * inner, rtol=1e-5)


@over_kinds
def test_eqx_filter_grad_values(kind: Kind):
    m = kind("scale_sum_square", enable_backward=True)
    a, b = _ab()
    da, db = eqx.filter_grad(lambda ab: jnp.sum(m(ab[0], ab[1], 1.5)[0]))((jnp.asarray(a), jnp.asarray(b)))
    inner = a * 1.5 + b
    np.testing.assert_allclose(da, 2.0 * inner * 1.5, rtol=1e-5)
    np.testing.assert_allclose(db, 2.0 * inner, rtol=1e-5)


_TOL32 = {"order": 1, "modes": ("rev",), "atol": 1e-2, "rtol": 1e-2, "eps": 1e-3}


@over_kinds
def test_check_grads_float32(kind: Kind):
    sss = kind("scale_sum_square", enable_backward=True)
    spr = kind("spring", num_outputs=2, enable_backward=True)
    a, b = (jnp.asarray(x) for x in _ab())
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    check_grads(lambda a, b: sss(a, b, 1.5), (a, b), **_TOL32)
    check_grads(lambda p, w: spr(p, w, STIFFNESS), (p, w), **_TOL32)


def test_check_grads_float32_multi_output_and_vec2_kernels():
    multi = jax_kernel(k.multi_output, num_outputs=2, enable_backward=True)
    vec = jax_kernel(k.scale_vec2, enable_backward=True)
    a, b = (jnp.asarray(x) for x in _ab())
    check_grads(lambda a, b: multi(a, b, 1.5), (a, b), **_TOL32)
    check_grads(lambda x: vec(x, -0.5), (a.reshape((4, 2)),), **_TOL32)


@over_kinds
def test_grad_values_two_outputs_vec3(kind: Kind):
    # both cotangents (energies and the vec3 forces) must reach the inputs
    m = kind("spring", num_outputs=2, enable_backward=True)
    p, w = spring_data(N_SPRING)
    c = np.random.default_rng(10).normal(size=(N_SPRING, 3)).astype(np.float32)

    def loss(p, w):
        energies, forces = m(p, w, STIFFNESS)
        return jnp.sum(energies) + jnp.sum(forces * jnp.asarray(c))

    dp, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(p), jnp.asarray(w))
    s = STIFFNESS
    np.testing.assert_allclose(dp, s * w[:, None] * p - s * w[:, None] * c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, 0.5 * s * np.sum(p * p, axis=1) - s * np.sum(p * c, axis=1), rtol=1e-4, atol=1e-5)


def test_grad_with_unused_output():
    multi = jax_kernel(k.multi_output, num_outputs=2, enable_backward=True)
    a, b = _ab()
    da, db = jax.grad(lambda a, b: jnp.sum(multi(a, b, 2.0)[0]), argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(da, 2.0 * a, rtol=1e-6)
    np.testing.assert_array_equal(db, np.zeros_like(b))


@over_kinds
def test_gather_adjoint_scatters_the_cotangent(kind: Kind):
    # gradient w.r.t. a table read through integer indices: a scatter-add of the cotangent (atomic in the adjoint)
    gather = kind("gather", enable_backward=True)
    rng = np.random.default_rng(12)
    idx = rng.integers(0, N, size=(B, M)).astype(np.int32)
    tables = rng.normal(size=(B, N)).astype(np.float32)
    cot = rng.normal(size=(B, M)).astype(np.float32)

    def loss(i, t, c):
        return jnp.sum(gather(i, t)[0] * c)

    dt = jax.grad(loss, argnums=1)(jnp.asarray(idx[0]), jnp.asarray(tables[0]), jnp.asarray(cot[0]))
    np.testing.assert_allclose(dt, np.bincount(idx[0], weights=cot[0], minlength=N), rtol=1e-5, atol=1e-6)
    # per-batch tables under the default vmap: each slice's adjoint scatters into its own table
    dts = jax.jit(jax.vmap(jax.grad(loss, argnums=1)))(jnp.asarray(idx), jnp.asarray(tables), jnp.asarray(cot))
    expected = np.stack([np.bincount(idx[b], weights=cot[b], minlength=N) for b in range(B)])
    np.testing.assert_allclose(dts, expected, rtol=1e-5, atol=1e-6)


@over_kinds
def test_grad_and_vmap_compose(kind: Kind):
    m = kind("scale_sum_square", enable_backward=True)
    rng = np.random.default_rng(11)
    A = (0.5 + rng.random((B, 8))).astype(np.float32)
    Bm = (rng.random((B, 8)) - 0.5).astype(np.float32)
    expected_da = 2.0 * (A * 1.5 + Bm) * 1.5

    def loss(a, b):
        return jnp.sum(m(a, b, 1.5)[0])

    # per-example gradients: vmap of grad
    da = jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(A), jnp.asarray(Bm))
    np.testing.assert_allclose(da, expected_da, rtol=1e-5)
    # grad of vmap
    da = jax.grad(lambda A, Bm: jnp.sum(jax.vmap(lambda a, b: m(a, b, 1.5)[0])(A, Bm)))(jnp.asarray(A), jnp.asarray(Bm))
    np.testing.assert_allclose(da, expected_da, rtol=1e-5)
    # grad of vmap with a shared (unbatched) input
    b0 = jnp.asarray(Bm[0])
    db = jax.grad(lambda b: jnp.sum(jax.vmap(lambda a: m(a, b, 1.5)[0])(jnp.asarray(A))))(b0)
    np.testing.assert_allclose(db, np.sum(2.0 * (A * 1.5 + Bm[0][None, :]), axis=0), rtol=1e-5)


_CALLABLE_IN_OUT_REPLAY = (
    "known bug: the taped backward of a jax_callable reruns the function on the in-out's operand buffer, so the "
    "adjoint reads the value after the launch (d/dx = w * s_out) and the caller's array is overwritten"
)


@pytest.mark.parametrize(
    "kind",
    [KERNEL, CALLABLE],
    ids=lambda kind: kind.name,
)
def test_in_out_gradient_reads_the_incoming_value(kind: Kind):
    # grow: s += s * x with `s` in-out. d/dx sum(w * s_out) = w * s and d/ds = w * (1 + x) depend on the value `s` held
    # before the launch: an adjoint that replays from anything else (the zeroed stand-in of the result) gets them wrong.
    m = kind("grow", in_out_argnames=["s"], enable_backward=True)
    x = np.array([1.5, 0.25, -3.0], np.float32)
    s = np.array([0.5, -1.0, 2.0], np.float32)
    w = np.array([1.0, 2.0, -0.5], np.float32)

    def loss(x, s, w):
        return jnp.sum(m(x, s)[0] * w)

    np.testing.assert_allclose(m(jnp.asarray(x), jnp.asarray(s))[0], s + s * x, rtol=1e-6)
    for grad_fn in (jax.grad(loss, argnums=(0, 1)), jax.jit(jax.grad(loss, argnums=(0, 1)))):
        s_in = jnp.asarray(s)
        dx, ds = grad_fn(jnp.asarray(x), s_in, jnp.asarray(w))
        np.testing.assert_allclose(dx, w * s, rtol=1e-6)
        np.testing.assert_allclose(ds, w * (1 + x), rtol=1e-6)
        np.testing.assert_array_equal(s_in, s)  # the backward pass left the caller's array alone

    # batched: a different incoming `s` per slice, then one `s` shared by every slice (its cotangents summed)
    rng = np.random.default_rng(13)
    xs, ss, ws = (rng.normal(size=(B, 3)).astype(np.float32) for _ in range(3))
    for wrap in (lambda f: f, jax.jit):
        dx, ds = wrap(jax.vmap(jax.grad(loss, argnums=(0, 1))))(jnp.asarray(xs), jnp.asarray(ss), jnp.asarray(ws))
        np.testing.assert_allclose(dx, ws * ss, rtol=1e-5)
        np.testing.assert_allclose(ds, ws * (1 + xs), rtol=1e-5)
        shared = wrap(jax.grad(lambda xs, s: jnp.sum(jax.vmap(loss, in_axes=(0, None, 0))(xs, s, ws)), argnums=(0, 1)))
        dx, ds = shared(jnp.asarray(xs), jnp.asarray(s))
        np.testing.assert_allclose(dx, ws * s[None, :], rtol=1e-5)
        np.testing.assert_allclose(ds, np.sum(ws * (1 + xs), axis=0), rtol=1e-5)


@over_kinds
def test_grad_without_enable_backward_names_the_option(kind: Kind):
    triple = kind("triple")
    factory = "jax_kernel" if kind.name == "kernel" else "jax_callable"
    with pytest.raises(TypeError, match=rf"enable_backward=True to {factory}\(\)"):
        jax.grad(lambda a: jnp.sum(triple(a)[0]))(jnp.arange(3, dtype=jnp.float32))


@over_kinds
def test_second_derivative_through_warps_adjoint_says_what_to_use(kind: Kind):
    m = kind("scale_sum_square", enable_backward=True)
    a = jnp.arange(3, dtype=jnp.float32)
    inner = lambda a: jnp.sum(jax.grad(lambda a: jnp.sum(m(a, a, 2.0)[0]))(a))  # noqa: E731
    with pytest.raises(TypeError, match=r"second derivatives \(grad of grad, hessian\) need jvp="):
        jax.grad(inner)(a)


@over_kinds
def test_forward_mode_through_warps_adjoint_names_jarp_and_the_way_out(kind: Kind):
    # JAX's own refusal ("can't apply forward-mode autodiff (jvp) to a custom_vjp function") names neither.
    m = kind("triple", enable_backward=True)
    x = jnp.arange(4.0, dtype=jnp.float32)
    with pytest.raises(TypeError, match=r"has no forward-mode derivative: it is differentiated in reverse mode only"):
        jax.jvp(lambda x: m(x)[0], (x,), (x,))
    with pytest.raises(TypeError, match=r"jvp= rules"):
        jax.jacfwd(lambda x: m(x)[0])(x)
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(m(x)[0]))(x), np.full(4, 3.0))
