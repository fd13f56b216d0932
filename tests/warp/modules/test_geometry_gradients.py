"""Gradients through Warp's mesh queries: exact with respect to the mesh points, the query points and the rays.

jarp differentiates a variant of the kernel in which each query's smooth fields (closest-point barycentrics, a
ray's distance, barycentrics, sign and normal) are recomputed from the hit face's vertices
(`_variants.vertex_reads`), also inside the ``@wp.func``s the kernel calls. Checked against float64
central differences of the jarp forward on a perturbed height field, away from face switches and kinks; the
forward values against Warp's own queries launched on a prebuilt ``wp.Mesh``; what cannot be rewritten still
refused.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import Mesh, jax_kernel
from jarp.warp._geometry import _adjoints, _variants
from tests.support import kernels_geometry as kg
from tests.support import kernels_geometry_gradients as kgg
from tests.support.geometry import height_field

EPS = 1.0e-3


def perturbed_height_field(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 5 x 5 height field with jittered vertices (no two triangles coplanar, no axis-aligned edge)."""
    points, faces = height_field()
    rng = np.random.default_rng(seed)
    points = points + np.concatenate(
        [rng.uniform(-0.04, 0.04, (len(points), 2)), rng.uniform(-0.3, 0.3, (len(points), 1))], 1
    )
    return points.astype(np.float32), faces


POINTS, FACES = perturbed_height_field(0)
_rng = np.random.default_rng(1)
QUERY_POINTS = np.concatenate([_rng.uniform(-0.2, 1.2, (24, 2)), _rng.uniform(-0.6, 0.6, (24, 1))], 1).astype(
    np.float32
)
# downward rays (tilted, unnormalised), a few upward ones (hitting the back of a face) and two that miss
ORIGINS = np.concatenate([_rng.uniform(0.25, 0.75, (20, 2)), np.full((20, 1), 1.0)], 1)
ORIGINS[16:18, 2] = -1.0
ORIGINS[18:, 0] += 3.0
DIRECTIONS = np.concatenate([_rng.uniform(-0.1, 0.1, (20, 2)), _rng.uniform(-1.5, -0.7, (20, 1))], 1)
DIRECTIONS[16:18, 2] *= -1.0
ORIGINS, DIRECTIONS = ORIGINS.astype(np.float32), DIRECTIONS.astype(np.float32)


def mesh(points: jax.Array) -> Mesh:
    return Mesh(points=points, indices=FACES, support_winding_number=True)


point_module = jax_kernel(kgg.point_queries, num_outputs=3, enable_backward=True)
ray_module = jax_kernel(kgg.ray_queries, num_outputs=4, enable_backward=True)
function_module = jax_kernel(kgg.in_functions, num_outputs=3, enable_backward=True)
condition_module = jax_kernel(kgg.u_in_a_condition, enable_backward=True)


