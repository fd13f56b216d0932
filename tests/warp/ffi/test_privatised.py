"""Privatised split launches: a kernel that only accumulates into its outputs runs on several CPU threads.

`_races.private_blocker` proves that a kernel would be race-free but for accumulations (``wp.atomic_add``/``sub``/
``min``/``max``, ``+=``/``-=`` into an array) into arrays used for nothing else; the native handler then gives each
index range of a split launch a copy of those arrays (zeroed, or filled with the min/max identity), runs the ranges on
XLA's pool and combines the copies in a fixed order. Sums are within rounding of one thread's order and the same
from run to run; minimums, maximums and integer sums are exact. What cannot be privatised (exchange, compare-and-swap,
an atomic's old value used, an accumulated array read or passed to a function, two combinations on one array,
float16) is never split. The work threshold splits a launch with few long threads, by its measured cost.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import jax
import numpy as np
import pytest
import warp as wp

import jarp.warp as jw
from jarp.warp._ffi import _native, _threads
from jarp.warp._ffi._registry import registry
from jarp.warp._plan._analysis import _races
from jarp.warp._plan._signature import make_signature
from jarp.warp._upstream import _warp_kernels
from tests.support import kernels_private as kp

pytestmark = [pytest.mark.launch_paths, pytest.mark.native_launches]

# Not `_native.active()`: a handler that failed to build must fail these tests, not skip their checks.
NATIVE = os.environ.get(_native.ENV, "native") != "python"


@pytest.fixture(autouse=True)
def restore_settings() -> Iterator[None]:
    threads, private = jw.cpu_threads(), jw.cpu_private_bytes()
    yield
    jw.set_cpu_threads(threads)
    jw.set_cpu_private_bytes(private)


def _stats() -> tuple[int, int]:
    native = _native.active()
    return native.pool_stats()[:2] if native is not None else (0, 0)


def _run(f, *args, threads: int) -> tuple[list[np.ndarray], int, int]:
    """``f(*args)`` under a thread cap: its outputs, and the pool calls and work items it made."""
    jw.set_cpu_threads(threads)
    calls, items = _stats()
    out = [np.asarray(o) for o in jax.block_until_ready(f(*args))]
    after = _stats()
    return out, after[0] - calls, after[1] - items


def _mesh(n_cells: int, n_verts: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, n_verts, (n_cells, 4)).astype(np.int32)
    return cells, rng.standard_normal(n_cells).astype(np.float32)


def _scatter_reference(cells: np.ndarray, x: np.ndarray, n_verts: int) -> tuple[np.ndarray, ...]:
    v = (np.sin(x) + x).astype(np.float32)
    values = np.repeat(v, 4)
    total = np.zeros(n_verts, np.float64)
    np.add.at(total, cells.ravel(), values)
    low = np.full(n_verts, np.inf, np.float32)
    np.minimum.at(low, cells.ravel(), values)
    high = np.full(n_verts, -np.inf, np.float32)
    np.maximum.at(high, cells.ravel(), values)
    count = np.bincount(cells.ravel(), minlength=n_verts).astype(np.int32)
    return total, low, high, count


def _params(kernel: wp.Kernel, num_outputs: int) -> tuple[object, ...]:
    return make_signature(_warp_kernels.kernel_params(kernel), num_outputs, (), what="test").params


# -- the proof ------------------------------------------------------------------------------------------------------


def test_the_proof_finds_each_accumulated_array_and_its_combination() -> None:
    assert _races.private_blocker(kp.scatter, _params(kp.scatter, 4), 1) == (
        None,
        (("total", "add"), ("low", "min"), ("high", "max"), ("count", "add")),
    )
    assert _races.private_blocker(kp.scatter_vec, _params(kp.scatter_vec, 1), 1) == (None, (("out", "add"),))
    # through a @wp.func that only accumulates into the array it is given (a FEM library's scatter helper)
    kernel = kp.accumulated_in_a_function
    assert _races.private_blocker(kernel, _params(kernel, 1), 1) == (None, (("out", "add"),))


@pytest.mark.parametrize(
    ("kernel", "num_outputs", "reason"),
    [
        (kp.exchange, 1, "atomic_exch"),
        (kp.compare_and_swap, 1, "atomic_cas"),
        (kp.old_value_used, 2, "whose result"),
        (kp.accumulated_and_read, 1, "used other than to accumulate"),
        (kp.read_in_a_function, 1, "used other than to accumulate"),
        (kp.two_combinations_through_functions, 1, "both as a add and as a max"),
        (kp.mixed_combinations, 1, "both as a add and as a max"),
        (kp.half_sums, 1, "wp.atomic_add"),
    ],
)
def test_what_cannot_be_privatised_is_refused_with_its_reason(kernel: wp.Kernel, num_outputs: int, reason: str) -> None:
    blocker, accumulated = _races.private_blocker(kernel, _params(kernel, num_outputs), 1)
    assert blocker is not None
    assert reason in blocker
    assert accumulated == ()


# -- split launches -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_a_privatised_launch_matches_one_thread_and_numpy(seed: int) -> None:
    n_cells, n_verts = 3 * _threads.MIN_TASKS, 5_000
    cells, x = _mesh(n_cells, n_verts, seed)
    kernel = jw.jax_kernel(kp.scatter, num_outputs=4, output_dims=n_verts)
    f = jax.jit(lambda c, x: kernel(c, x))
    one, pooled_one, _ = _run(f, cells, x, threads=1)
    many, pooled, items = _run(f, cells, x, threads=0)
    assert pooled_one == 0
    assert pooled == (1 if NATIVE else 0)
    assert (items >= 2) == NATIVE
    total, low, high, count = _scatter_reference(cells, x, n_verts)
    # sums within rounding of any order; minimums, maximums and integer sums exact
    np.testing.assert_allclose(many[0], total, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(one[0], many[0], rtol=1e-5, atol=1e-4)
    for k in (1, 2, 3):  # exact: the same values whatever the split
        assert one[k].tobytes() == many[k].tobytes()
    np.testing.assert_allclose(many[1], low, rtol=1e-6)  # NumPy's sine rounds differently from Warp's
    np.testing.assert_allclose(many[2], high, rtol=1e-6)
    np.testing.assert_array_equal(many[3], count)
    # the same split combines in the same order: the same bits on every run
    for _ in range(3):
        again, _, _ = _run(f, cells, x, threads=0)
        for a, b in zip(many, again, strict=True):
            assert a.tobytes() == b.tobytes()
    # and the record says what it privatised
    plan = next(p for p in registry.plans() if p.target is kp.scatter and not p.adjoint)
    assert plan.private == ((0, "add"), (1, "min"), (2, "max"), (3, "add"))
    info = next(i for i in jw.list_plans() if i.kernel == "scatter")
    assert info.privatised == ("total", "low", "high", "count")


def test_a_cap_of_one_thread_is_warps_own_launch_bit_for_bit() -> None:
    n_cells, n_verts = 3 * _threads.MIN_TASKS, 5_000
    cells, x = _mesh(n_cells, n_verts, 10)
    kernel = jw.jax_kernel(kp.scatter, num_outputs=4, output_dims=n_verts)
    f = jax.jit(lambda c, x: kernel(c, x))
    _run(f, cells, x, threads=0)
    one, pooled, _ = _run(f, cells, x, threads=1)
    assert pooled == 0
    outs = [wp.zeros(n_verts, dtype=t, device="cpu") for t in (float, float, float, int)]
    wp.launch(
        kp.scatter,
        dim=n_cells,
        inputs=[wp.array(cells, dtype=wp.vec4i, device="cpu"), wp.array(x, dtype=float, device="cpu")],
        outputs=outs,
        device="cpu",
    )
    for got, want in zip(one, outs, strict=True):
        assert got.tobytes() == want.numpy().tobytes()


def test_vector_float64_subtractions_and_a_batch() -> None:
    n_cells, n_verts = 2 * _threads.MIN_TASKS, 3_000
    cells, _ = _mesh(n_cells, n_verts, 2)
    x = np.random.default_rng(3).standard_normal((2, n_cells, 3))
    kernel = jw.jax_kernel(kp.scatter_vec, output_dims=n_verts)
    f = jax.jit(lambda x: (jax.vmap(lambda x: kernel(cells, x)[0])(x),))
    with jax.enable_x64(True):
        one, _, _ = _run(f, x, threads=1)
        many, pooled, items = _run(f, x, threads=0)
    assert pooled == (1 if NATIVE else 0)
    assert items > 2 if NATIVE else items == 0  # slices and ranges
    for b in range(2):
        want = np.zeros((n_verts, 3))
        for k in range(4):
            np.subtract.at(want, cells[:, k], x[b] * (k + 1))
        np.testing.assert_allclose(many[0][b], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(one[0][b], want, rtol=1e-12, atol=1e-12)


def test_an_in_out_accumulator_keeps_its_values() -> None:
    n_cells, n_verts = 2 * _threads.MIN_TASKS, 2_000
    cells, x = _mesh(n_cells, n_verts, 4)
    acc = np.arange(n_verts, dtype=np.float32)
    kernel = jw.jax_kernel(kp.accumulate_in_out, in_out_argnames=["acc"])
    f = jax.jit(lambda c, x, a: kernel(c, x, a))
    _run(f, cells, x, acc, threads=1)  # the first call runs on the Python path
    many, pooled, _ = _run(f, cells, x, acc, threads=0)
    want = acc.astype(np.float64)
    np.add.at(want, cells.ravel(), np.repeat(x, 4))
    np.testing.assert_allclose(many[0], want, rtol=1e-5, atol=1e-3)
    assert pooled == (1 if NATIVE else 0)


def test_the_memory_cap_keeps_a_launch_whole_and_bit_identical() -> None:
    n_cells, n_verts = 3 * _threads.MIN_TASKS, 5_000
    cells, x = _mesh(n_cells, n_verts, 5)
    kernel = jw.jax_kernel(kp.scatter, num_outputs=4, output_dims=n_verts)
    f = jax.jit(lambda c, x: kernel(c, x))
    one, _, _ = _run(f, cells, x, threads=1)
    jw.set_cpu_private_bytes(0)  # no copies: no split
    capped, pooled, _ = _run(f, cells, x, threads=0)
    assert pooled == 0
    for a, b in zip(one, capped, strict=True):
        assert a.tobytes() == b.tobytes()
    # room for two ranges' copies: three ranges (the first accumulates into the outputs themselves)
    jw.set_cpu_private_bytes(2 * 4 * 4 * n_verts)
    _, pooled, items = _run(f, cells, x, threads=0)
    assert (pooled, items) == ((1, 3) if NATIVE else (0, 0))


def test_set_cpu_private_bytes_refuses_what_is_not_a_size() -> None:
    with pytest.raises(ValueError, match=r"set_cpu_private_bytes\(n\): n must be a whole number >= 0 \(bytes"):
        jw.set_cpu_private_bytes(-1)


# -- the work threshold ---------------------------------------------------------------------------------------------


def test_a_few_long_threads_split_by_their_measured_cost() -> None:
    size = 1024  # far below the task threshold
    x = np.random.default_rng(6).standard_normal(size).astype(np.float32)
    kernel = jw.jax_kernel(kp.long_threads_own)
    f = jax.jit(lambda x: kernel(x, 2000))
    first, pooled, _ = _run(f, x, threads=0)  # Python path, then timed whole by the handler
    assert pooled == 0
    for _ in range(3):
        _run(f, x, threads=0)
    many, pooled, items = _run(f, x, threads=0)
    assert pooled == (1 if NATIVE else 0)
    assert (items >= 2) == NATIVE
    assert many[0].tobytes() == first[0].tobytes()  # race-free: bit-identical however it is split


def test_a_short_launch_with_few_threads_stays_whole() -> None:
    x = np.random.default_rng(7).standard_normal(1024).astype(np.float32)
    kernel = jw.jax_kernel(kp.long_threads_own)
    f = jax.jit(lambda x: kernel(x, 1))
    for _ in range(5):
        _, pooled, _ = _run(f, x, threads=0)
        assert pooled == 0


def test_a_privatised_launch_splits_by_its_estimated_work_only() -> None:
    # an accumulating kernel with few long threads splits from its first native call (its split, which decides the
    # rounding of its sums, never depends on timing); a small one never gets a ranged entry point
    x = np.random.default_rng(8).standard_normal(1024).astype(np.float32)
    kernel = jw.jax_kernel(kp.long_threads, output_dims=16)
    f = jax.jit(lambda x: kernel(x, 2000))
    _run(f, x, threads=0)  # the Python path
    first, pooled, items = _run(f, x, threads=0)
    assert pooled == (1 if NATIVE else 0)
    for _ in range(3):
        again, _, more = _run(f, x, threads=0)
        assert again[0].tobytes() == first[0].tobytes()
        assert more == items
    cells, values = _mesh(256, 64, 9)
    small = jw.jax_kernel(kp.scatter, num_outputs=4, output_dims=64)
    g = jax.jit(lambda c, v: small(c, v))
    for _ in range(3):
        _, pooled, _ = _run(g, cells, values, threads=0)
        assert pooled == 0


# -- the reverse pass -----------------------------------------------------------------------------------------------


def _springs(n_springs: int, n_verts: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    start = rng.integers(0, n_verts, n_springs)
    edges = np.stack([start, (start + rng.integers(1, n_verts, n_springs)) % n_verts], axis=1).astype(np.int32)
    x = rng.standard_normal((n_verts, 3))
    rest = rng.uniform(0.5, 1.5, n_springs)
    return edges, x, rest


def _spring_gradient(edges: np.ndarray, x: np.ndarray, rest: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
    """The spring energy's gradient in x and in rest, in NumPy."""
    d = x[edges[:, 1]] - x[edges[:, 0]]
    length = np.linalg.norm(d, axis=1)
    stretch = length - rest
    force = (k * stretch / length)[:, None] * d
    gx = np.zeros_like(x)
    np.add.at(gx, edges[:, 1], force)
    np.subtract.at(gx, edges[:, 0], force)
    return gx, -k * stretch


