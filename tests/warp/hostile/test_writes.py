"""Hostile input: kernels that write into their inputs, and in-out arguments.

A kernel that writes an input not declared in-out (a store, an augmented assignment, an atomic, a vector component, or
in ways the analysis misses: ``atomic_or``, a local alias, a ``@wp.func``) is refused at construction naming the
argument, or the caller's array stays intact; in-out arguments never change the caller's array however they are passed
(twice, under ``jit``, as a loop carry, unbatched under ``vmap``). The modules, their NumPy references and the checks
are in ``tests/support/hostile.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels as k
from tests.support import kernels_hostile as kh
from tests.support.hostile import (
    CASES,
    KINDS,
    _no_hang,  # noqa: F401 (autouse fixture)
    assert_unchanged,
    call,
    check_error,
    check_result,
    snapshot,
)

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


# ======================================================================================================================
# Kernels that write into an input not declared in-out: refused at construction, or the caller's array stays intact
# ======================================================================================================================

WRITERS = {
    "overwrite": kh.overwrite_input_kernel,
    "augassign": kh.augassign_input_kernel,
    "atomic_add": kh.atomic_input_kernel,
    "vector component": kh.vec_component_input_kernel,
}
MISSED_WRITERS = {
    "atomic_or": kh.atomic_or_input_kernel,
    "local alias": kh.alias_input_kernel,
    "@wp.func": kh.func_input_kernel,
}


def _victim(kernel: wp.Kernel) -> np.ndarray:
    if kernel is kh.vec_component_input_kernel:
        return np.ones((3, 3), np.float32)
    if kernel is kh.atomic_or_input_kernel:
        return np.ones(3, np.int32)
    return np.ones(3, np.float32)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_kernel_writing_an_undeclared_input_is_refused_at_construction(writer):
    with pytest.raises(ValueError, match="victim") as excinfo:
        jax_kernel(WRITERS[writer])
    msg = check_error(excinfo, "'victim'")
    assert "in_out_argnames" in msg, msg


@pytest.mark.parametrize("writer", list(WRITERS))
def test_declaring_the_written_input_in_out_returns_it_and_keeps_the_callers_array(writer):
    kernel = WRITERS[writer]
    module = jax_kernel(kernel, num_outputs=2, in_out_argnames=["victim"])
    for x in (jnp.asarray(_victim(kernel)), _victim(kernel)):
        snap = snapshot([x])
        victim, _ = module(x)
        assert not np.array_equal(np.asarray(victim), np.asarray(x)), "the kernel's write is returned"
        assert_unchanged(snap)


def build_or_refusal(build: Callable[..., Any], target: Any) -> tuple[Any, str | None]:
    try:
        return build(target), None
    except ValueError as e:
        return None, str(e)


def _assert_call_keeps_the_callers_array(module: Any, x: Any) -> None:
    snap = snapshot([x])
    jax.block_until_ready(module(x))
    assert_unchanged(snap)


@pytest.mark.parametrize("writer", list(MISSED_WRITERS))
def test_kernel_writing_an_input_in_ways_the_analysis_misses(writer):
    kernel = MISSED_WRITERS[writer]
    module, refusal = build_or_refusal(jax_kernel, kernel)
    if refusal is not None:  # refused at construction: fine, if it names the argument
        assert "'victim'" in refusal, refusal
        return
    _assert_call_keeps_the_callers_array(module, jnp.asarray(_victim(kernel)))


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_jax_callable_launching_a_kernel_that_writes_an_input(mode):
    module, refusal = build_or_refusal(jax_callable, kh.overwrite_input_func)
    if refusal is not None:
        assert "'victim'" in refusal, refusal
        return
    x = jnp.asarray(np.ones(3, np.float32))
    snap = snapshot([x])
    jax.block_until_ready(call(module, [x], mode))
    assert_unchanged(snap)


def test_jax_callable_writing_an_input_leaves_numpy_callers_intact():
    # NumPy inputs are copied into XLA buffers, so the write cannot reach them (JAX inputs: the test above)
    x = np.ones(3, np.float32)
    jax.block_until_ready(jax_callable(kh.overwrite_input_func)(x))
    np.testing.assert_array_equal(x, np.ones(3, np.float32))


# ======================================================================================================================
# In-out arguments: the caller's array never changes (XLA copies it), however it is passed
# ======================================================================================================================


@pytest.mark.parametrize("kind", KINDS)
def test_in_out_arguments_leave_the_callers_array_intact(kind):
    module = CASES["accumulate"].module(kind)
    a = jnp.asarray(np.arange(3, dtype=np.float32))
    acc = jnp.asarray(np.full(3, 10, np.float32))
    acc_np = np.full(3, 10, np.float32)
    snap = snapshot([a, acc, acc_np])
    want = np.float32([10, 11, 12])
    check_result(module(a, acc), [want])
    check_result(module(a, acc_np), [want])
    check_result(jax.jit(module)(a, acc), [want])
    # the same array as input and in-out argument
    check_result(module(acc, acc), [np.full(3, 20, np.float32)])
    check_result((jax.jit(lambda x: module(x, x)[0] - x)(acc),), [np.full(3, 10, np.float32)])
    # the in-out input is still read after the call inside the same jit
    f = jax.jit(lambda a, acc: (module(a, acc)[0], acc * 2, module(a, acc)[0] + acc))
    check_result(f(a, acc), [want, np.full(3, 20, np.float32), want + 10])
    # a loop carry, and an unbatched in-out argument under vmap (each batch slice gets its own copy)
    loop = jax.jit(lambda c: jax.lax.fori_loop(0, 3, lambda i, c: module(a, c)[0], c))
    check_result((loop(acc),), [np.float32([10, 13, 16])])
    for method in ("sequential", "broadcast_all"):
        batched = jax.vmap(partial(module, vmap_method=method), in_axes=(0, None))
        (out,) = batched(jnp.ones((2, 3)), acc)
        np.testing.assert_array_equal(out, np.full((2, 3), 11, np.float32))
    assert_unchanged(snap)


def test_a_scatter_spelled_plus_equals_reads_its_index_array() -> None:
    # ``out[indices[i]] += w[i]`` writes ``out`` only; ``indices`` is an input (it was once taken for a written one,
    # and the kernel refused as writing an input).
    scatter = jax_kernel(k.scatter_plus_kernel, num_outputs=1, output_dims={"out": 4})
    indices = np.array([0, 3, 3, 1, 0, 3], np.int32)
    weights = np.array([1.0, 2.0, 0.5, 4.0, 0.25, 8.0], np.float32)
    (out,) = jax.jit(lambda i, w: scatter(i, w))(jnp.asarray(indices), jnp.asarray(weights))
    np.testing.assert_array_equal(out, np.bincount(indices, weights, minlength=4).astype(np.float32))