def point_values(points: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    dims = dict.fromkeys(("bary", "face", "sign"), (x.shape[0], 6))
    bary, face, _ = point_module(mesh(points), x, output_dims=dims)
    return bary, face


def ray_values(points: jax.Array, o: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
    tuv, sign, normal, face = ray_module(mesh(points), o, d)
    return jnp.concatenate([tuv, sign[:, None], normal], 1), face


def function_values(points: jax.Array, x: jax.Array, o: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
    offset, hit, faces = function_module(mesh(points), x, o, d)
    return jnp.concatenate([offset, hit], 1), faces


def condition_values(points: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    (out,) = condition_module(mesh(points), x)
    return out, jnp.zeros(out.shape, jnp.int32)  # a branch switch is a jump: the kink filter drops it


def check_gradients(
    values: Callable[..., tuple[jax.Array, jax.Array]],
    args: Sequence[np.ndarray],
    wrt: Sequence[int],
    seed: int,
    directions: int = 3,
) -> None:
    """Reverse-mode derivatives of ``values`` (per-sample values, per-sample faces) with respect to the arguments
    ``wrt``, against float64 central differences of its forward along random directions.

    Samples whose face changes within the step, or whose one-sided differences disagree (a kink: a closest point
    moving onto an edge, a branch), are left out of the comparison; most must remain.
    """
    rng = np.random.default_rng(seed)
    forward = jax.jit(values)

    def evaluate(a: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        v, f = forward(*(jnp.asarray(x, jnp.float32) for x in a))
        return np.asarray(v, np.float64), np.asarray(f)

    base, base_faces = evaluate(args)
    for _ in range(directions):
        steps = [rng.normal(size=args[k].shape) * EPS for k in wrt]
        plus, minus = list(args), list(args)
        for k, step in zip(wrt, steps, strict=True):
            plus[k] = (args[k] + step).astype(np.float32)
            minus[k] = (args[k] - step).astype(np.float32)
        (up, up_faces), (down, down_faces) = evaluate(plus), evaluate(minus)
        sample_axes = tuple(range(1, base.ndim))
        face_axes = tuple(range(1, base_faces.ndim))
        same_face = np.all((up_faces == base_faces) & (down_faces == base_faces), axis=face_axes)
        second = np.abs(up - 2.0 * base + down)
        smooth = np.all(second <= 0.05 * np.abs(up - down) + 2.0e-6, axis=sample_axes)
        keep = same_face & smooth
        assert keep.mean() >= 0.6, f"only {keep.sum()} of {keep.size} samples away from face switches and kinks"
        weights = rng.normal(size=base.shape) * keep.reshape((-1,) + (1,) * (base.ndim - 1))

        def loss(*diff: jax.Array, weights: np.ndarray = weights) -> jax.Array:
            full = [jnp.asarray(x, jnp.float32) for x in args]
            for k, x in zip(wrt, diff, strict=True):
                full[k] = x
            return jnp.sum(jnp.asarray(weights, jnp.float32) * values(*full)[0])

        grads = jax.grad(loss, argnums=tuple(range(len(wrt))))(*(jnp.asarray(args[k], jnp.float32) for k in wrt))
        # the step each argument actually took (both ends rounded to float32)
        reverse = sum(
            float(np.sum(np.asarray(g, np.float64) * (plus[k].astype(np.float64) - minus[k].astype(np.float64))))
            for g, k in zip(grads, wrt, strict=True)
        )
        central = float(np.sum(weights * (up - down)))
        scale = float(np.sum(np.abs(weights * (up - down))))
        assert abs(reverse - central) <= 1.0e-3 * scale + 1.0e-6, (reverse, central, scale)


# -- the rewrite ---------------------------------------------------------------------------------------------------


REWRITTEN = [kgg.point_queries, kgg.ray_queries, kgg.in_functions, kgg.u_in_a_condition, kgg.overloads_and_generics]


@pytest.mark.parametrize("kernel", REWRITTEN, ids=lambda k: k.key)
def test_every_query_is_rewritten_and_nothing_is_dropped(kernel: wp.Kernel) -> None:
    # Warp's kernel reads the smooth fields (in itself or in its functions: overloaded, generic, taking a query's
    # result); the variant reads only the face, the point queries' sign and the result from Warp's queries
    assert _adjoints.dropped(kernel)
    variant = _variants.vertex_reads(kernel)
    assert variant is not kernel
    assert _adjoints.dropped(variant) == ()


def test_a_ray_sign_is_smooth_and_refused_where_warp_computes_it() -> None:
    drops = _adjoints.dropped(kgg.ray_queries)
    assert {d.builtin for d in drops} >= {f"wp.mesh_query_ray (.{f})" for f in ("t", "u", "v", "sign", "normal")}
    # a point query's sign is the side: piecewise constant
    assert not any("(.sign)" in d.builtin for d in _adjoints.dropped(kgg.point_queries))


def test_what_cannot_be_rewritten_is_still_refused() -> None:
    # Warp's older overload writes the distance into the caller's variable: not rewritten, refused by name
    variant = _variants.vertex_reads(kg.ray_depth_out_params)
    assert any(d.builtin == "wp.mesh_query_ray" for d in _adjoints.dropped(variant))
    # a function reached through wp.static(...) is Warp's to resolve: not copied, its queries refused
    variant = _variants.vertex_reads(kgg.through_static)
    assert "wp.mesh_query_point_no_sign (.u)" in {d.builtin for d in _adjoints.dropped(variant)}


def test_a_refusal_names_the_mesh_it_concerns() -> None:
    module = jax_kernel(kgg.two_meshes_out_params, enable_backward=True)
    flat = Mesh(points=POINTS * np.float32([1.0, 1.0, 0.0]), indices=FACES)
    origins = ORIGINS[:16]

    def depth(a: Mesh, b: Mesh) -> jax.Array:
        return module(a, b, origins)[0].sum()

    # b's distance is rewritten: exact, minus each hit's barycentric weights, even though a's is refused
    g = jax.jit(jax.grad(lambda p: depth(flat, Mesh(points=p, indices=FACES))))(jnp.asarray(POINTS))
    assert float(g[:, 2].sum()) == pytest.approx(-len(origins), rel=1e-4)
    with pytest.raises(ValueError, match=r"respect to a\.points.*through wp\.mesh_query_ray, whose adjoint"):
        jax.jit(jax.grad(lambda p: depth(Mesh(points=p, indices=FACES), flat)))(jnp.asarray(POINTS))


# -- values --------------------------------------------------------------------------------------------------------


def test_forward_values_equal_warps_own_queries() -> None:
    warp_mesh = wp.Mesh(
        points=wp.array(POINTS, dtype=wp.vec3),
        indices=wp.array(FACES.reshape(-1), dtype=int),
        support_winding_number=True,
    )
    n = len(QUERY_POINTS)
    bary, face, sign = (wp.zeros((n, 6), dtype=t) for t in (wp.vec2, int, float))
    wp.launch(
        kgg.point_queries,
        dim=n,
        inputs=[warp_mesh.id, wp.array(QUERY_POINTS, dtype=wp.vec3)],
        outputs=[bary, face, sign],
    )
    dims = dict.fromkeys(("bary", "face", "sign"), (n, 6))
    got = point_module(mesh(jnp.asarray(POINTS)), QUERY_POINTS, output_dims=dims)
    np.testing.assert_array_equal(got[1], face.numpy())
    np.testing.assert_array_equal(got[2], sign.numpy())
    np.testing.assert_allclose(got[0], bary.numpy(), rtol=0, atol=2e-6)
    assert np.all(face.numpy() >= 0)
    assert np.mean(np.abs(bary.numpy()[:, :5] - np.round(bary.numpy()[:, :5])) > 0.01) > 0.5  # not only vertices

    m = len(ORIGINS)
    outs = [wp.zeros(m, dtype=t) for t in (wp.vec3, float, wp.vec3, int)]
    o, d = wp.array(ORIGINS, dtype=wp.vec3), wp.array(DIRECTIONS, dtype=wp.vec3)
    wp.launch(kgg.ray_queries, dim=m, inputs=[warp_mesh.id, o, d], outputs=outs)
    got = ray_module(mesh(jnp.asarray(POINTS)), ORIGINS, DIRECTIONS)
    np.testing.assert_array_equal(got[3], outs[3].numpy())
    for g, want in zip(got[:3], outs[:3], strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-5, atol=1e-6)
    hits = outs[3].numpy() >= 0
    np.testing.assert_array_equal(hits, np.arange(m) < 18)  # the last two rays miss (zeros and -1 there)
    signs = outs[1].numpy()
    assert np.all(signs[:16] > 0)
    assert np.all(signs[16:18] < 0)  # the upward rays see the back of their faces

    offset, hit, faces = (wp.zeros(m, dtype=t) for t in (wp.vec3, wp.vec4, wp.vec2i))
    x = wp.array(QUERY_POINTS[:m], dtype=wp.vec3)
    wp.launch(kgg.in_functions, dim=m, inputs=[warp_mesh.id, x, o, d], outputs=[offset, hit, faces])
    got = function_module(mesh(jnp.asarray(POINTS)), QUERY_POINTS[:m], ORIGINS, DIRECTIONS)
    np.testing.assert_array_equal(got[2], faces.numpy())
    np.testing.assert_allclose(got[0], offset.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], hit.numpy(), rtol=1e-5, atol=1e-5)


# -- gradients -----------------------------------------------------------------------------------------------------


def test_closest_point_barycentrics_differentiate_through_points_and_query_points() -> None:
    check_gradients(point_values, (POINTS, QUERY_POINTS), wrt=(0,), seed=2)
    check_gradients(point_values, (POINTS, QUERY_POINTS), wrt=(1,), seed=3)


def test_ray_distance_barycentrics_sign_and_normal_differentiate() -> None:
    check_gradients(ray_values, (POINTS, ORIGINS, DIRECTIONS), wrt=(0,), seed=4)
    check_gradients(ray_values, (POINTS, ORIGINS, DIRECTIONS), wrt=(1, 2), seed=5)


def test_queries_inside_functions_differentiate() -> None:
    args = (POINTS, QUERY_POINTS[: len(ORIGINS)], ORIGINS, DIRECTIONS)
    check_gradients(function_values, args, wrt=(0,), seed=6)
    check_gradients(function_values, args, wrt=(1, 2, 3), seed=7)


def test_a_barycentric_read_only_in_a_condition_is_accepted() -> None:
    check_gradients(condition_values, (POINTS, QUERY_POINTS), wrt=(0, 1), seed=8)
