from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.tree import sequential_vmap_with_vjp

# Opaque stand-ins for a foreign kernel: host callbacks that JAX cannot batch (no `vmap_method`), made
# differentiable to any order through custom JVPs that call each other.


def _host(fn: Callable[[np.ndarray], np.ndarray], x: jax.Array) -> jax.Array:
    return jax.pure_callback(lambda v: np.asarray(fn(v), dtype=v.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), x)


@jax.custom_jvp
def host_sin(x: jax.Array) -> jax.Array:
    return _host(np.sin, x)


@jax.custom_jvp
def host_cos(x: jax.Array) -> jax.Array:
    return _host(np.cos, x)


@host_sin.defjvp
def _host_sin_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
    (x,), (t,) = primals, tangents
    return host_sin(x), host_cos(x) * t


@host_cos.defjvp
def _host_cos_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
    (x,), (t,) = primals, tangents
    return host_cos(x), -host_sin(x) * t


def _energy(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.sum(host_sin(x) * w)


energy = sequential_vmap_with_vjp(_energy)
XS = jnp.linspace(0.0, 1.0, 6).reshape(3, 2)
W = jnp.array([1.0, 2.0])


def _uses_scan(fn: Callable[..., object], *args: object) -> bool:
    return "scan[" in str(jax.make_jaxpr(fn)(*args))


def test_plain_vmap_of_the_callback_fails() -> None:
    with pytest.raises(NotImplementedError, match="vmap_method"):
        jax.vmap(_energy, (0, None))(XS, W)


def test_forward_is_sequential_and_correct() -> None:
    out = jax.vmap(energy, (0, None))(XS, W)
    np.testing.assert_allclose(out, jnp.sum(jnp.sin(XS) * W[None], axis=1), rtol=1e-6)
    assert _uses_scan(jax.vmap(energy, (0, None)), XS, W)
    assert energy.__name__ == "_energy"


def test_unbatched_call_is_just_the_function() -> None:
    assert energy(XS[0], W) == _energy(XS[0], W)
    assert not _uses_scan(energy, XS[0], W)


def test_grad_of_vmap() -> None:
    gx, gw = jax.jit(jax.grad(lambda x, w: jnp.sum(jax.vmap(energy, (0, None))(x, w)), argnums=(0, 1)))(XS, W)
    np.testing.assert_allclose(gx, jnp.cos(XS) * W[None], rtol=1e-6)
    np.testing.assert_allclose(gw, jnp.sum(jnp.sin(XS), axis=0), rtol=1e-6)
    assert _uses_scan(jax.grad(lambda x: jnp.sum(jax.vmap(energy, (0, None))(x, W))), XS)


def test_vmap_of_grad() -> None:
    gx, gw = jax.jit(jax.vmap(jax.grad(energy, argnums=(0, 1)), (0, None)))(XS, W)
    np.testing.assert_allclose(gx, jnp.cos(XS) * W[None], rtol=1e-6)
    np.testing.assert_allclose(gw, jnp.sin(XS), rtol=1e-6)


def test_grad_of_grad_and_higher() -> None:
    first = jax.grad(lambda x: energy(x[None], W[:1]))
    second = jax.grad(first)
    third = jax.grad(second)
    x = jnp.float32(0.4)
    derivatives = jax.jit(lambda x: jnp.stack([first(x), second(x), third(x)]))(x)
    np.testing.assert_allclose(derivatives, [jnp.cos(x), -jnp.sin(x), -jnp.cos(x)], rtol=1e-6)
    hessian = jax.jit(jax.jacrev(jax.grad(energy)))(XS[1], W)
    np.testing.assert_allclose(hessian, jnp.diag(-jnp.sin(XS[1]) * W), rtol=1e-6, atol=1e-7)


def test_vmap_of_grad_of_grad() -> None:
    curvature = jax.jit(jax.vmap(jax.grad(lambda x, w: jnp.sum(jax.grad(energy)(x, w))), (0, None)))(XS, W)
    np.testing.assert_allclose(curvature, -jnp.sin(XS) * W[None], rtol=1e-6, atol=1e-7)


def test_grad_of_vmap_of_grad() -> None:
    # d/dw of sum_i sum_j cos(x_ij) w_j = sum_i cos(x_ij)
    def total_force(w: jax.Array) -> jax.Array:
        return jnp.sum(jax.vmap(jax.grad(energy), (0, None))(XS, w))

    np.testing.assert_allclose(jax.jit(jax.grad(total_force))(W), jnp.sum(jnp.cos(XS), axis=0), rtol=1e-6)


def test_nested_vmap() -> None:
    xss = jnp.stack([XS, 2 * XS])
    doubly = jax.vmap(jax.vmap(energy, (0, None)), (0, None))
    out, grads = jax.jit(jax.value_and_grad(lambda x: jnp.sum(doubly(x, W))))(xss)
    assert str(jax.make_jaxpr(doubly)(xss, W)).count("scan[") == 2
    np.testing.assert_allclose(out, jnp.sum(jnp.sin(xss) * W[None, None]), rtol=1e-6)
    np.testing.assert_allclose(grads, jnp.cos(xss) * W[None, None], rtol=1e-6)


def test_func_is_traced_a_fixed_number_of_times() -> None:
    traces = []

    def counted(x: jax.Array) -> jax.Array:
        traces.append(x.shape)
        return jnp.sum(host_sin(x))

    wrapped = sequential_vmap_with_vjp(counted)
    counts = []
    for batch in (2, 9):
        traces.clear()
        jax.make_jaxpr(jax.grad(lambda x: jnp.sum(jax.vmap(jax.grad(wrapped))(x))))(jnp.ones((batch, 3)))
        counts.append(len(traces))
        assert set(traces) == {(3,)}  # always one example at a time
    assert counts == [1, 1]  # traced once, then looped: not unrolled, not retraced for the backward pass


def test_closures_over_batched_and_differentiated_values() -> None:
    # Model parameters closed over by the wrapped function, as in a training step.
    def batched_energy(w: jax.Array, xs: jax.Array) -> jax.Array:
        per_example = sequential_vmap_with_vjp(lambda x: jnp.sum(host_sin(x) * w))
        return jnp.sum(jax.vmap(per_example)(xs))

    np.testing.assert_allclose(batched_energy(W, XS), jnp.sum(jnp.sin(XS) * W[None]), rtol=1e-6)
    grad_w = jax.jit(jax.grad(batched_energy))(W, XS)
    np.testing.assert_allclose(grad_w, jnp.sum(jnp.sin(XS), axis=0), rtol=1e-6)
    # Second order through the closure: d/dw of sum(d/dx energy) = sum(cos(x)).
    mixed = jax.jit(jax.grad(lambda w: jnp.sum(jax.grad(batched_energy, argnums=1)(w, XS))))(W)
    np.testing.assert_allclose(mixed, jnp.sum(jnp.cos(XS), axis=0), rtol=1e-6)
    # A closed-over value that is itself batched by an enclosing vmap.
    scaled = jax.jit(jax.vmap(lambda s: sequential_vmap_with_vjp(lambda x: energy(x, W * s))(XS[0])))
    np.testing.assert_allclose(scaled(jnp.array([1.0, 3.0])), jnp.array([1.0, 3.0]) * energy(XS[0], W), rtol=1e-6)


def test_pytrees_kwargs_static_and_integer_arguments() -> None:
    def model(state: dict[str, jax.Array], *, scale: float, activation: Callable[[jax.Array], jax.Array]) -> tuple:
        assert isinstance(scale, float)  # static arguments stay Python values
        y = activation(state["x"]) * scale * state["n"].astype(state["x"].dtype)
        return jnp.sum(y), state["n"] + 1

    wrapped = sequential_vmap_with_vjp(model)
    state = {"x": XS, "n": jnp.arange(3, dtype=jnp.int32)}
    value, count = jax.jit(jax.vmap(lambda s: wrapped(s, scale=2.0, activation=host_sin)))(state)
    np.testing.assert_allclose(value, 2.0 * jnp.arange(3.0) * jnp.sum(jnp.sin(XS), axis=1), rtol=1e-6)
    assert count.dtype == jnp.int32
    assert count.tolist() == [1, 2, 3]

    def loss(x: jax.Array) -> jax.Array:
        v, _ = jax.vmap(lambda s: wrapped(s, scale=2.0, activation=host_sin))({"x": x, "n": state["n"]})
        return jnp.sum(v)

    np.testing.assert_allclose(jax.jit(jax.grad(loss))(XS), 2.0 * jnp.arange(3.0)[:, None] * jnp.cos(XS), rtol=1e-6)
    per_example_grad = jax.grad(lambda s: wrapped(s, scale=1.0, activation=host_sin)[0], allow_int=True)
    per_example = jax.jit(jax.vmap(per_example_grad))(state)
    np.testing.assert_allclose(per_example["x"], jnp.arange(3.0)[:, None] * jnp.cos(XS), rtol=1e-6)
    assert per_example["n"].dtype == jax.dtypes.float0


def test_under_jit() -> None:
    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def forces(x: jax.Array) -> jax.Array:
        return jax.vmap(jax.grad(energy), (0, None))(x, W)

    for scale in (1.0, 2.0):
        np.testing.assert_allclose(forces(scale * XS), jnp.cos(scale * XS) * W[None], rtol=1e-6)


def test_forward_mode_is_not_supported() -> None:
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda x: energy(x, W), (XS[0],), (jnp.ones(2),))


@pytest.mark.x64
def test_check_grads_x64() -> None:
    xs = XS.astype(jnp.float64)
    w = W.astype(jnp.float64)
    check_grads(jax.jit(jax.vmap(energy, (0, None))), (xs, w), order=2, modes=["rev"])