def _backward_alone(f, x: np.ndarray) -> tuple[object, object, np.ndarray]:
    """``f``'s backward pass jitted on its own (the forward launch run once, eagerly), its VJP and a cotangent of
    ones: the pool counts of a call of it are the backward launch's alone."""
    out, vjp = jax.vjp(f, x)
    return jax.jit(lambda vjp, ct: vjp(ct)), vjp, np.ones(np.shape(out), np.float32)


def _adjoint_plan(kernel: wp.Kernel) -> object:
    return next(p for p in registry.plans() if p.target is kernel and p.adjoint)


def test_a_scattering_adjoint_splits_with_private_copies_and_matches_numpy() -> None:
    # Warp's adjoint of a gather (x[edges[e][0]]) scatters into x's gradient: each index range gets its own copy
    n_springs, n_verts, k = 3 * _threads.MIN_TASKS, 4_000, 3.0
    edges, x, rest = _springs(n_springs, n_verts, 11)
    kernel = jw.jax_kernel(kp.spring_energy, output_dims=1, enable_backward=True)
    grad = jax.jit(jax.grad(lambda x, rest: kernel(edges, x, rest, k)[0][0], argnums=(0, 1)))
    with jax.enable_x64(True):
        one, pooled_one, _ = _run(grad, x, rest, threads=1)
        many, pooled, items = _run(grad, x, rest, threads=0)
        again = [_run(grad, x, rest, threads=0)[0] for _ in range(2)]
    assert pooled_one == 0
    # the backward launch splits (grad needs no forward output, so XLA drops the forward launch)
    assert pooled == (1 if NATIVE else 0)
    assert (items >= 2) == NATIVE
    gx, grest = _spring_gradient(edges, x, rest, k)
    for got in (one, many):
        np.testing.assert_allclose(got[0], gx, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got[1], grest, rtol=1e-10, atol=1e-10)
    for run in again:  # the same split combines in the same order: the same bits on every call
        assert all(a.tobytes() == b.tobytes() for a, b in zip(many, run, strict=True))
    plan = _adjoint_plan(kp.spring_energy)
    names = [p.spec.name for p in plan.params]
    # x and rest are differentiated (copied per range); edges is not (no adjoint buffer at all)
    index = {p.spec.name: p.adjoint.index for p in plan.params}
    assert plan.private == ((index["x"], "add"), (index["rest"], "add"))
    assert plan.params[names.index("edges")].adjoint.source == "none"
    # its cotangent result is neither zero-filled nor read back
    assert plan.params[names.index("edges")].primal.index not in plan.zero_results
    assert {index["x"], index["rest"]} <= set(plan.zero_results)
    info = next(i for i in jw.list_plans() if i.kernel == "spring_energy" and i.name.endswith("(adjoint)"))
    assert info.privatised == ("x", "rest")


