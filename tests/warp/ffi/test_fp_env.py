"""Tests of `jarp.warp._ffi._native._fp_env.default_fp_env`: host code on XLA's CPU threads packs subnormals as they are."""

from __future__ import annotations

import ctypes

import jax
import jax.numpy as jnp
import warp as wp

from jarp.warp import jax_callable
from jarp.warp._ffi._native._fp_env import default_fp_env

_SEEN: list[tuple[float, float, float]] = []


def _probe(x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    """Runs on an XLA CPU thread: converts a float32 subnormal before, inside and after the block."""
    before = ctypes.c_float(1e-45).value
    with default_fp_env():
        inside = ctypes.c_float(1e-45).value
    after = ctypes.c_float(1e-45).value
    _SEEN.append((before, inside, after))


def test_default_env_inside_the_block_and_the_callers_restored_after() -> None:
    _SEEN.clear()
    jax_callable(_probe)(jnp.zeros(1, jnp.float32))
    jax.effects_barrier()
    ((before, inside, after),) = _SEEN
    assert inside == ctypes.c_float(1e-45).value > 0.0  # as on this (default-environment) thread
    assert after == before  # XLA's environment (flush to zero on x86 and AArch64) is put back


def test_no_op_on_a_default_thread() -> None:
    with default_fp_env():
        assert ctypes.c_float(1e-45).value > 0.0
    assert ctypes.c_float(1e-45).value > 0.0
