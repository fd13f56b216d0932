"""jarp.warp.energy: a spring energy with hand-written derivative kernels under every JAX derivative."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.warp import energy, jax_kernel
from tests.support import kernels_energy as K

pytestmark = pytest.mark.x64


def _problem():
    x, edges, k, rest = (jnp.asarray(a) for a in K.spring_problem())
    m, n = edges.shape[0], x.shape[0]
    E = energy(
        jax_kernel(K.spring_energy, launch_dims=m, output_dims=1, enable_backward=True),
        jax_kernel(K.spring_grad, launch_dims=m, output_dims=n, enable_backward=True),
        jax_kernel(K.spring_hess_prod, launch_dims=m, output_dims=n),
        jax_kernel(K.spring_hess_diag, launch_dims=m, output_dims=n),
    )
    return E, x, (edges, k, rest)


def _ref(x, edges, k, rest):
    return K.spring_energy_ref(x, edges, k, rest)


def test_value_grad_and_jvp():
    E, x, params = _problem()
    np.testing.assert_allclose(E(x, *params), _ref(x, *params), rtol=1e-13)
    assert E(x, *params).shape == ()
    np.testing.assert_allclose(jax.grad(E)(x, *params), jax.grad(_ref)(x, *params), atol=1e-13)
    v = jnp.asarray(np.random.default_rng(1).normal(size=x.shape))
    _, t = jax.jvp(lambda x: E(x, *params), (x,), (v,))
    np.testing.assert_allclose(t, jnp.vdot(jax.grad(_ref)(x, *params), v), rtol=1e-12)


def test_hessian_vector_products_and_hessian():
    E, x, params = _problem()
    v = jnp.asarray(np.random.default_rng(2).normal(size=x.shape))
    h_ref = jax.hessian(_ref)(x, *params)
    hv_ref = jnp.einsum("iajb,jb->ia", h_ref, v)
    np.testing.assert_allclose(jax.jvp(lambda x: E.grad(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jvp(lambda x: jax.grad(E)(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(E.hess_prod(x, *params, v=v), hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.hessian(E)(x, *params), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(E.grad)(x, *params), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jacrev(E.grad)(x, *params), h_ref, atol=1e-12)
    n = x.size
    np.testing.assert_allclose(E.hess_diag(x, *params), jnp.diag(h_ref.reshape(n, n)).reshape(x.shape), atol=1e-12)
    _, lin = jax.linearize(lambda x: E.grad(x, *params), x)
    np.testing.assert_allclose(lin(v), hv_ref, atol=1e-12)


def test_parameter_derivatives_through_warps_adjoint():
    E, x, (edges, k, rest) = _problem()
    np.testing.assert_allclose(
        jax.grad(E, argnums=2)(x, edges, k, rest), jax.grad(_ref, argnums=2)(x, edges, k, rest), atol=1e-13
    )
    w = jnp.asarray(np.random.default_rng(3).normal(size=x.shape))
    mixed = jax.grad(lambda k: jnp.vdot(E.grad(x, edges, k, rest), w))(k)
    mixed_ref = jax.grad(lambda k: jnp.vdot(jax.grad(_ref)(x, edges, k, rest), w))(k)
    np.testing.assert_allclose(mixed, mixed_ref, atol=1e-12)
    check_grads(lambda k: E(x, edges, k, rest), (k,), order=1, modes=["rev"])


def test_newton_cg_inside_jit_and_while_loop():
    E, x0, (edges, k, rest) = _problem()
    pinned = jnp.zeros(x0.shape[0], bool).at[0].set(True)  # pin one node: the Hessian is then definite
    free = jnp.where(pinned[:, None], 0.0, 1.0)
    load = jnp.asarray(np.random.default_rng(4).normal(size=x0.shape)) * 0.05 * free

    def total(x):
        return E(x, edges, k, rest) - jnp.vdot(load, x)

    def hvp(x, v):
        return free * E.hess_prod(x, edges, k, rest, v=free * v) + (1.0 - free) * v

    @jax.jit
    def solve(x):
        def body(state):
            x, _, it = state
            g = free * jax.grad(total)(x)
            dx, _ = jax.scipy.sparse.linalg.cg(lambda v: hvp(x, v), -g, tol=1e-12, maxiter=200)
            return x + dx, jnp.linalg.norm(g), it + 1

        x, _, _ = jax.lax.while_loop(lambda s: (s[1] > 1e-10) & (s[2] < 30), body, (x, jnp.inf, 0))
        return x

    x = solve(x0)
    np.testing.assert_allclose(free * jax.grad(total)(x), 0.0, atol=1e-8)

    # the CG solve with the Hessian module, differentiated with respect to its right-hand side
    def cg_solve(b):
        return jax.scipy.sparse.linalg.cg(lambda v: hvp(x, v), b, tol=1e-14, maxiter=500)[0]

    b = jnp.asarray(np.random.default_rng(5).normal(size=x0.shape)) * free
    sol = cg_solve(b)
    np.testing.assert_allclose(hvp(x, sol), b, atol=1e-9)
    check_grads(cg_solve, (b,), order=1, modes=["rev", "fwd"], atol=1e-5, rtol=1e-5)


def test_missing_hess_diag_is_named():
    E, x, params = _problem()
    E2 = energy(E.fun, E.grad_fn, E.hess_prod_fn)
    with pytest.raises(ValueError, match="hess_diag"):
        E2.hess_diag(x, *params)
    with pytest.raises(TypeError, match="grad"):
        energy(E.fun, 3, E.hess_prod_fn)


def _kernels(m, n, *, backward=True):
    def kern(k, out, **kw):
        return jax_kernel(k, launch_dims=m, output_dims=out, **kw)

    return {
        "fun": kern(K.spring_energy, 1, enable_backward=True),
        "grad": kern(K.spring_grad, n, enable_backward=backward),
        "hess_prod": kern(K.spring_hess_prod, n),
        "hess_quad": kern(K.spring_hess_quad, 1),
        "hess_prod_projected": kern(K.spring_hess_prod_projected, n),
        "hess_diag_projected": kern(K.spring_hess_diag_projected, n),
        "hess_quad_projected": kern(K.spring_hess_quad_projected, 1),
    }


def test_hess_quad_kernel_and_fallback():
    E, x, params = _problem()
    m, n = params[0].shape[0], x.shape[0]
    ks = _kernels(m, n)
    Eq = energy(ks["fun"], ks["grad"], ks["hess_prod"], hess_quad=ks["hess_quad"])
    h_ref = jax.hessian(_ref)(x, *params).reshape(x.size, x.size)
    for seed in range(3):
        v = jnp.asarray(np.random.default_rng(10 + seed).normal(size=x.shape))
        quad_ref = v.ravel() @ h_ref @ v.ravel()
        quad = Eq.hess_quad(x, *params, v=v)
        assert quad.shape == ()
        np.testing.assert_allclose(quad, quad_ref, rtol=1e-12)
        np.testing.assert_allclose(quad, jnp.vdot(v, Eq.hess_prod(x, *params, v=v)), rtol=1e-12)
        # without a hess_quad module: vdot(v, hess_prod)
        np.testing.assert_allclose(E.hess_quad(x, *params, v=v), quad_ref, rtol=1e-12)
    # the exact Hessian of this net is indefinite: some directions have negative curvature
    assert np.linalg.eigvalsh(h_ref).min() < -1e-3
    jitted = jax.jit(lambda x, v: Eq.hess_quad(x, *params, v=v))
    np.testing.assert_allclose(jitted(x, v), quad_ref, rtol=1e-12)
    bad = energy(ks["fun"], ks["grad"], ks["hess_prod"], hess_quad=ks["hess_prod"])
    with pytest.raises(ValueError, match="hess_quad must return a one-element array"):
        bad.hess_quad(x, *params, v=v)


def _compressed_problem():
    x, (edges, k, rest) = _problem()[1:]
    length = jnp.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=-1)
    assert int(jnp.sum(length < rest)) >= 3  # compressed springs: their exact Hessian blocks are indefinite
    return x, (edges, k, rest)


def test_projected_hessian_is_psd_and_a_solver_operator():
    x, params = _compressed_problem()
    m, n = params[0].shape[0], x.shape[0]
    ks = _kernels(m, n)
    Ep = energy(
        ks["fun"],
        ks["grad"],
        ks["hess_prod_projected"],
        ks["hess_diag_projected"],
        hess_quad=ks["hess_quad_projected"],
        hessian="projected",
    )
    hp_ref = K.spring_projected_hessian_ref(x, *params)
    assert np.linalg.eigvalsh(hp_ref).min() > -1e-12
    v = jnp.asarray(np.random.default_rng(20).normal(size=x.shape))
    np.testing.assert_allclose(Ep.hess_prod(x, *params, v=v).ravel(), hp_ref @ v.ravel(), atol=1e-12)
    np.testing.assert_allclose(Ep.hess_diag(x, *params).ravel(), jnp.diag(hp_ref), atol=1e-12)
    np.testing.assert_allclose(Ep.hess_quad(x, *params, v=v), v.ravel() @ hp_ref @ v.ravel(), rtol=1e-12)


def test_projected_hessian_flagged_exact_gives_wrong_derivatives():
    """The documented danger: a clamped hess_prod passed as 'exact' silently becomes E.grad's derivative."""
    x, params = _compressed_problem()
    m, n = params[0].shape[0], x.shape[0]
    ks = _kernels(m, n)
    E_wrong = energy(ks["fun"], ks["grad"], ks["hess_prod_projected"])  # hessian="exact" by default
    v = jnp.asarray(np.random.default_rng(21).normal(size=x.shape))
    hv_ref = jax.jvp(lambda x: jax.grad(_ref)(x, *params), (x,), (v,))[1]
    hv = jax.jvp(lambda x: E_wrong.grad(x, *params), (x,), (v,))[1]
    rel = float(jnp.linalg.norm(hv - hv_ref) / jnp.linalg.norm(hv_ref))
    assert rel > 1e-2, rel
    with pytest.raises(AssertionError):
        check_grads(lambda x: E_wrong.grad(x, *params), (x,), order=1, modes=["fwd"])