def test_an_adjoint_without_copies_is_race_free_and_a_cap_of_one_keeps_it_whole() -> None:
    # only x is differentiated, and the struct holding the mesh is not: no copy of it, none of the integer edges
    n_springs, n_verts, k = 3 * _threads.MIN_TASKS, 4_000, 2.0
    edges, x, rest = _springs(n_springs, n_verts, 12)
    kernel = jw.jax_kernel(kp.spring_energy_struct, launch_dims=n_springs, output_dims=1, enable_backward=True)
    springs = {"edges": edges, "rest": rest}
    grad = jax.jit(jax.grad(lambda x: kernel(springs, x, k)[0][0], argnums=(0,)))
    with jax.enable_x64(True):
        one, pooled_one, _ = _run(grad, x, threads=1)
        many, pooled, _ = _run(grad, x, threads=0)
    assert pooled_one == 0
    assert pooled == (1 if NATIVE else 0)
    gx, _ = _spring_gradient(edges, x, rest, k)
    np.testing.assert_allclose(one[0], gx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(many[0], gx, rtol=1e-10, atol=1e-10)
    plan = _adjoint_plan(kp.spring_energy_struct)
    names = [p.spec.name for p in plan.params]
    assert plan.params[names.index("springs")].adjoint.source == "none"
    assert plan.private == ((plan.params[names.index("x")].adjoint.index, "add"),)


def test_a_race_free_forward_with_a_neighbours_adjoint_is_exact_when_split() -> None:
    # every thread stores its own element, but reads its neighbour's x: the adjoint accumulates into two elements
    n = 3 * _threads.MIN_TASKS
    x = np.random.default_rng(13).standard_normal(n).astype(np.float32)
    kernel = jw.jax_kernel(kp.own_and_neighbour, enable_backward=True)
    # the backward launch alone (its forward is timed before it may split; this one needs no timing)
    backward, vjp, ct = _backward_alone(lambda x: kernel(x)[0], x)
    one, _, _ = _run(backward, vjp, ct, threads=1)
    many, pooled, _ = _run(backward, vjp, ct, threads=0)
    assert pooled == (1 if NATIVE else 0)
    want = np.roll(x, 1) + np.roll(x, -1)  # d/dx_i of sum_j x_j x_(j+1)
    np.testing.assert_allclose(many[0], want, rtol=1e-6)
    # two contributions per element, each range's copy holding at most one of them: the same sum in any order
    assert many[0].tobytes() == one[0].tobytes()
    plan = _adjoint_plan(kp.own_and_neighbour)
    assert plan.private == ((0, "add"),)


def test_an_adjoint_through_own_index_stores_and_an_in_out_accumulator_splits_correctly() -> None:
    # a race-free forward that reads back what it stored (at its own index) and an in-out accumulator: their
    # cotangents are touched at one thread's own index or only read, so they need no copy
    n = 3 * _threads.MIN_TASKS
    rng = np.random.default_rng(14)
    x = rng.standard_normal(n).astype(np.float32)
    cells = rng.integers(0, 100, (n, 4)).astype(np.int32)
    stored = jw.jax_kernel(kp.stored_then_read, enable_backward=True)
    acc = jw.jax_kernel(kp.accumulate_in_out, in_out_argnames=["acc"], enable_backward=True)
    for f, kernel, want, private in (
        (lambda x: stored(x)[0], kp.stored_then_read, np.full(n, 2.0, np.float32), ((0, "add"),)),
        (
            lambda x: acc(cells, x, np.zeros(100, np.float32))[0],
            kp.accumulate_in_out,
            np.full(n, 4.0, np.float32),
            ((1, "add"),),
        ),
    ):
        backward, vjp, ct = _backward_alone(f, x)
        _run(backward, vjp, ct, threads=1)  # the first call runs on the Python path
        got, pooled, _ = _run(backward, vjp, ct, threads=0)
        assert pooled == (1 if NATIVE else 0), kernel.key
        np.testing.assert_allclose(got[0], want, rtol=1e-6)
        assert _adjoint_plan(kernel).private == private


def test_a_function_with_a_user_written_adjoint_keeps_the_backward_launch_whole() -> None:
    n = 3 * _threads.MIN_TASKS
    x = np.random.default_rng(15).standard_normal(n).astype(np.float32)
    f = jw.jax_kernel(kp.custom_gradient, enable_backward=True)
    backward, vjp, ct = _backward_alone(lambda x: f(x)[0], x)
    _run(backward, vjp, ct, threads=0)
    got, pooled, _ = _run(backward, vjp, ct, threads=0)
    assert pooled == 0
    np.testing.assert_allclose(got[0], 2.0, rtol=1e-6)
    plan = _adjoint_plan(kp.custom_gradient)
    assert (plan.race_free, plan.private) == (False, ())
