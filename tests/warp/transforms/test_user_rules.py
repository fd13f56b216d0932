"""User derivative rules (jvp=/vjp=, `jarp/warp/_jax/_user_rules.py`): forward mode for Warp kernels, closed forms in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels_ad as K

pytestmark = pytest.mark.x64

X = jnp.array([0.5, -1.0, 2.0, 1.5])


def _cube(**rules):
    return jax_kernel(K.cube64, **rules)


def test_jvp_rule_gives_forward_mode():
    m = _cube(jvp=jax_kernel(K.cube64_jvp, enable_backward=True))
    v = jnp.array([1.0, 2.0, -1.0, 0.5])
    y, ty = jax.jvp(lambda x: m(x)[0], (X,), (v,))
    np.testing.assert_allclose(y, X**3)
    np.testing.assert_allclose(ty, 3 * X**2 * v)
    np.testing.assert_allclose(jax.jacfwd(lambda x: m(x)[0])(X), np.diag(3 * X**2))
    _, f_lin = jax.linearize(lambda x: m(x)[0], X)
    np.testing.assert_allclose(f_lin(v), 3 * X**2 * v)
    # reverse mode transposes the tangent kernel through Warp's adjoint of the jvp module
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(m(x)[0]))(X), 3 * X**2)
    check_grads(lambda x: m(x)[0], (X,), order=1, modes=["fwd", "rev"])


def test_jvp_and_vjp_rules_together():
    jvp = jax_kernel(K.prod_sum64_jvp)
    vjp = jax_kernel(K.prod_sum64_vjp, num_outputs=2)
    m = jax_kernel(K.prod_sum64, jvp=jvp, vjp=vjp)
    a, b = X, jnp.array([2.0, 0.5, -1.0, 3.0])
    f = lambda a, b: m(a, b, 1.5)[0]  # noqa: E731
    np.testing.assert_allclose(f(a, b), 1.5 * a * b)
    np.testing.assert_allclose(jax.jacfwd(f, argnums=(0, 1))(a, b), (np.diag(1.5 * b), np.diag(1.5 * a)))
    np.testing.assert_allclose(jax.jacrev(f, argnums=(0, 1))(a, b), (np.diag(1.5 * b), np.diag(1.5 * a)))
    check_grads(f, (a, b), order=1, modes=["fwd", "rev"])
    # the rules batch: vmap of jacfwd
    jac = jax.jit(jax.vmap(jax.jacfwd(lambda a: f(a, b))))(jnp.stack([a, 2 * a]))
    np.testing.assert_allclose(jac, np.stack([np.diag(1.5 * b)] * 2))


def test_vjp_rule_alone_replaces_warps_adjoint():
    vjp = jax_kernel(K.prod_sum64_vjp, num_outputs=2)
    m = jax_kernel(K.prod_sum64, vjp=vjp)  # no enable_backward: the rule is the only reverse mode
    a, b = X, jnp.array([2.0, 0.5, -1.0, 3.0])
    ga, gb = jax.grad(lambda a, b: jnp.sum(m(a, b, 2.0)[0]), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, 2.0 * b)
    np.testing.assert_allclose(gb, 2.0 * a)
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda a: m(a, b, 2.0)[0], (a,), (a,))


def _cube_func(x: K.wp.array(dtype=K.wp.float64), y: K.wp.array(dtype=K.wp.float64)):
    K.wp.launch(K.cube64, dim=x.shape, inputs=[x], outputs=[y], device=x.device)


def test_rules_on_a_callable():
    m = jax_callable(_cube_func, jvp=jax_kernel(K.cube64_jvp, enable_backward=True))
    np.testing.assert_allclose(jax.jacfwd(lambda x: m(x)[0])(X), np.diag(3 * X**2))
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(m(x)[0]))(X), 3 * X**2)


def test_rule_returning_the_wrong_count_is_named():
    m = jax_kernel(K.prod_sum64, vjp=lambda a, b, s, ct: (s * b * ct,))  # one cotangent for two inputs
    with pytest.raises(TypeError, match="vjp"):
        jax.grad(lambda a: jnp.sum(m(a, a, 2.0)[0]))(X)


def _adjoint_launches(fn, *args):
    """The (kind, kernel key) of every adjoint custom call in ``fn``'s lowered program."""
    from jarp.warp import list_plans
    from tests.support.lowered import plan_handles

    text = jax.jit(fn).lower(*args).as_text()
    plans = {p.handle: p for p in list_plans()}
    handles = plan_handles(text)
    assert handles, text
    assert None not in handles, text
    return sorted((plans[h].kind, plans[h].kernel) for h in handles if plans[h].kind == "adjoint")


def test_reverse_mode_with_jvp_and_enable_backward_uses_the_primal_adjoint():
    # The user asked for the primal's Warp adjoint: reverse mode must not transpose the jvp module
    # (which has no enable_backward here, so transposing it would fail).
    m = _cube(jvp=jax_kernel(K.cube64_jvp), enable_backward=True)
    loss = lambda x: jnp.sum(m(x)[0] ** 2)  # noqa: E731
    np.testing.assert_allclose(jax.grad(loss)(X), 6 * X**5)
    check_grads(lambda x: m(x)[0], (X,), order=1, modes=["fwd", "rev"])
    # one adjoint launch, of the primal kernel
    assert _adjoint_launches(jax.grad(loss), X) == [("adjoint", "cube64")]
    # forward mode still uses the tangent kernel
    np.testing.assert_allclose(jax.jvp(lambda x: m(x)[0], (X,), (X,))[1], 3 * X**3)


def test_reverse_mode_without_primal_adjoint_transposes_the_jvp_module():
    m = _cube(jvp=jax_kernel(K.cube64_jvp, enable_backward=True))
    loss = lambda x: jnp.sum(m(x)[0])  # noqa: E731
    np.testing.assert_allclose(jax.grad(loss)(X), 3 * X**2)
    assert _adjoint_launches(jax.grad(loss), X) == [("adjoint", "cube64_jvp")]