def test_projected_hessian_derivatives_are_exact_through_warps_adjoint():
    x, params = _compressed_problem()
    m, n = params[0].shape[0], x.shape[0]
    ks = _kernels(m, n)
    Ep = energy(ks["fun"], ks["grad"], ks["hess_prod_projected"], ks["hess_diag_projected"], hessian="projected")
    h_ref = jax.hessian(_ref)(x, *params)
    v = jnp.asarray(np.random.default_rng(22).normal(size=x.shape))
    hv_ref = jnp.einsum("iajb,jb->ia", h_ref, v)
    np.testing.assert_allclose(jax.jvp(lambda x: Ep.grad(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jvp(lambda x: jax.grad(Ep)(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.hessian(Ep)(x, *params), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(Ep.grad)(x, *params), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jacrev(Ep.grad)(x, *params), h_ref, atol=1e-12)
    _, lin = jax.linearize(lambda x: Ep.grad(x, *params), x)
    np.testing.assert_allclose(lin(v), hv_ref, atol=1e-12)
    np.testing.assert_allclose(
        jax.jit(lambda x, v: jax.jvp(lambda x: Ep.grad(x, *params), (x,), (v,))[1])(x, v), hv_ref, atol=1e-12
    )
    # against finite differences of the grad kernel itself, in both modes
    check_grads(lambda x: Ep.grad(x, *params), (x,), order=1, modes=["fwd", "rev"])
    # the mixed derivative (stiffness) is unchanged: Warp's adjoint of grad
    w = jnp.asarray(np.random.default_rng(23).normal(size=x.shape))
    edges, k, rest = params
    mixed = jax.grad(lambda k: jnp.vdot(Ep.grad(x, edges, k, rest), w))(k)
    mixed_ref = jax.grad(lambda k: jnp.vdot(jax.grad(_ref)(x, edges, k, rest), w))(k)
    np.testing.assert_allclose(mixed, mixed_ref, atol=1e-12)


def test_projected_hessian_without_warps_adjoint_refuses():
    x, params = _compressed_problem()
    m, n = params[0].shape[0], x.shape[0]
    ks = _kernels(m, n, backward=False)
    Ep = energy(ks["fun"], ks["grad"], ks["hess_prod_projected"], hessian="projected")
    v = jnp.ones_like(x)
    for transform in (
        lambda: jax.jvp(lambda x: Ep.grad(x, *params), (x,), (v,)),
        lambda: jax.hessian(Ep)(x, *params),
        lambda: jax.jacrev(Ep.grad)(x, *params),
    ):
        with pytest.raises(TypeError, match=r"projected.*enable_backward=True.*E\.hess_prod"):
            transform()
    # the solver's side still works, and so do E and its gradient
    np.testing.assert_allclose(
        Ep.hess_prod(x, *params, v=v).ravel(), K.spring_projected_hessian_ref(x, *params) @ v.ravel(), atol=1e-12
    )
    np.testing.assert_allclose(jax.grad(Ep)(x, *params), jax.grad(_ref)(x, *params), atol=1e-13)
    with pytest.raises(ValueError, match="hessian must be 'exact'"):
        energy(ks["fun"], ks["grad"], ks["hess_prod"], hessian="clamped")


def test_struct_parameters_are_differentiated_and_their_value_fields_stay_static():
    # The Stable Neo-Hookean kernels of kernels_struct take a Mesh struct (array fields) and a Material struct
    # (value fields mu, lam), passed as dicts; hess_prod is a jnp function that checks what it receives.
    from tests.support import kernels_struct as ks

    rng = np.random.default_rng(5)
    tets = np.array([[0, 1, 2, 3], [1, 2, 3, 4]], np.int32)
    rest = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], np.float64)
    dm = np.stack([rest[tets[:, k]] - rest[tets[:, 0]] for k in (1, 2, 3)], axis=-1)
    dm[np.linalg.det(dm) < 0] *= -1.0  # any invertible rest matrices will do; the volumes are |det| / 6
    mesh = {"tets": jnp.asarray(tets), "Dm_inv": jnp.asarray(np.linalg.inv(dm)), "vol": jnp.abs(jnp.linalg.det(dm)) / 6}
    material = {"mu": 1.3, "lam": 7.5}
    x = jnp.asarray(rest + 0.1 * rng.standard_normal(rest.shape))
    v = jnp.asarray(rng.standard_normal(rest.shape))

    @jax.jit  # compiled once per transformation (op by op it takes seconds)
    def ref(x, mesh, material):
        ds = jnp.stack([x[mesh["tets"][:, k]] - x[mesh["tets"][:, 0]] for k in (1, 2, 3)], axis=-1)
        f = ds @ mesh["Dm_inv"]
        mu, lam = material["mu"], material["lam"]
        alpha = 1.0 + mu / lam
        psi = 0.5 * mu * (jnp.sum(f * f, axis=(1, 2)) - 3.0) + 0.5 * lam * (jnp.linalg.det(f) - alpha) ** 2
        return jnp.sum(mesh["vol"] * psi)

    seen = []

    def hess_prod(x, mesh, material, v):
        seen.append(type(material["mu"]))
        return jax.jvp(lambda x: jax.grad(ref)(x, mesh, material), (x,), (v,))[1]

    m, n = tets.shape[0], rest.shape[0]
    E = energy(
        jax_kernel(ks.snh_energy, launch_dims=m, output_dims=1, enable_backward=True),
        jax_kernel(ks.snh_grad, launch_dims=m, output_dims=n, enable_backward=True),
        hess_prod,
    )
    np.testing.assert_allclose(E(x, mesh, material), ref(x, mesh, material), rtol=1e-12)
    np.testing.assert_allclose(jax.grad(E)(x, mesh, material), jax.grad(ref)(x, mesh, material), atol=1e-12)
    hv_ref = jax.jvp(lambda x: jax.grad(ref)(x, mesh, material), (x,), (v,))[1]
    hv = jax.jit(lambda x, mesh: jax.linearize(lambda x: E.grad(x, mesh, material), x)[1](v))(x, mesh)
    np.testing.assert_allclose(hv, hv_ref, atol=1e-12)
    assert seen
    assert set(seen) == {float}  # the value fields reached hess_prod as Python floats, not tracers

    # a float array field of a struct (the volumes) is differentiated, through the energy and through E.grad
    def of_floats(fn):
        return lambda dm_inv, vol: fn(x, {"tets": mesh["tets"], "Dm_inv": dm_inv, "vol": vol}, material)

    grads = jax.grad(of_floats(E), argnums=(0, 1))(mesh["Dm_inv"], mesh["vol"])
    grads_ref = jax.grad(of_floats(ref), argnums=(0, 1))(mesh["Dm_inv"], mesh["vol"])
    np.testing.assert_allclose(grads[0], grads_ref[0], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(grads[1], grads_ref[1], rtol=1e-12)
    w = jnp.asarray(rng.standard_normal(rest.shape))
    np.testing.assert_allclose(
        jax.grad(lambda vol: jnp.vdot(E.grad(x, {**mesh, "vol": vol}, material), w))(mesh["vol"]),
        jax.grad(lambda vol: jnp.vdot(jax.grad(ref)(x, {**mesh, "vol": vol}, material), w))(mesh["vol"]),
        rtol=1e-11,
    )


def test_forward_mode_over_grad_in_a_parameter_says_what_jarp_supports():
    # Warp's adjoint of the grad module is reverse mode only: forward mode in a parameter names jarp and the ways out.
    E, x, (edges, k, rest) = _problem()
    with pytest.raises(TypeError, match=r"forward mode over E\.grad with respect to a parameter") as info:
        jax.jvp(lambda k: E.grad(x, edges, k, rest), (k,), (jnp.ones_like(k),))
    assert "jvp=" in str(info.value)
    assert "jax.jacrev" in str(info.value)
    # Reverse mode in the same parameter and forward mode in x keep working.
    jax.jacrev(lambda k: E.grad(x, edges, k, rest))(k)
    jax.jvp(lambda x: E.grad(x, edges, k, rest), (x,), (jnp.ones_like(x),))


@pytest.mark.parametrize("direction", ["v", 1, -4])
def test_direction_in_second_place(direction):
    # hess_prod(u, v, edges, k, rest): the direction right after x, named or placed once for hess_prod.
    _, x, params = _problem()
    m, n = params[0].shape[0], x.shape[0]
    E = energy(
        jax_kernel(K.spring_energy, launch_dims=m, output_dims=1, enable_backward=True),
        jax_kernel(K.spring_grad, launch_dims=m, output_dims=n, enable_backward=True),
        jax_kernel(K.spring_hess_prod_v_second, launch_dims=m, output_dims=n),
        direction=direction,
    )
    v = jnp.asarray(np.random.default_rng(4).normal(size=x.shape))
    hv_ref = jnp.einsum("iajb,jb->ia", jax.hessian(_ref)(x, *params), v)
    np.testing.assert_allclose(E.hess_prod(x, *params, v=v), hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jvp(lambda x: E.grad(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(E.hess_quad(x, *params, v=v), jnp.vdot(v, hv_ref), rtol=1e-12)


def test_signatures_are_checked_against_each_other_at_construction():
    _, x, params = _problem()
    m, n = params[0].shape[0], x.shape[0]
    fun = jax_kernel(K.spring_energy, launch_dims=m, output_dims=1)
    grad = jax_kernel(K.spring_grad, launch_dims=m, output_dims=n)
    second = jax_kernel(K.spring_hess_prod_v_second, launch_dims=m, output_dims=n)
    last = jax_kernel(K.spring_hess_prod, launch_dims=m, output_dims=n)
    # The default (direction last) takes `rest` for v, so `v` lines up with fun's `edges`: refused at construction.
    with pytest.raises(TypeError, match=r"hess_prod's input 'v' is a 1-d wp.array of vec3d, but fun's input 'edges'"):
        energy(fun, grad, second)
    with pytest.raises(ValueError, match=r"direction='w' is not a parameter of hess_prod \(its inputs are x, v, edges"):
        energy(fun, grad, second, direction="w")
    with pytest.raises(TypeError, match=r"hess_diag takes 5 inputs .* fun takes 4"):
        energy(fun, grad, last, hess_diag=last)
    with pytest.raises(ValueError, match="direction=0 is the point x's position"):
        energy(fun, grad, last, direction=0)
    with pytest.raises(TypeError, match="direction must be a parameter name or a position"):
        energy(fun, grad, last, direction=1.5)
    # Plain functions are checked by their signatures' lengths.
    with pytest.raises(TypeError, match=r"hess_prod takes 3 inputs \(x, edges, v\), fun takes 4"):
        energy(fun, grad, lambda x, edges, v: v)
    assert energy(fun, grad, last).direction == -1
    assert energy(fun, grad, second, direction="v").direction == 1


# -- a direction outside the inputs where hess_prod's are not known ----------------------------------------------------


def _quad_fun(x: jax.Array, k: jax.Array) -> jax.Array:
    return (0.5 * k * jnp.sum(x * x)).reshape(1)


def _quad_grad(x: jax.Array, k: jax.Array) -> jax.Array:
    return k * x


def _quad_hess_prod_args(*args: jax.Array) -> jax.Array:  # its inputs are not known before a call
    _, k, v = args
    return k * v


@pytest.mark.parametrize("direction", [5, -5])
def test_a_direction_outside_the_inputs_is_refused_when_hess_prod_takes_args(direction: int) -> None:
    # list.insert clamps: direction=-5 put v before x (hess_prod got (v, x, k)), direction=5 silently last.
    with pytest.raises(ValueError, match=rf"direction={direction} is outside"):
        energy(_quad_fun, _quad_grad, _quad_hess_prod_args, direction=direction)


@pytest.mark.parametrize("direction", [5, -5])
def test_a_direction_outside_the_inputs_is_refused_at_the_call_when_nothing_is_known(direction: int) -> None:
    E = energy(lambda *a: _quad_fun(*a), _quad_grad, _quad_hess_prod_args, direction=direction)
    x = jnp.ones(3)
    with pytest.raises(ValueError, match=rf"direction={direction} is outside"):
        E.hess_prod(x, jnp.asarray(2.0), v=jnp.arange(3.0))


def test_a_direction_in_range_with_args_hess_prod_still_works() -> None:
    E = energy(_quad_fun, _quad_grad, _quad_hess_prod_args, direction=-1)
    np.testing.assert_allclose(E.hess_prod(jnp.ones(3), jnp.asarray(2.0), v=jnp.arange(3.0)), [0.0, 2.0, 4.0])
