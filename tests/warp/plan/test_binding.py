"""Argument binding, for both module kinds: what a call accepts, and errors that name the argument.

Unit: ``jarp/warp/_plan/_binding.py`` (one pass over the call's arguments, before tracing): the argument count, each
array's dtype, dims and inner (vector/matrix) dims, float64 NumPy arrays refused rather than downcast, NumPy float32
arrays accepted, the static forms of scalar arguments, and the checks on runtime (traced) scalars: a
``JaxKernel`` reads them at run time and checks their dtype, a ``JaxCallable`` refuses them naming the argument.

Tests run over both kinds (``tests/support/kinds.py``) with the spring kernel/function (distinctive argument names);
values are checked against NumPy.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import Mesh, jax_kernel
from tests.support import kernels_geometry as kg
from tests.support.kernels import ERRORS, N_SPRING, STIFFNESS, spring_data, spring_expected
from tests.support.kinds import CALLABLE, KERNEL, Kind, over_kinds


def spring(kind: Kind, **options):
    return kind("spring", num_outputs=2, **options)


# ======================================================================================================================
# Call errors name the argument, before tracing
# ======================================================================================================================


def _bad_calls():
    return {
        # jax-array cases: checked eagerly and under jax.jit
        "too-few-args": (lambda m, p, w: m(p, w), r"\b3\b|stiffness"),
        "too-many-args": (lambda m, p, w: m(p, w, STIFFNESS, w), r"\b3\b|\b4\b"),
        "int32-weights": (lambda m, p, w: m(p, jnp.ones(N_SPRING, dtype=jnp.int32), STIFFNESS), "weights"),
        "ndim-weights": (lambda m, p, w: m(p, w.reshape((N_SPRING, 1)), STIFFNESS), "weights"),
        "ndim-positions": (lambda m, p, w: m(p.reshape(-1), w, STIFFNESS), "positions"),
        "inner-dims-positions": (lambda m, p, w: m(p[:, :2], w, STIFFNESS), "positions"),
        "output-dims-dict-missing-name": (
            lambda m, p, w: m(p, w, STIFFNESS, output_dims={"energies": N_SPRING}),
            "forces",
        ),
    }


@pytest.mark.parametrize("case", list(_bad_calls()))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@over_kinds
def test_call_error_names_argument(kind: Kind, case, jit):
    call, match = _bad_calls()[case]
    m = spring(kind)
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    fn = jax.jit(partial(call, m)) if jit else partial(call, m)
    with pytest.raises(ERRORS, match=match):
        fn(p, w)


@pytest.mark.parametrize("which", ["positions", "weights"])
@over_kinds
def test_float64_numpy_array_names_argument(kind: Kind, which):
    # x64 is off in this process, so the float64 array can only come from NumPy; it must not be silently downcast
    m = spring(kind)
    p, w = spring_data(N_SPRING)
    if which == "positions":
        p = p.astype(np.float64)
    else:
        w = w.astype(np.float64)
    with pytest.raises(ERRORS, match=which):
        m(p, w, STIFFNESS)


# ======================================================================================================================
# Accepted forms: NumPy float32 arrays, static scalars
# ======================================================================================================================


@over_kinds
def test_numpy_float32_and_jax_inputs(kind: Kind):
    p, w = spring_data(N_SPRING)
    exp_e, exp_f = spring_expected(p, w)
    m = spring(kind)
    for energies, forces in (
        m(p, w, STIFFNESS),
        m(jnp.asarray(p), jnp.asarray(w), STIFFNESS),
        jax.jit(lambda p, w: m(p, w, STIFFNESS))(p, w),
    ):
        assert forces.shape == (N_SPRING, 3)
        np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
        np.testing.assert_allclose(forces, exp_f, rtol=1e-5)


@pytest.mark.parametrize("s", [2, 2.0, np.float32(2.0), np.float64(2.0), np.int32(2)], ids=type)
@over_kinds
def test_static_scalar_forms(kind: Kind, s):
    m = spring(kind)
    p, w = spring_data(N_SPRING)
    energies, forces = jax.jit(lambda p, w: m(p, w, s))(jnp.asarray(p), jnp.asarray(w))
    exp_e, exp_f = spring_expected(p, w, 2.0)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-5)


# ======================================================================================================================
# Runtime (traced) scalars: read at run time by a JaxKernel, refused by a JaxCallable
# ======================================================================================================================


def test_kernel_traced_scalar_is_a_runtime_value():
    m = spring(KERNEL)
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    exp_e, exp_f = spring_expected(p, w)
    energies, forces = jax.jit(lambda p, w, s: m(p, w, s))(p, w, STIFFNESS)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-5)
    stiff = jnp.array([1.0, 2.0], dtype=jnp.float32)
    batched_e, _ = jax.vmap(lambda s: m(p, w, s))(stiff)
    np.testing.assert_allclose(batched_e, np.stack([spring_expected(p, w, float(s))[0] for s in stiff]), rtol=1e-5)


def test_kernel_runtime_scalar_with_wrong_dtype_is_named():
    m = spring(KERNEL)
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    with pytest.raises(TypeError, match="stiffness"):
        m(p, w, jnp.int32(2))


def test_callable_traced_scalar_is_type_error_naming_argument():
    m = spring(CALLABLE)
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    with pytest.raises(TypeError, match="stiffness"):
        jax.jit(lambda s: m(p, w, s))(STIFFNESS)


# -- Warp structures, taken by id ------------------------------------------------------------------------------


def _triangle() -> wp.Mesh:
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), dtype=wp.vec3, device="cpu")
    return wp.Mesh(points=points, indices=wp.array(np.array([0, 1, 2], np.int32), dtype=int, device="cpu"))


def test_a_warp_structure_in_place_of_its_id_names_id() -> None:
    mesh = _triangle()
    p = jnp.zeros((2, 3), jnp.float32)
    with pytest.raises(
        TypeError,
        match=r"'mesh' got a wp.Mesh; .*pass a jarp\.warp\.Mesh\(\.\.\.\) pytree .* or mesh\.id, a Python int",
    ):
        jax_kernel(kg.mesh_sign)(mesh, p)
    with pytest.raises(TypeError, match=r"struct field 'scene.mesh' got a wp.Mesh; .*mesh\.id, a Python int"):
        jax_kernel(kg.scene_hit)({"mesh": mesh, "scale": 2.0}, p)
    # the advice works: the pytree, and the id as a Python int (with x64 off too)
    triangle = Mesh(points=mesh.points.numpy(), indices=mesh.indices.numpy().reshape(1, 3))
    np.testing.assert_array_equal(jax_kernel(kg.mesh_sign)(triangle, p)[0], np.ones(2, np.float32))
    (d,) = jax_kernel(kg.mesh_sign)(mesh.id, p)
    np.testing.assert_array_equal(d, np.ones(2, np.float32))
    (d,) = jax_kernel(kg.scene_hit)({"mesh": mesh.id, "scale": 2.0}, p)
    np.testing.assert_array_equal(d, np.full(2, 2.0, np.float32))


def test_a_traced_64_bit_id_without_x64_gets_advice_that_works() -> None:
    assert not jax.config.jax_enable_x64
    with pytest.raises(TypeError, match=r"JAX holds no uint64 array unless jax_enable_x64 is on, so pass a Python"):
        jax_kernel(kg.mesh_sign)(jnp.asarray(7, jnp.uint32), jnp.zeros((2, 3), jnp.float32))
