"""Struct value fields take JAX values: traced, batched and differentiated like top-level runtime scalars.

Unit: the runtime values of `jarp/warp/_plan/_binding.py` (a struct value field given a JAX array becomes a
one-element operand) and `jarp/warp/_plan/_runtime_scalars.py` (the kernel variant reads the field from it). A
material constant inside a struct (a stiffness, a rest length, a time step) is then a model leaf like any other:
``jax.jit`` traces it, ``jax.grad`` differentiates it through Warp's adjoint (``enable_backward=True``), ``jax.vmap``
batches it. Python numbers keep the static path (baked into the launch). Values are checked against NumPy,
gradients against closed forms and finite differences.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.warp import jax_callable, jax_kernel, list_plans
from tests.support import kernels_struct_runtime as ks

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

X = jnp.asarray([0.0, 0.5, 1.5, 3.0], jnp.float32)
G = (0.0, 0.0, -9.8)


def _energy_ref(x: np.ndarray, k: float, rest: float) -> float:
    d = np.asarray(x, np.float64) - rest
    return float(np.sum(0.5 * k * d * d))


def _mat(k: object, rest: object = 0.5, g: object = G) -> dict:
    return {"k": k, "rest": rest, "g": g}


def test_a_traced_field_under_jit_matches_numpy_and_does_not_retrace() -> None:
    m = jax_kernel(ks.spring_energy, output_dims=1)

    @eqx.debug.assert_max_traces(max_traces=1)
    def f(x: jax.Array, k: jax.Array) -> jax.Array:
        return m(x, _mat(k))[0][0]

    jf = jax.jit(f)
    for k in (2.0, 3.0, -1.0):
        np.testing.assert_allclose(jf(X, jnp.float32(k)), _energy_ref(X, k, 0.5), rtol=1e-6)


def test_eager_jax_values_and_python_numbers_agree() -> None:
    m = jax_kernel(ks.spring_energy, output_dims=1)
    runtime = m(X, _mat(jnp.float32(2.0), jnp.float32(0.25)))[0]
    static = m(X, _mat(2.0, 0.25))[0]
    np.testing.assert_allclose(runtime, [_energy_ref(X, 2.0, 0.25)], rtol=1e-6)
    np.testing.assert_allclose(static, runtime, rtol=1e-6)
    # Python numbers stay static: their plan has no runtime parameter; the JAX values' plan has one per field.
    names = [tuple(p.name for p in info.params) for info in list_plans() if "spring_energy" in info.name]
    assert any(all("__jarp_rt" not in n for n in params) for params in names)
    assert any(sum("__jarp_rt" in n for n in params) == 2 for params in names)


def test_gradients_with_respect_to_struct_fields() -> None:
    m = jax_kernel(ks.spring_energy, output_dims=1, enable_backward=True)

    def e(k: jax.Array, rest: jax.Array) -> jax.Array:
        return m(X, _mat(k, rest))[0][0]

    k, rest = jnp.float32(2.0), jnp.float32(0.5)
    dk, drest = jax.grad(e, argnums=(0, 1))(k, rest)
    x = np.asarray(X, np.float64)
    np.testing.assert_allclose(dk, np.sum(0.5 * (x - 0.5) ** 2), rtol=1e-5)
    np.testing.assert_allclose(drest, -2.0 * np.sum(x - 0.5), rtol=1e-5)
    check_grads(e, (k, rest), order=1, modes=["rev"], atol=5e-2, rtol=5e-2)
    # The gradient with respect to the array and the field together, through the dict.
    gx, gmat = jax.grad(lambda x, mat: m(x, mat)[0][0], argnums=(0, 1))(X, _mat(k, rest, jnp.asarray(G)))
    np.testing.assert_allclose(gx, 2.0 * (x - 0.5), rtol=1e-5)
    np.testing.assert_allclose(gmat["k"], dk, rtol=1e-6)
    np.testing.assert_allclose(gmat["g"], np.zeros(3), atol=0)  # read nowhere: a true zero


def test_vmap_over_a_struct_field() -> None:
    m = jax_kernel(ks.spring_energy, output_dims=1)
    ks_ = jnp.asarray([1.0, 2.0, 4.0], jnp.float32)
    out = jax.vmap(lambda k: m(X, _mat(k))[0][0])(ks_)
    np.testing.assert_allclose(out, [_energy_ref(X, float(k), 0.5) for k in ks_], rtol=1e-6)
    grads = jax.vmap(
        jax.grad(lambda k: jax_kernel(ks.spring_energy, output_dims=1, enable_backward=True)(X, _mat(k))[0][0])
    )(ks_)
    x = np.asarray(X, np.float64)
    np.testing.assert_allclose(grads, np.full(3, np.sum(0.5 * (x - 0.5) ** 2)), rtol=1e-5)


def test_vector_and_nested_fields() -> None:
    x3 = jnp.ones((2, 3), jnp.float32)
    (out,) = jax.jit(lambda g: jax_kernel(ks.gravity)(x3, _mat(2.0, 0.0, g)))(jnp.asarray(G, jnp.float32))
    np.testing.assert_allclose(out, np.ones((2, 3)) + 2.0 * np.asarray(G), rtol=1e-6)
    m = jax_kernel(ks.nested_energy, output_dims=1, enable_backward=True)
    body = {"material": _mat(jnp.float32(3.0), 0.5), "count": 2}
    np.testing.assert_allclose(m(X, body)[0], [2 * _energy_ref(X, 3.0, 0.5)], rtol=1e-6)
    dk = jax.grad(lambda k: m(X, {"material": _mat(k, 0.5), "count": 2})[0][0])(jnp.float32(3.0))
    np.testing.assert_allclose(dk, 2 * _energy_ref(X, 1.0, 0.5), rtol=1e-5)


def test_a_struct_passed_whole_to_a_function_refuses_jax_values_naming_the_field() -> None:
    m = jax_kernel(ks.energy_through_func, output_dims=1)
    np.testing.assert_allclose(m(X, _mat(2.0))[0], [_energy_ref(X, 2.0, 0.5)], rtol=1e-6)  # static: fine
    with pytest.raises(TypeError, match=r"struct field\(s\) \['mat.k'\] got JAX values.*uses the struct 'mat' whole"):
        jax.jit(lambda k: m(X, _mat(k)))(jnp.float32(2.0))


def test_wrong_dtype_or_shape_of_a_field_is_named() -> None:
    m = jax_kernel(ks.spring_energy, output_dims=1)
    with pytest.raises(TypeError, match=r"struct field 'mat.k'.*float32"):
        jax.jit(lambda k: m(X, _mat(k)))(jnp.int32(2))
    with pytest.raises(TypeError, match=r"struct field 'mat.g'.*shape"):
        jax.jit(lambda g: m(X, _mat(2.0, 0.5, g)))(jnp.ones(4, jnp.float32))


def test_jax_callable_struct_fields_stay_static() -> None:
    def run(x: ks.wp.array(dtype=ks.wp.float32), mat: ks.Material, energy: ks.wp.array(dtype=ks.wp.float32)) -> None:
        ks.wp.launch(ks.spring_energy, dim=x.shape, inputs=[x, mat], outputs=[energy])

    f = jax_callable(run, output_dims={"energy": 1})
    np.testing.assert_allclose(f(X, _mat(2.0))[0], [_energy_ref(X, 2.0, 0.5)], rtol=1e-6)
    with pytest.raises(TypeError, match=r"mat.k"):
        jax.jit(lambda k: f(X, _mat(k)))(jnp.float32(2.0))


# -- two structs, int/bool fields, scalars between them, a field read through a wp.func argument -----------------------


def _two_structs_ref(
    k: float, rest: float, n: int, on: bool, scale: float, c: float, v1: float, shift: float
) -> np.ndarray:
    x = np.asarray(X, np.float64)
    d = x - rest + shift
    return 0.5 * k * d * d * scale + c * x + v1 * n + (1000.0 if on else 0.0)


def _two_structs_call(
    m: object, k: object, rest: object, n: object, on: object, scale: object, c: object, v1: object, shift: object
) -> jax.Array:
    springs = {"rest": rest, "k": k, "n": n, "on": on}  # not in declaration order
    damping = {"v": jnp.stack([jnp.float32(0.0), jnp.float32(v1)]), "c": c}
    return m(X, springs, scale, damping, shift)[0]  # type: ignore[operator]


def test_runtime_fields_of_two_structs_and_runtime_scalars_keep_their_order() -> None:
    from tests.support import kernels_corner_cases as kr

    args = {"k": 2.0, "rest": 0.5, "n": 3, "on": True, "scale": 1.5, "c": 0.25, "v1": -2.0, "shift": 0.125}
    j = {n: jnp.asarray(v, jnp.float32) for n, v in args.items()}
    j["n"], j["on"] = jnp.int32(3), jnp.bool_(True)
    m = jax_kernel(kr.two_structs)
    np.testing.assert_allclose(_two_structs_call(m, **j), _two_structs_ref(**args), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(lambda **a: _two_structs_call(m, **a))(**j), _two_structs_ref(**args), rtol=1e-6)
    ks_ = jnp.asarray([1.0, 2.0, 3.0], jnp.float32)
    out = jax.vmap(lambda k, sh: _two_structs_call(m, **{**j, "k": k, "shift": sh}))(ks_, ks_ / 10)
    for b in range(3):
        ref = _two_structs_ref(**{**args, "k": float(ks_[b]), "shift": float(ks_[b] / 10)})
        np.testing.assert_allclose(out[b], ref, rtol=1e-6)
    mb = jax_kernel(kr.two_structs, enable_backward=True)
    names = ("k", "rest", "scale", "c", "v1", "shift")

    def e(*p: jax.Array) -> jax.Array:
        return _two_structs_call(mb, **{**j, **dict(zip(names, p, strict=True))}).sum()

    grads = jax.grad(e, argnums=tuple(range(6)))(*(j[n] for n in names))
    for i, n in enumerate(names):
        h = 1e-3
        hi, lo = dict(args), dict(args)
        hi[n] += h
        lo[n] -= h
        fd = (_two_structs_ref(**hi).sum() - _two_structs_ref(**lo).sum()) / (2 * h)
        np.testing.assert_allclose(grads[i], fd, rtol=1e-4, err_msg=n)


def test_a_field_named_with_double_underscores_next_to_a_nested_field() -> None:
    # Both once named their variant parameter s__a__b__jarp_rt (Warp: duplicate parameter name).
    from tests.support import kernels_corner_cases as kr

    (out,) = jax_kernel(kr.clash)(X, {"a__b": jnp.float32(10.0), "a": {"b": jnp.float32(3.0)}})
    np.testing.assert_allclose(out, np.asarray(X) * 10.0 + 3.0)
