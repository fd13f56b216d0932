"""CPU threads (`jarp/warp/_ffi/_threads.py` and the pool work of `jarp/warp/_ffi/_native/_handler.cpp`).

The native handler runs the batch slices of a CPU call, and index ranges of one launch of a provably race-free
kernel, on XLA's intra-op thread pool. Whatever the thread cap, the results must be bit-identical to one thread's;
kernels with tiles or ``printf`` are never split into ranges (accumulating kernels split with private copies:
``test_privatised.py``); small calls never reach the pool.
The Python launch path (``JARP_LAUNCH=python``) runs everything on the calling thread: the values are the same.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st

import jarp.warp as jw
from jarp.warp._ffi import _native, _threads
from tests.support import forked
from tests.support.kernels_tiles import tile_copy
from tests.support.paths import REPO

# The launches run again on the Python path (which never splits: ``pooled == 0`` there); the settings do not depend
# on the path, so their tests (the first section, several starting a process) run once.
both_paths = pytest.mark.launch_paths
# They count threads and splits of the native launch, which checking mode replaces by a checked one-thread launch.
pytestmark = pytest.mark.native_launches

NATIVE = os.environ.get(_native.ENV, "native") != "python"


@wp.kernel
def relax(x: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    for _ in range(4):
        v = wp.sin(v) * w[i] + 0.5 * v
    out[i] = v


@wp.kernel
def relax2d(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = wp.cos(x[i, j]) * x[i, j] + float(j)


@wp.kernel
def histogram(x: wp.array(dtype=float), bins: wp.array(dtype=float)):
    i = wp.tid()
    b = int(wp.floor(wp.abs(x[i]) * 4.0)) % 8
    wp.atomic_add(bins, b, x[i])


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = jw.cpu_threads()
    yield
    jw.set_cpu_threads(before)


def _pool_calls() -> int:
    native = _native.active()
    return native.pool_stats()[0] if native is not None else 0


def _both(f, *args):
    """``f(*args)`` with one thread and with every thread: (one, many, pool calls the second made)."""
    jw.set_cpu_threads(1)
    one = np.asarray(jax.block_until_ready(f(*args)))
    jw.set_cpu_threads(0)
    before = _pool_calls()
    many = np.asarray(jax.block_until_ready(f(*args)))
    return one, many, _pool_calls() - before


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# -- the setting --


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_set_cpu_threads_refuses_what_is_not_a_count(bad: object, restore_threads: None) -> None:
    with pytest.raises(ValueError, match=r"set_cpu_threads\(n\): n must be a whole number >= 0"):
        jw.set_cpu_threads(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.5, "100", True, None])
def test_set_cpu_linger_us_refuses_what_is_not_a_duration(bad: object) -> None:
    with pytest.raises(ValueError, match=r"set_cpu_linger_us\(n\): n must be a whole number >= 0 \(microseconds"):
        jw.set_cpu_linger_us(bad)  # type: ignore[arg-type]


def test_set_cpu_linger_us_round_trips_and_reaches_the_handler(linger: Callable[[int], None]) -> None:
    jw.set_cpu_linger_us(250)
    assert jw.cpu_linger_us() == 250
    assert _threads._settings()[-1] == 250_000  # what the handler receives, in nanoseconds


def test_the_linger_environment_variable_sets_the_default() -> None:
    code = "import jarp.warp as jw; print(jw.cpu_linger_us())"
    run = functools.partial(forked.run, [sys.executable, "-c", code], timeout=120)
    assert run(env={**os.environ, "JARP_CPU_LINGER_US": "0"}).stdout.split()[-1] == "0"
    assert run(env={k: v for k, v in os.environ.items() if k != "JARP_CPU_LINGER_US"}).stdout.split()[-1] == "100"
    bad = run(env={**os.environ, "JARP_CPU_LINGER_US": "soon"})
    assert "JARP_CPU_LINGER_US='soon' must be a whole number >= 0" in bad.stderr


def test_set_cpu_threads_round_trips(restore_threads: None) -> None:
    jw.set_cpu_threads(3)
    assert jw.cpu_threads() == 3
    jw.set_cpu_threads(0)
    assert jw.cpu_threads() == 0


@pytest.mark.parametrize(("value", "expected"), [("1", "1"), (" 4 ", "4"), ("", "0")])
def test_the_environment_variable_sets_the_cap(value: str, expected: str) -> None:
    code = "import jarp.warp as jw; print(jw.cpu_threads())"
    env = {**os.environ, _threads.ENV: value, "JAX_PLATFORMS": "cpu"}
    proc = forked.run([sys.executable, "-c", code], env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == expected


def test_a_bad_environment_variable_names_itself() -> None:
    code = "import jarp.warp as jw; jw.cpu_threads()"
    env = {**os.environ, _threads.ENV: "many", "JAX_PLATFORMS": "cpu"}
    proc = forked.run([sys.executable, "-c", code], env=env, cwd=REPO, timeout=120)
    assert proc.returncode != 0
    assert "JARP_CPU_THREADS='many' must be a whole number >= 0" in proc.stderr


# -- batch slices --


@both_paths
@settings(max_examples=8, deadline=None)
@given(
    batch=st.integers(2, 9),
    extra=st.integers(0, 3000),
    seed=st.integers(0, 2**31 - 1),
)
def test_threaded_batch_slices_are_bit_identical_to_one_thread(batch: int, extra: int, seed: int) -> None:
    size = -(-_threads.MIN_TASKS // batch) + extra  # enough tasks in all to reach the pool
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((batch, size)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(size), jnp.float32)  # broadcast across the batch
    kernel = jw.jax_kernel(relax)
    f = jax.jit(jax.vmap(lambda x: kernel(x, w)[0]))
    before = jw.cpu_threads()
    try:
        one, many, pooled = _both(f, x)
    finally:
        jw.set_cpu_threads(before)
    assert _bits(one) == _bits(many)
    assert pooled == (1 if NATIVE else 0)
    ref = np.asarray(x)
    for _ in range(4):
        ref = np.sin(ref) * np.asarray(w) + 0.5 * ref
    np.testing.assert_allclose(many, ref, rtol=2e-5, atol=2e-5)


@both_paths
def test_two_batch_dims_and_a_2d_launch_are_bit_identical(restore_threads: None) -> None:
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((3, 4, 64, 50)), jnp.float32)
    kernel = jw.jax_kernel(relax2d)
    f = jax.jit(jax.vmap(jax.vmap(lambda x: kernel(x)[0])))
    one, many, pooled = _both(f, x)
    assert _bits(one) == _bits(many)
    assert pooled == (1 if NATIVE else 0)
    j = np.arange(50, dtype=np.float32)
    np.testing.assert_allclose(many, np.cos(np.asarray(x)) * np.asarray(x) + j, rtol=1e-6, atol=1e-6)


@both_paths
def test_the_adjoint_of_a_batched_call_is_bit_identical(restore_threads: None) -> None:
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((8, 6000)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(6000), jnp.float32)
    kernel = jw.jax_kernel(relax, enable_backward=True)
    f = jax.jit(jax.grad(lambda x, w: jnp.sum(jax.vmap(lambda x: kernel(x, w)[0])(x) ** 2), argnums=(0, 1)))

    def both() -> tuple[np.ndarray, np.ndarray]:
        gx, gw = f(x, w)
        return np.concatenate([np.asarray(gx).ravel(), np.asarray(gw).ravel()])

    one, many, pooled = _both(both)
    assert _bits(one) == _bits(many)
    assert pooled >= (1 if NATIVE else 0)


@both_paths
def test_a_small_call_stays_on_the_calling_thread(restore_threads: None) -> None:
    x = jnp.ones((4, 100), jnp.float32)
    w = jnp.ones(100, jnp.float32)
    kernel = jw.jax_kernel(relax)
    _, _, pooled = _both(jax.jit(jax.vmap(lambda x: kernel(x, w)[0])), x)
    assert pooled == 0


@both_paths
def test_a_cap_of_one_keeps_every_call_on_the_calling_thread(restore_threads: None) -> None:
    x = jnp.ones((8, 10_000), jnp.float32)
    w = jnp.ones(10_000, jnp.float32)
    kernel = jw.jax_kernel(relax)
    f = jax.jit(jax.vmap(lambda x: kernel(x, w)[0]))
    jw.set_cpu_threads(0)
    jax.block_until_ready(f(x))  # a plan's first call runs on the Python path (it prepares the native one)
    before = _pool_calls()
    jax.block_until_ready(f(x))
    assert _pool_calls() == before + (1 if NATIVE else 0)  # large enough for the pool
    jw.set_cpu_threads(1)
    before = _pool_calls()
    jax.block_until_ready(f(x))
    assert _pool_calls() == before


# -- index ranges of one launch --


def _items() -> int:
    native = _native.active()
    return native.pool_stats()[1] if native is not None else 0


@both_paths
@settings(max_examples=6, deadline=None)
@given(size=st.integers(2 * _threads.MIN_RANGE, 5 * _threads.MIN_RANGE), seed=st.integers(0, 2**31 - 1))
def test_a_race_free_launch_split_into_ranges_is_bit_identical(size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal(size), jnp.float32)
    w = jnp.asarray(rng.standard_normal(size), jnp.float32)
    kernel = jw.jax_kernel(relax)
    f = jax.jit(lambda x: kernel(x, w)[0])
    before = jw.cpu_threads()
    try:
        items = _items()
        one, many, pooled = _both(f, x)
        items = _items() - items
    finally:
        jw.set_cpu_threads(before)
    assert _bits(one) == _bits(many)
    split = NATIVE and size >= _threads.MIN_TASKS  # below MIN_TASKS a call never reaches the pool
    assert pooled == (1 if split else 0)
    assert (items >= 2) == split  # one launch, several index ranges


@both_paths
def test_a_2d_launch_splits_over_its_flat_index(restore_threads: None) -> None:
    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.standard_normal((300, 257)), jnp.float32)  # ranges end mid-row
    kernel = jw.jax_kernel(relax2d)
    one, many, pooled = _both(jax.jit(lambda x: kernel(x)[0]), x)
    assert _bits(one) == _bits(many)
    assert pooled == (1 if NATIVE else 0)
    j = np.arange(257, dtype=np.float32)
    np.testing.assert_allclose(many, np.cos(np.asarray(x)) * np.asarray(x) + j, rtol=1e-6, atol=1e-6)


@both_paths
def test_a_batched_race_free_launch_splits_slices_and_ranges(restore_threads: None) -> None:
    rng = np.random.default_rng(7)
    x = jnp.asarray(rng.standard_normal((2, 4 * _threads.MIN_RANGE)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(4 * _threads.MIN_RANGE), jnp.float32)
    kernel = jw.jax_kernel(relax)
    items = _items()
    one, many, pooled = _both(jax.jit(jax.vmap(lambda x: kernel(x, w)[0])), x)
    items = _items() - items
    assert _bits(one) == _bits(many)
    assert pooled == (1 if NATIVE else 0)
    assert items > 2 if NATIVE else items == 0  # more items than slices: each slice split too


# -- lingering helpers: a helper that ran out of items joins the next call --


@pytest.fixture
def linger(restore_threads: None) -> Iterator[Callable[[int], None]]:
    """Set how long helpers linger (in nanoseconds here, the handler's unit; the public setting is microseconds)."""
    before = jw.cpu_linger_us()
    yield lambda ns: jw.set_cpu_linger_us(ns // 1000)
    jw.set_cpu_linger_us(before)


def _joins() -> int:
    native = _native.active()
    return native.pool_stats()[2] if native is not None else 0


@pytest.mark.skipif(not NATIVE, reason="the Python launch path runs every launch on the calling thread")
def test_a_lingering_helper_joins_the_next_call_and_changes_no_bit(linger: Callable[[int], None]) -> None:
    rng = np.random.default_rng(11)
    x = jnp.asarray(rng.standard_normal(4 * _threads.MIN_RANGE), jnp.float32)
    w = jnp.asarray(rng.standard_normal(4 * _threads.MIN_RANGE), jnp.float32)
    kernel = jw.jax_kernel(relax)
    f = jax.jit(lambda x: kernel(x, w)[0])
    jw.set_cpu_threads(1)
    one = _bits(np.asarray(jax.block_until_ready(f(x))))
    jw.set_cpu_threads(0)
    linger(1_000_000_000)  # 1 s: back-to-back calls are well within it, even on a loaded machine
    before = _joins()
    # A lingering helper joins a call only if it gets a core before the caller has claimed every item: on a loaded
    # machine that may take a few calls, so call until one is joined (each call is checked bit for bit).
    for _ in range(200):
        assert _bits(np.asarray(jax.block_until_ready(f(x)))) == one
        if _joins() > before:
            break
    assert _joins() > before
    linger(0)  # lingering helpers read the setting at every check: they stop at once, not after their 1 s
    time.sleep(0.05)
    before = _joins()
    for _ in range(3):
        assert _bits(np.asarray(jax.block_until_ready(f(x)))) == one
    assert _joins() == before  # no linger: every helper is a fresh pool task


@pytest.mark.skipif(not NATIVE, reason="the Python launch path runs every launch on the calling thread")
def test_calls_from_several_threads_share_lingering_helpers_correctly(linger: Callable[[int], None]) -> None:
    # Concurrent calls take the open slot from each other; each must still run every item exactly once.
    rng = np.random.default_rng(12)
    xs = [jnp.asarray(rng.standard_normal(3 * _threads.MIN_RANGE + k), jnp.float32) for k in range(4)]
    kernel = jw.jax_kernel(relax)
    f = jax.jit(lambda x: kernel(x, jnp.ones_like(x))[0])
    jw.set_cpu_threads(1)
    expected = [_bits(np.asarray(jax.block_until_ready(f(x)))) for x in xs]
    jw.set_cpu_threads(0)
    linger(5_000_000)

    def run(k: int) -> bool:
        return all(_bits(np.asarray(jax.block_until_ready(f(xs[k])))) == expected[k] for _ in range(10))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(run, range(4)))


# -- kernels that must stay on one thread --


@both_paths
def test_an_accumulating_kernel_splits_with_private_copies_and_stays_exact(restore_threads: None) -> None:
    rng = np.random.default_rng(3)
    # Values whose float32 sums are exact in any order, so the check does not depend on the order of the atomics.
    x = jnp.asarray(rng.integers(-8, 8, 200_000) / 4.0, jnp.float32)
    kernel = jw.jax_kernel(histogram, num_outputs=1, output_dims={"bins": 8})
    f = jax.jit(lambda x: kernel(x)[0])
    one, many, pooled = _both(f, x)
    assert pooled == (1 if NATIVE else 0)  # split, each range into its own copy of `bins` (test_privatised.py)
    assert _bits(one) == _bits(many)
    xs = np.asarray(x)
    expected = np.bincount(np.floor(np.abs(xs) * 4).astype(int) % 8, weights=xs, minlength=8)
    np.testing.assert_array_equal(many, expected.astype(np.float32))


@both_paths
def test_batched_atomic_slices_run_concurrently_each_in_order(restore_threads: None) -> None:
    rng = np.random.default_rng(4)
    # sums depend on order: bit-identity is strict (slices too short to be split into ranges themselves)
    x = jnp.asarray(rng.standard_normal((4, 15_000)), jnp.float32)
    kernel = jw.jax_kernel(histogram, num_outputs=1, output_dims={"bins": 8})
    f = jax.jit(jax.vmap(lambda x: kernel(x)[0]))
    one, many, pooled = _both(f, x)
    assert _bits(one) == _bits(many)  # each slice's atomics run in order on one thread
    assert pooled == (1 if NATIVE else 0)


@both_paths
def test_a_tile_kernel_stays_on_one_thread(restore_threads: None) -> None:
    # Warp's CPU tiles keep their scratch storage in one global of the module: two launches at once would share it.
    x = jnp.asarray(np.random.default_rng(5).standard_normal((4, 8 * 8192)), jnp.float32)
    kernel = jw.jax_kernel(tile_copy, launch_dims=(8192,), output_dims={"out": 8 * 8192})
    f = jax.jit(jax.vmap(lambda x: kernel(x)[0]))
    one, many, pooled = _both(f, x)
    assert pooled == 0
    np.testing.assert_array_equal(many, 2 * np.asarray(x))
    assert _bits(one) == _bits(many)


def test_the_cap_reaches_a_fresh_process_handler() -> None:
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, warp as wp
        import jarp.warp as jw
        from jarp.warp._ffi import _native
        from tests.warp.ffi.test_cpu_threads import relax
        k = jw.jax_kernel(relax)
        f = jax.jit(jax.vmap(lambda x: k(x, jnp.ones(10_000, jnp.float32))[0]))
        for _ in range(2):  # the first call runs on the Python path, the second natively
            jax.block_until_ready(f(jnp.ones((8, 10_000), jnp.float32)))
        print(_native.active().pool_stats()[0])
        """
    )
    env = {**os.environ, _threads.ENV: "1", "JAX_PLATFORMS": "cpu", _native.ENV: "native"}
    proc = forked.run([sys.executable, "-c", code], env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "0"


@both_paths
def test_a_ranged_entry_that_fails_to_build_leaves_the_launch_whole(
    monkeypatch: pytest.MonkeyPatch, restore_threads: None
) -> None:
    from jarp.warp._ffi._native import _ranged

    def fail(*args: object) -> int:
        raise RuntimeError("Warp's bundled Clang failed to compile (a test)")

    monkeypatch.setattr(_ranged, "ranged_cpu_entry", fail)
    size = _threads.MIN_TASKS + 12_345  # a plan no other test made: its executor is built here
    x = jnp.asarray(np.random.default_rng(8).standard_normal(size), jnp.float32)
    w = jnp.ones(size, jnp.float32)
    kernel = jw.jax_kernel(relax)
    f = jax.jit(lambda x: kernel(x, w)[0])
    jw.set_cpu_threads(0)
    if NATIVE:
        with pytest.warns(RuntimeWarning, match=r"could not build its ranged entry point.*one thread"):
            out = np.asarray(f(x))
    else:
        out = np.asarray(f(x))  # the Python path never asks for one
    before = _pool_calls()
    again = np.asarray(jax.block_until_ready(f(x)))
    assert _pool_calls() == before  # one launch, not split
    assert _bits(out) == _bits(again)
    ref = np.asarray(x)
    for _ in range(4):
        ref = np.sin(ref) + 0.5 * ref
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)
